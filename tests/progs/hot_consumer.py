"""A CPU-bound Python consumer: one thread burns CPU in ``crunch_records``
while another waits for work (idle), so a profiler must name the hot
function.  Prints "ready" and runs until killed (or argv[1] seconds)."""

import sys
import threading
import time


def crunch_records(n: int) -> int:
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1000003
    return acc


def idle_reader(ev: threading.Event) -> None:
    while not ev.wait(0.2):
        pass


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    ev = threading.Event()
    threading.Thread(target=idle_reader, args=(ev,), name="idle-reader", daemon=True).start()
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        crunch_records(20000)
    ev.set()


if __name__ == "__main__":
    main()
