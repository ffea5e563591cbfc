"""``fipstop bench ring``: the side-by-side ring benchmark of issue #2.

One run measures, for payloads of 64/128/256 bytes, one producer thread
logging for a fixed time through each transport:

========================  ==================================================
case                      what the producer thread does per record
========================  ==================================================
``none``                  formats the record into a local buffer (baseline)
``fips_c``                ... then ``fips_log`` (C); a C consumer process drains
``fips_c_batch``          ... 256 records, then one ``fips_log_batch``
``none_python``           Python loop calling ``len(record)`` (Python floor)
``fips_python``           ``Producer.log(record)`` through the binding
``fips_python_batch``     ``Producer.log_batch(list_of_256)``
``syslog``                ``syslog(3)`` to an rsyslogd the bench starts
``file``                  ``write(2)`` of the line to a file (O_APPEND)
``unix_dgram``            ``send(2)`` on a unix datagram socket to a receiver
========================  ==================================================

plus the latency of a monitor snapshot of a domain with 1024 live rings and
the producer throughput with and without a monitor snapshotting at 10 Hz
(interleaved A/B runs).  The issue's targets are reported as target vs
measured with pass/fail; nothing here asserts them.

The C side is ``bench/ring/ringbench.c``, built on demand with ``cc -O2``
together with ``fipstop/csrc/fips.c`` into ``build/bench/`` (or a temporary
directory when the tree is read-only).  The Python cases run in a child
process (``python -m fipstop.bench.ring.pychild produce ...``).

``FIPSTOP_BENCH_DURATION`` (seconds per case) overrides the duration; the unit
test sets it to 0.05.

``--against REV`` (default ``e536b36^``, the code before issue 14's fixes)
runs, instead of all this, only ``fips_c`` for this libfips against REV's
(REV's fips.c, its headers and its own ringbench.c from ``git show``, built
alike in ``build/bench/against-<rev>/``): A B B A rounds at 64/128/256 B with
an A/A control, the median of the per-round ratios, what each side attempted,
delivered and dropped, fips_log's instructions per record under callgrind,
and ``uptime`` before and after (:mod:`fipstop.bench.ring.against`); the result
goes to ``bench/results/ring-against-<UTC stamp>.json``.
"""
