"""``fipstop bench bind``: a real BIND 9 under dnsperf load, per logging mode (issue #3).

One run starts named (Debian's, ``named -f -c CONF -n 2``) on 127.0.0.1 on a
port of its own, once per mode and round, and loads it with

    dnsperf -s 127.0.0.1 -p PORT -d queries.txt -l S -c 8 -T 2 -q 200

for S seconds.  The modes differ only in where the ``queries`` category goes
(every other category goes to a file channel in every mode):

===============  ==============================================================
mode             query logging
===============  ==============================================================
``none``         ``querylog no`` (the baseline)
``null_syslog``  a syslog channel, with syslog(3) replaced (LD_PRELOAD) by a
                 no-op (bench/bind/nullsyslog.c): BIND still builds every
                 query line, nothing is sent.  The floor for any transport
                 behind syslog(3); the gap to ``none`` is BIND's own cost
``file``         a BIND file channel (``print-time yes``) in the temp dir
``syslog``       a syslog channel; named runs in a private mount namespace whose
                 ``/dev/log`` is the socket of an rsyslogd of the bench's own,
                 which writes to a file (see fipstop/bench/rsyslog.py)
``fips``         a syslog channel, named started by ``fipstop wrap`` (the
                 LD_PRELOAD shim logs into FIPS rings); a small C consumer
                 (bench/bind/drain.c) drains the rings and counts the lines
``fips_nocons``  the same with no consumer: the rings fill and drop (counted)
``fips_tail``    (optional, ``--modes``) the shim with ``fipstop tail > /dev/null``
                 as the consumer: what a Python consumer costs on this machine
``fips_bind``    named started by ``fipstop wrap --bind``: the queries category
                 taken at ns_client_log (libfips_bind.so), the C drain
``dnstap``       ``querylog no`` and named's own ``dnstap { auth query; }`` to
                 ``fstrm_capture``; the AUTH_QUERY frames in its file counted
                 (:mod:`~fipstop.bench.bind.dnstap`)
===============  ==============================================================

Rounds alternate the order of the modes (ABBA), and named's CPU per query is
also reported as a per-round difference to ``none`` and to ``null_syslog``.
``--callgrind`` (:mod:`~fipstop.bench.bind.callgrind`) counts named's
instructions per request instead, and ``--scaling K-K``
(:mod:`~fipstop.bench.bind.scaling`) loads it from 2^K source addresses.

For each mode it reports queries/s (dnsperf's "Queries per second") and its
ratio to ``none`` (the median of per-round ratios: rounds run the modes back to
back, so each ratio pairs runs that are close in time), the log lines recorded
vs the queries answered, the FIPS ring counters (committed / dropped /
truncated: drops are counted, none silent), and the CPU time named and the
logging helper (rsyslogd, the drain) used during the load.  The issue's
targets are reported as target vs measured with pass/fail; nothing here
asserts them.  Results go to bench/results/bind-<date>.json and
bind-latest.json (or ``--out PATH``) with the exact command, machine, load
average and date.

Modules: :mod:`~fipstop.bench.bind.modes` (the modes, one run's figures, the
config), :mod:`~fipstop.bench.bind.dns` (zone, queries, named.conf,
dnsperf), :mod:`~fipstop.bench.bind.hostload` (how busy the machine is),
:mod:`~fipstop.bench.bind.procs` (named and the drain),
:mod:`~fipstop.bench.bind.run` (the bench), :mod:`~fipstop.bench.bind.report`
(ratios, targets, the table), :mod:`~fipstop.bench.bind.shim` (the shim's cost
per call).
"""
