"""Scripted ring actors that write down their own ground truth (tests/integration/test_oracle.py).

    oracle_actor.py produce DOMAIN SHM OUT.npz SPEC_JSON
    oracle_actor.py consume DOMAIN SHM OUT.txt NAME [STOP_AT_S]

``produce`` creates nothing: the test creates the domain.  SPEC_JSON is a list
of threads ``{"name", "rate", "stop_s"}``: each thread takes a ring of its own,
logs one fixed-size record at a time at ``rate`` records/s (in steps of 10 ms)
and exits at ``stop_s`` (closing its ring).  Per thread it keeps the realtime
just before ``log`` was called and right after it returned (the record was
committed or dropped between the two, however loaded the machine) of every
record committed and of every record dropped, and its ring slot; all of it goes to OUT.npz when
every thread has exited.  The ring's own counters and timestamps are what
the dashboard reads; these are the producer's own account, kept apart.

``consume`` registers NAME and reads and releases batches of at most 64
records, writing after each release one line ``R t_ns ring next_seq count``;
at STOP_AT_S seconds after it printed "ready" it writes ``S t_ns`` and stops
itself (SIGSTOP), holding nothing; the test continues it (SIGCONT).  When a
read or release says it was evicted it rejoins under the same name and
writes ``J t_ns``.  Each prints "ready" once registered.
"""

import json
import os
import signal
import sys
import threading
import time

import numpy as np

from fipstop._fips import Consumer, Domain, FipsError, Producer

PAYLOAD = 104  # + the 24-byte header: a 128-byte stride


def produce(domain: str, shm: str, out: str, spec: list[dict]) -> None:
    dom = Domain(domain, shm, create=False)
    truth: dict[str, np.ndarray] = {}
    lock = threading.Lock()
    start = threading.Event()

    def thread(i: int, name: str, rate: float, stop_s: float) -> None:
        p = Producer(dom)
        p.set_name(name)
        ok_t: list[int] = []
        ok_before: list[int] = []
        drop_t: list[int] = []
        drop_before: list[int] = []
        per_step = max(1, int(round(rate / 100)))
        start.wait()
        t0 = time.monotonic()
        nxt = t0
        n = 0
        while time.monotonic() - t0 < stop_s:
            for _ in range(per_step):
                rec = (b"%08d " % n).ljust(PAYLOAD, b"x")
                before = time.time_ns()
                ok = p.log(rec)
                (ok_t if ok else drop_t).append(time.time_ns())
                (ok_before if ok else drop_before).append(before)
                n += 1
            nxt += 0.01
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -0.05:  # a loaded machine: go on at the rate, no catch-up burst
                nxt = time.monotonic()
        ring = p.ring
        p.close()
        with lock:
            truth[f"commit_{i}"] = np.asarray(ok_t, dtype=np.int64)
            truth[f"drop_{i}"] = np.asarray(drop_t, dtype=np.int64)
            truth[f"commit_before_{i}"] = np.asarray(ok_before, dtype=np.int64)
            truth[f"drop_before_{i}"] = np.asarray(drop_before, dtype=np.int64)
            truth[f"ring_{i}"] = np.asarray([ring], dtype=np.int64)
            truth[f"exit_{i}"] = np.asarray([time.time_ns()], dtype=np.int64)

    threads = [threading.Thread(target=thread, args=(i, t["name"], float(t["rate"]), float(t["stop_s"])))
               for i, t in enumerate(spec)]
    for t in threads:
        t.start()
    time.sleep(0.2)  # every thread has its producer before the first record
    print("ready", flush=True)
    start.set()
    for t in threads:
        t.join()
    np.savez(out, **truth)
    dom.close()


def consume(domain: str, shm: str, out: str, name: str, stop_at: float | None) -> None:
    dom = Domain(domain, shm, create=False)
    c = Consumer(dom, name)
    f = open(out, "w", buffering=1)
    print("ready", flush=True)
    t0 = time.monotonic()
    stopped = False
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        try:
            b = c.read(64)
            if b is None:
                time.sleep(0.002)
            else:
                ring, nxt, count = b.ring, b.next_seq, b.count
                b.release()
                f.write(f"R {time.time_ns()} {ring} {nxt} {count}\n")
        except FipsError:  # evicted while it was stopped: rejoin under its name (the old handle gone first)
            try:
                c.close()
            except FipsError:
                pass
            c = Consumer(dom, name)
            f.write(f"J {time.time_ns()}\n")
            continue
        if stop_at is not None and not stopped and time.monotonic() - t0 >= stop_at:
            stopped = True
            f.write(f"S {time.time_ns()}\n")
            f.flush()
            os.kill(os.getpid(), signal.SIGSTOP)
    c.close()
    f.close()


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        produce(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]))
    elif sys.argv[1] == "consume":
        consume(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]) if len(sys.argv) > 6 else None)
    else:
        raise SystemExit(__doc__)
