"""CPU time of the processes on both ends of the rings (producers, consumers).

The diagnosis needs to tell "the consumer is slow because it is CPU-bound" from
"the consumer is slow because it waits": that is its CPU share over the
window.  This probe reads ``/proc/PID/stat`` (utime + stime, in clock ticks,
plus the thread count) for a set of pids given by a callable - the pids the
ring probe last saw - so it costs one small read per process per poll.
Cumulative ticks are stored raw; :func:`fipstop.model.cpu.derive_cpu`
derives each process's share of one core between two samples.

A pid that vanished is simply absent from the sample; a malformed stat line
(comm may contain anything, even ``) (``) is parsed from the last ``)``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fipstop.probes import names

__all__ = ["ProcCpu", "ProcCpuProbe", "ProcCpuSample"]

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class ProcCpu:
    pid: int
    comm: str  # raw: escape before showing
    cpu_ticks: int  # utime + stime, cumulative
    threads: int
    #: time its threads spent runnable but waiting for a CPU (schedstat), cumulative; -1 unknown
    runqueue_ns: int = -1


@dataclass(frozen=True)
class ProcCpuSample:
    taken_mono_ns: int
    clk_tck: int = CLK_TCK
    procs: tuple[ProcCpu, ...] = ()
    unavailable: str = ""

    def get(self, pid: int) -> ProcCpu | None:
        for p in self.procs:  # a few processes: a scan is cheaper than keeping an index
            if p.pid == pid:
                return p
        return None


def _read(path: str, limit: int) -> bytes:
    """One read of a small /proc file: os.open/os.read, a third of what a
    Python file object costs, which matters at 64 threads per process."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def parse_stat(text: str) -> tuple[str, int, int] | None:
    """(comm, utime + stime, threads) of a /proc/PID/stat line, or None."""
    lp, rp = text.find("("), text.rfind(")")
    if lp < 0 or rp < lp:
        return None
    f = text[rp + 2:].split()
    try:
        return text[lp + 1:rp][:64], int(f[11]) + int(f[12]), int(f[17])
    except (IndexError, ValueError):
        return None


class ProcCpuProbe:
    name = names.CPU

    def __init__(self, pids: Callable[[], Iterable[int]], *, procfs_root: str = "/proc", max_pids: int = 256) -> None:
        self.pids = pids
        self.root = procfs_root
        self.max_pids = max_pids

    def available(self) -> tuple[bool, str]:
        if not os.path.isdir(self.root):
            return False, f"{self.root}: no procfs"
        return True, ""

    def _runqueue_ns(self, pid: int, max_threads: int = 64) -> int:
        total = 0
        task = os.path.join(self.root, str(pid), "task")
        try:
            tids = os.listdir(task)[:max_threads]
        except OSError:
            return -1
        for tid in tids:
            try:
                total += int(_read(f"{task}/{tid}/schedstat", 256).split()[1])
            except (OSError, IndexError, ValueError):
                continue
        return total

    def sample(self) -> ProcCpuSample:
        t = time.monotonic_ns()
        ok, why = self.available()
        if not ok:
            return ProcCpuSample(t, unavailable=why)
        out = []
        for pid in sorted({int(p) for p in self.pids() if int(p) > 0})[: self.max_pids]:
            try:
                text = _read(f"{self.root}/{pid}/stat", 4096).decode("utf-8", "replace")
            except OSError:
                continue
            parsed = parse_stat(text)
            if parsed is not None:
                out.append(ProcCpu(pid, parsed[0], parsed[1], parsed[2], self._runqueue_ns(pid)))
        return ProcCpuSample(t, CLK_TCK, tuple(out))

    def close(self) -> None:
        """Nothing to release: every sample opens and closes what it reads."""
