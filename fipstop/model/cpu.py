"""CPU of the processes on both ends of the rings, derived from two samples.

The diagnosis must tell "the consumer is slow because it is CPU-bound" from
"the consumer is slow because it waits", and "CPU-bound" from "starved of a
CPU on an overloaded machine": that is each process's share of one core and
the share of time its threads waited in the run queue over the interval.
Pure: cumulative ticks and nanoseconds of two
:class:`fipstop.probes.proccpu.ProcCpuSample` and their ``taken_mono_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fipstop.probes.proccpu import ProcCpuSample

__all__ = ["CpuView", "ProcessCpu", "cpu_pct", "derive_cpu", "runqueue_pct"]

NAN = float("nan")


@dataclass(frozen=True, slots=True)
class ProcessCpu:
    pid: int
    comm: str  # raw: escape before showing
    threads: int
    cpu_pct: float  # of one core over the interval; NaN: unknown (no baseline, or the pid is new)
    runqueue_pct: float  # of one core's time its threads were runnable but waiting; NaN: unknown


@dataclass(frozen=True)
class CpuView:
    """Every process the CPU probe followed in this frame."""

    dt_s: float  # 0: no baseline (every share NaN)
    processes: tuple[ProcessCpu, ...] = ()
    unavailable: str = ""

    def get(self, pid: int) -> ProcessCpu | None:
        """The process ``pid`` (None: gone, or never followed)."""
        for p in self.processes:  # a few processes: a scan is cheaper than keeping an index
            if p.pid == pid:
                return p
        return None


def runqueue_pct(prev: ProcCpuSample | None, cur: ProcCpuSample, pid: int) -> float:
    """Share of one core's time ``pid``'s threads waited in the run queue (NaN: unknown).

    A CPU-bound process on an overloaded machine shows little CPU and much
    run-queue time: both together say it never waits for anything else."""
    if prev is None:
        return NAN
    a, b = prev.get(pid), cur.get(pid)
    dt = (cur.taken_mono_ns - prev.taken_mono_ns) / 1e9
    if a is None or b is None or dt <= 0 or a.runqueue_ns < 0 or b.runqueue_ns < a.runqueue_ns:
        return NAN
    return 100.0 * (b.runqueue_ns - a.runqueue_ns) / 1e9 / dt


def cpu_pct(prev: ProcCpuSample | None, cur: ProcCpuSample, pid: int) -> float:
    """Share of one core ``pid`` used between two samples (NaN: unknown)."""
    if prev is None:
        return NAN
    a, b = prev.get(pid), cur.get(pid)
    dt = (cur.taken_mono_ns - prev.taken_mono_ns) / 1e9
    if a is None or b is None or dt <= 0 or b.cpu_ticks < a.cpu_ticks:
        return NAN
    return 100.0 * (b.cpu_ticks - a.cpu_ticks) / cur.clk_tck / dt


def derive_cpu(prev: ProcCpuSample | None, cur: ProcCpuSample) -> CpuView:
    dt = (cur.taken_mono_ns - prev.taken_mono_ns) / 1e9 if prev is not None else 0.0
    return CpuView(
        max(dt, 0.0),
        tuple(ProcessCpu(p.pid, p.comm, p.threads, cpu_pct(prev, cur, p.pid), runqueue_pct(prev, cur, p.pid))
              for p in cur.procs),
        cur.unavailable,
    )
