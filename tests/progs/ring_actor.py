"""Scripted ring actors for the diagnosis scenarios (tests/integration/test_diagnose.py).

    ring_actor.py produce DOMAIN SHM RATE SECONDS [RING_BYTES]
    ring_actor.py consume DOMAIN SHM NAME SECONDS MODE     MODE: fast | slow | burn

``produce`` logs BIND-like query lines at RATE records/s (in batches every
10 ms); ``consume`` reads as a registered consumer: ``fast`` keeps up,
``slow`` sleeps 50 ms after each small batch (the ring fills), ``burn``
keeps up but spins the CPU between reads, and in a second thread (an IPS
whose matching is too expensive).  Each prints "ready" once registered.
"""

import sys
import time

from fipstop._fips import Consumer, Domain, Producer


def produce(domain: str, shm: str, rate: float, seconds: float, ring: int) -> None:
    dom = Domain(domain, shm, max_rings=8, max_consumers=4, ring_capacity=ring, max_record=512)
    p = Producer(dom)
    line = b"client @0x7f00 10.0.%d.%d#5353 (example.com): query: example.com IN A +E(0) (127.0.0.1)"
    print("ready", flush=True)
    end = time.monotonic() + seconds
    t, n, i = time.monotonic(), max(1, int(rate / 100)), 0
    while time.monotonic() < end:
        p.log_batch([line % ((i + k) >> 8 & 255, (i + k) & 255) for k in range(n)])
        i += n
        t += 0.01
        now = time.monotonic()
        if now - t > 0.05:  # stalled (a loaded machine): go on at RATE, no catch-up burst
            t = now
        time.sleep(max(0.0, t - now))


def consume(domain: str, shm: str, name: str, seconds: float, mode: str) -> None:
    dom = Domain(domain, shm)
    c = Consumer(dom, name)
    if mode == "burn":
        # two more matching threads (hashlib drops the GIL): the process wants
        # three cores on a two-core machine, so it stays saturated (running or
        # waiting for a CPU) even when the VM's host steals some of them
        import hashlib
        import threading

        def spin() -> None:
            block = bytes(1 << 20)
            while True:
                hashlib.sha256(block).digest()

        for _ in range(2):
            threading.Thread(target=spin, daemon=True).start()
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        b = c.read()
        if b is not None:
            c.release(b)
        if mode == "slow":
            time.sleep(0.05)
        elif mode == "burn":
            x = 0
            for k in range(20000):  # matching that costs too much
                x = (x * 31 + k) % 1000003
        elif b is None:
            time.sleep(0.005)
    c.close()


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        produce(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]),
                int(sys.argv[6]) if len(sys.argv) > 6 else 1 << 16)
    else:
        consume(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6])
