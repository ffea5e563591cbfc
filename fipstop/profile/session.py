"""One profile of one process: the samplers it owns and the report they make.

A :class:`ProfileSession` starts, for one pid, the thread sampler (always:
/proc needs neither root nor BPF), the bpf profiler (root + bcc, imported
lazily: it may be missing) and py-spy (Python processes only).  ``poll()``
returns a :class:`ProfileReport` of the interval since the previous poll:
the thread split, one :class:`ProfileSample` per profiler (an unavailable
one carries its reason, so every consumer of the report can say why a
panel is empty) and each probe's status.

Nothing here draws: the CLI (``fipstop profile``) and the Profile screen
render the same report.  Never imports textual.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from fipstop.errors import exc_line
from fipstop.probes.bpf_program import OFF_SAMPLE
from fipstop.probes.stacks import LockWait, ProfileSample, StackCount, folded_lines
from fipstop.probes.threads import ThreadSampler, ThreadsSample

__all__ = ["FOLDED_UNITS", "ProbeStatus", "ProfileOptions", "ProfileReport", "ProfileSession", "folded_note",
           "profile_once"]

SCHEMA_VERSION = 1

#: the unit of the folded weights per kind, as flamegraph.pl's ``--countname`` takes it: on-CPU stacks are
#: samples (flamegraph.pl's default), off-CPU stacks microseconds blocked - what bcc's ``offcputime -f`` writes,
#: so the two tools' files mix and compare
FOLDED_UNITS = {"oncpu": "samples", "offcpu": "us"}


def folded_note(which: str) -> str:
    """One line saying what the weights of a folded file of ``which`` are and how to draw it."""
    if which == "offcpu":
        return ("off-CPU weights are microseconds blocked (as bcc's offcputime -f): "
                "flamegraph.pl --countname=us --title 'Off-CPU Time Flame Graph' FILE")
    return "on-CPU weights are samples: flamegraph.pl FILE"


@dataclass(frozen=True, slots=True)
class ProfileOptions:
    """What to run and how often; the defaults are the cheap ones."""

    #: thread sampler ticks per second (blocking reasons)
    threads_hz: float = 100.0
    #: py-spy samples per second
    rate_hz: int = 100
    nonblocking: bool = True
    idle: bool = True
    native: bool = False
    gil: bool = True
    bpf: bool = True
    pyspy: bool = True
    #: bpf on-CPU sampling frequency
    oncpu_hz: float = 49.0
    #: bpf: 1 in this many off-CPU periods followed (sums scaled back)
    off_sample: int = OFF_SAMPLE


@dataclass(frozen=True, slots=True)
class ProbeStatus:
    name: str
    available: bool
    reason: str = ""


@dataclass(frozen=True)
class ProfileReport:
    """What every profiler saw of one process over one interval."""

    pid: int
    comm: str
    taken_mono_ns: int
    duration_ns: int
    threads: ThreadsSample
    profiles: tuple[ProfileSample, ...] = ()
    probes: tuple[ProbeStatus, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def profile(self, source: str) -> ProfileSample | None:
        for p in self.profiles:
            if p.source == source:
                return p
        return None

    def available_profiles(self) -> tuple[ProfileSample, ...]:
        return tuple(p for p in self.profiles if p.available)

    def stacks(self, which: str = "oncpu", source: str | None = None) -> list[StackCount]:
        """Stacks of every available profiler (or of ``source``), on-CPU
        (samples) or off-CPU (ns)."""
        out: list[StackCount] = []
        for p in self.available_profiles():
            if source is None or p.source == source:
                out.extend(p.oncpu if which == "oncpu" else p.offcpu)
        return out

    def top_locks(self) -> tuple[str, tuple[LockWait, ...]]:
        """(where from, locks by wait time): bpf's measured waits when it ran,
        else the thread sampler's estimates from ticks."""
        bpf = self.profile("bpf")
        if bpf is not None and bpf.available and bpf.locks:
            return "bpf", tuple(sorted(bpf.locks, key=lambda lw: (-lw.wait_ns, lw.address)))
        return "procfs", self.threads.locks

    def hot_functions(self, which: str = "oncpu", limit: int = 20) -> list[tuple[str, str, int, float]]:
        """(source, leaf function, value, percent of that source's total)."""
        rows: list[tuple[str, str, int, float]] = []
        for p in self.available_profiles():
            stacks = p.oncpu if which == "oncpu" else p.offcpu
            total = sum(s.value for s in stacks)
            if not total:
                continue
            leaf: Counter[str] = Counter()
            for s in stacks:
                leaf[s.frames[-1] if s.frames else "?"] += s.value
            rows.extend((p.source, f, v, 100.0 * v / total) for f, v in leaf.items())
        rows.sort(key=lambda r: (-r[3], r[0], r[1]))
        return rows[:limit]

    def folded(self, which: str = "oncpu", source: str | None = None) -> list[str]:
        """Folded stacks (flamegraph.pl, speedscope, inferno); with several
        sources each line starts with its source, so they do not mix.  The
        weights are in ``FOLDED_UNITS[which]``: on-CPU samples, off-CPU
        microseconds (as bcc's ``offcputime -f``)."""
        lines: list[str] = []
        srcs = [p for p in self.available_profiles() if source is None or p.source == source]
        for p in srcs:
            stacks: Sequence[StackCount] = p.oncpu if which == "oncpu" else p.offcpu
            if len(srcs) > 1:
                stacks = [replace(s, frames=(f"[{p.source}]", *s.frames)) for s in stacks]
            lines.extend(folded_lines(stacks, divisor=1000 if which == "offcpu" else 1))
        return lines

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for lw in d["threads"]["locks"]:
            lw["address_hex"] = hex(lw["address"])
        for p in d["profiles"]:
            p["offcpu_unit"] = "ns"  # as oncpu_unit names the on-CPU values' unit (lock waits: wait_ns)
            for lw in p["locks"]:
                lw["address_hex"] = hex(lw["address"])
        d["process_split_pct"] = self.threads.process_split()
        src, locks = self.top_locks()
        d["top_locks"] = {"source": src, "addresses": [hex(lw.address) for lw in locks[:10]]}
        return d


def _one_line(e: BaseException) -> str:
    return exc_line(e, 300)


class ProfileSession:
    """The samplers of one pid.  ``start()`` may take seconds (bcc compiles
    its programs): call it off the UI thread."""

    def __init__(self, pid: int, options: ProfileOptions | None = None, *, procfs_root: str = "/proc",
                 bpf: Any = None) -> None:
        """``bpf``: a parked bpf profiler (of any pid: it is retargeted) to reuse (see :meth:`close`)."""
        self.pid = int(pid)
        self._reuse_bpf = bpf
        #: what ``start()`` is doing now (read from another thread to show progress); "" when done
        self.phase = ""
        self.options = options or ProfileOptions()
        self.procfs_root = procfs_root
        self.threads = ThreadSampler(self.pid, hz=self.options.threads_hz, procfs_root=procfs_root)
        self.profilers: list[Any] = []
        self.status: dict[str, ProbeStatus] = {}
        self._started = False
        self._last_poll = 0

    def _make_profilers(self) -> None:
        o = self.options
        reuse, self._reuse_bpf = self._reuse_bpf, None
        if o.bpf and reuse is not None and getattr(reuse, "pid", self.pid) != self.pid:
            try:  # compiled for another pid: the target is a map entry, no compile
                ok = bool(reuse.retarget(self.pid))
            except Exception:
                ok = False
            if not ok:
                self._close(reuse)
                reuse = None
        if o.bpf and reuse is not None:
            self.profilers.append(reuse)
        elif o.bpf:
            try:
                from fipstop.probes.bpf import BpfProfiler  # the bpf engineer's module; may be absent
                self.profilers.append(BpfProfiler(self.pid, oncpu_hz=o.oncpu_hz, off_sample=o.off_sample))
            except ImportError as e:
                self.status["bpf"] = ProbeStatus("bpf", False, f"the bpf profiler is not installed ({_one_line(e)})")
            except Exception as e:
                self.status["bpf"] = ProbeStatus("bpf", False, f"failed to set up: {_one_line(e)}")
        else:
            self.status["bpf"] = ProbeStatus("bpf", False, "off (--no-bpf)")
        if o.pyspy:
            from fipstop.probes.pyspy import PySpyProfiler
            self.profilers.append(PySpyProfiler(self.pid, rate_hz=o.rate_hz, nonblocking=o.nonblocking,
                                                idle=o.idle, native=o.native, gil=o.gil,
                                                procfs_root=self.procfs_root))
        else:
            self.status["py-spy"] = ProbeStatus("py-spy", False, "off (--no-pyspy)")

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.phase = "reading the threads"
        ok, why = self.threads.available()
        self.status["threads"] = ProbeStatus("threads", ok, why)
        self._make_profilers()
        live = []
        for p in self.profilers:
            try:
                ok, why = p.available()
            except Exception as e:
                ok, why = False, _one_line(e)
            if ok:
                self.phase = (("compiling the eBPF program" if getattr(p, "state", "") != "parked"
                               else "attaching the compiled eBPF program") if p.name == "bpf"
                              else f"starting {p.name}")
                try:
                    p.start()
                except Exception as e:
                    ok, why = False, f"failed to start: {_one_line(e)}"
            self.status[p.name] = ProbeStatus(p.name, ok, why)
            if ok:
                live.append(p)
            else:
                self._close(p)
        self.profilers = live
        if self.status["threads"].available:  # last: bcc's compile time is not part of the interval
            self.threads.start()
        self._last_poll = time.monotonic_ns()
        self.phase = ""

    @staticmethod
    def _close(p: Any) -> None:
        try:
            p.close()
        except Exception:
            pass

    def poll(self) -> ProfileReport:
        if not self._started:
            self.start()
        now = time.monotonic_ns()
        if self.status["threads"].available:
            try:
                th = self.threads.sample()
            except Exception as e:
                th = ThreadsSample.unavailable_sample(self.pid, _one_line(e))
        else:
            th = ThreadsSample.unavailable_sample(self.pid, self.status["threads"].reason)
        samples: list[ProfileSample] = []
        for p in self.profilers:
            try:
                s = p.sample()
            except Exception as e:
                s = ProfileSample.unavailable(p.name, self.pid, f"sample failed: {_one_line(e)}", now)
            samples.append(s)
            self.status[p.name] = ProbeStatus(p.name, s.available, s.reason if not s.available else "")
        have = {s.source for s in samples}
        for name, st in self.status.items():
            if name != "threads" and name not in have:
                samples.append(ProfileSample.unavailable(name, self.pid, st.reason, now))
        duration = now - self._last_poll
        self._last_poll = now
        return ProfileReport(pid=self.pid, comm=th.comm, taken_mono_ns=now, duration_ns=max(duration, 0),
                             threads=th, profiles=tuple(samples), probes=tuple(self.status.values()))

    def close(self, *, park: bool = False) -> Any:
        """Stop every sampler; with ``park`` the bpf profiler is detached but
        kept compiled and returned (None when it did not run), for a later
        session of the same pid: bcc compiles once per run, not per visit."""
        self.threads.close()
        parked = None
        for p in self.profilers:
            if park and parked is None and p.name == "bpf" and hasattr(p, "park"):
                try:
                    if p.park():
                        parked = p
                        continue
                except Exception:
                    pass
            self._close(p)
        self.profilers = []
        if self._reuse_bpf is not None:  # never started: it stays parked for the next one
            parked = parked or self._reuse_bpf
            self._reuse_bpf = None
        return parked

    def __enter__(self) -> ProfileSession:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def profile_once(pid: int, duration_s: float, options: ProfileOptions | None = None, *,
                 procfs_root: str = "/proc", sleep=time.sleep) -> ProfileReport:
    """Profile ``pid`` for ``duration_s`` and return one report (the headless CLI)."""
    with ProfileSession(pid, options, procfs_root=procfs_root) as s:
        sleep(duration_s)
        return s.poll()

