"""What the /proc thread sampler costs: its own CPU at HZ on an 8-thread process.

    python tests/progs/sampler_cost.py [contend|sleep] [hz] [seconds]

``contend``: the C program of tests/progs/contend.c with 8 threads on one
mutex; ``sleep``: a Python process with 8 sleeping threads.  Prints the
sampler's self-measured CPU (thread time) and this whole process's CPU
(rusage) as a share of one CPU, and the tick rate it achieved."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

from fipstop.bench.cbuild import build_c
from fipstop.probes.threads import ThreadSampler


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "contend"
    hz = float(sys.argv[2]) if len(sys.argv) > 2 else 100.0
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    if mode == "contend":
        binary, why, _ = build_c("contend", (Path(__file__).with_name("contend.c"),))
        if binary is None:
            sys.exit(why)
        p = subprocess.Popen([str(binary), "8", str(int(seconds) + 5)], stdout=subprocess.PIPE, text=True)
        p.stdout.readline()
    else:
        p = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "[threading.Thread(target=time.sleep, args=(600,), daemon=True).start() "
                              "for _ in range(7)]\ntime.sleep(600)"])
    try:
        time.sleep(0.5)
        s = ThreadSampler(p.pid, hz=hz)
        s.start()
        s.sample()
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        time.sleep(seconds)
        r = s.sample()
        r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
        s.close()
    finally:
        p.kill()
        p.wait()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(f"{mode}: {len(r.threads)} threads, {r.hz_achieved:.1f}/{hz:g} Hz, sampler thread CPU "
          f"{r.sampler_cpu_pct:.2f}% of one CPU, whole process {100 * cpu / wall:.2f}%")


if __name__ == "__main__":
    main()
