"""Off-CPU, lock-wait and on-CPU stacks of one process, from eBPF (bcc).

What the kernel gives us on this kind of machine (no kprobes, fentry,
function tracer or hardware PMU; see DESIGN.md) and how it is used:

- ``sched:sched_switch``: the thread leaving the CPU is stamped with its
  user and kernel stacks; when it comes back the time away is added to
  (tid, user stack, kernel stack, runnable) — off-CPU time by stack; time
  spent runnable is marked: preempted (``[preempted: runnable]``), or woken
  and waiting for a CPU (``[woken: waiting for a CPU]``, from the wake-up
  time stamped by ``sched_waking``), so blocked time is blocking only, as
  in the procfs ThreadSampler's split;
- lock waits, from the same switch: a thread that blocks inside futex(2)
  has the futex word and op in its saved user registers
  (``bpf_task_pt_regs``); FUTEX_WAIT/LOCK_PI (what pthread mutexes issue)
  add the time away to (futex address, tid, user stack); FUTEX_WAIT_BITSET
  (condition variables, semaphores, join: waiting for work) is counted apart
  (``extra["condvar_wait_ns"]``), as the procfs ThreadSampler does.  (The
  syscalls futex tracepoints were measured first: 4.8 us per call, more
  than a CPU on a contended producer — see fipstop.probes.bpf_program);
- ``sched:sched_waking``: a thread of the target that wakes one of its
  threads blocked on a lock released that lock; its stack is counted under
  the lock as a holder stack (1 in ``WAKE_SAMPLE`` wake-ups of the followed
  waits, counts scaled);
- off-CPU periods (and so lock waits) are followed 1 in ``OFF_SAMPLE`` times
  and their sums scaled back: following every switch took ~9 % of a
  contended producer's throughput (``fipstop bench profile``).  A target
  that blocks rarely but long (a few 50 ms waits a second) is better
  followed every time: ``BpfProfiler(pid, off_sample=1)``;
- perf software ``cpu-clock`` at ``oncpu_hz`` on every CPU: on-CPU samples.

The program is compiled once per profiler in :meth:`BpfProfiler.start`
(seconds: :attr:`BpfProfiler.state` says ``compiling`` meanwhile); the
target's tgid is an entry of the one-slot array ``target`` (every handler
returns after one lookup and compare for other processes), so a parked
profiler can be pointed at another pid (:meth:`BpfProfiler.retarget`)
without compiling again.  Maps are aggregated in the kernel and read (and deleted)
once per :meth:`sample`.  Full maps and unstorable stacks are counted and
reported in ``ProfileSample.extra`` (``*_map_full``, ``*stack_eexist``,
``*stack_enomem``), never silent; a lost stack also shows as a
``[... stack lost: ...]`` frame.

User stacks: the kernel walks frame pointers, and code built without them
(Debian's glibc and most distro packages) stops that walk after the leaf.
So each event also copies the top of the user stack (``SCAN_WORDS`` words
above the stack pointer, from ``bpf_task_pt_regs``) and keeps up to
``NSCAN`` words that point into the target's text mappings; user space keeps
those that follow a call instruction and shows them as the leaf's callers
(e.g. ``__vsyslog_internal`` > ``__send``).  Scanned frames are a heuristic:
a stale return address can appear, and callers whose frames lie deeper than
the scanned window (large stack buffers) are missing.  Kernel stacks are
complete.  Lock addresses are placed in the target's memory map
(``LockWait.region``, e.g. ``libc.so.6 data`` for glibc's own static locks
such as syslog's, ``anon`` for heap-allocated ones).

Symbols come from bcc (``BPF.sym`` needs the target alive; cached per
address).  Frames and thread names are the target's text: escape them
before display.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from fipstop.probes.bpf_decode import (
    FutexRow,
    ScanResolver,
    StackResolver,
    WakeRow,
    build_locks,
    build_stacks,
    clean_user_frames,
    inflight_rows,
    looks_like_call,
    read_inflight,
    read_maps,
    region_of,
    text_ranges,
)
from fipstop.probes.bpf_program import NRANGES, OFF_SAMPLE, program_text
from fipstop.probes.stacks import ProfileSample

#: map sizes (entries); the kernel stack map is the big one (48 frames x 8 B each: 6 MB)
STACKS = 16384
#: user stacks are short (12 frames x 8 B: 6 MB at 64 Ki entries) and far more varied: a frame-pointer walk
#: through code built without frame pointers ends in garbage, so nearly every sample is a new stack
USTACKS = 65536
THREADS = 8192
KEYS = 16384
#: a stack map is reset once this share of it may be in use.  The map is a hash table without chaining: a
#: new stack whose bucket is taken is lost (EEXIST, counted), so the share of new stacks lost is about the
#: share of the map in use; 25 % lost up to a third of the stacks on a busy producer, 8 % bounds it near 8 %
STACK_RESET_SHARE = 0.08

# --------------------------------------------------------------------------- #
# tracefs / debugfs
# --------------------------------------------------------------------------- #
TRACEFS_PATHS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


def _mounted(path: str, mounts: str) -> bool:
    return any(line.split()[1:2] == [path] for line in mounts.splitlines())


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tracing_status() -> tuple[bool, str]:
    """(tracefs usable now, what is missing)."""
    for p in TRACEFS_PATHS:
        if os.path.isdir(os.path.join(p, "events", "sched")):
            return True, p
    return False, "tracefs is not mounted (/sys/kernel/tracing)"


def prepare_tracing() -> tuple[bool, str]:
    """Mount tracefs and debugfs when tracepoints are not reachable and we
    are root (bcc reads tracepoint formats there; recent kernels automount
    tracefs on first access, so usually nothing is done).  Returns (ok,
    what was mounted or what is missing)."""
    ok, where = tracing_status()
    notes = []
    mounts = _read("/proc/self/mounts")
    if os.geteuid() == 0 and not ok:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        for fstype, target in (("debugfs", "/sys/kernel/debug"), ("tracefs", "/sys/kernel/tracing")):
            if _mounted(target, mounts) or not os.path.isdir(target):
                continue
            if libc.mount(fstype.encode(), target.encode(), fstype.encode(), 0, None) == 0:
                notes.append(f"mounted {fstype} on {target}")
            else:
                e = ctypes.get_errno()
                notes.append(f"cannot mount {fstype} on {target}: {os.strerror(e)}")
        ok, where = tracing_status()
    if not ok:
        return False, "; ".join([where, *notes]) if notes else where + " (mount -t tracefs tracefs /sys/kernel/tracing)"
    return True, "; ".join(notes)


def _malloc_trim() -> None:
    """Hand freed heap back to the kernel (glibc only; elsewhere nothing)."""
    try:
        import ctypes
        import ctypes.util

        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# --------------------------------------------------------------------------- #
# the profiler
# --------------------------------------------------------------------------- #
class BpfProfiler:
    """eBPF profile of process ``pid``: see the module docstring.

    ``start()`` compiles and attaches (seconds; never raises: a failure is
    kept and reported by every later ``sample()``); ``sample()`` returns what
    was aggregated since the previous sample; ``close()`` detaches.
    """

    name = "bpf"

    def __init__(self, pid: int, *, oncpu_hz: float = 49.0, offcpu_min_us: int = 1,
                 kernel_source: str | None = None, off_sample: int = OFF_SAMPLE) -> None:
        self.pid = int(pid)
        self.oncpu_hz = float(oncpu_hz)
        self.offcpu_min_us = int(offcpu_min_us)
        # 1 in off_sample off-CPU periods followed: 1 makes long, rare waits
        # exact (an estimate from a few followed periods is noisy) at ~9 %
        # of a switch-heavy target's throughput
        self.off_sample = int(off_sample)
        self.kernel_source = kernel_source
        self.state = "idle"  # idle | compiling | running | parked | failed | closed
        self.reason = ""
        self.notes: list[str] = []
        self.compile_s = 0.0
        self._bpf: Any = None  # a bcc.BPF (bcc has no type information)
        self._lock = threading.Lock()
        self._last_ns = 0
        self._stack_ids: set[int] = set()  # user stack ids in use (ustacks map)
        self._kstack_ids: set[int] = set()  # kernel stack ids in use (stacks map)
        self._stack_cache: dict[tuple[int, bool], tuple[str, ...]] = {}
        self._sym_cache: dict[int, str] = {}
        self._ksym_cache: dict[int, str] = {}
        self._comm: dict[int, str] = {}
        self._lost_total: dict[str, int] = defaultdict(int)
        self._stack_resets = 0
        self._maps_text = ""
        self._ranges_dropped = 0
        self._call_ok: dict[int, bool] = {}
        self._mem_fd: int | None = None

    # -- availability ------------------------------------------------------ #
    def available(self) -> tuple[bool, str]:
        """Whether this can run here, and if not exactly what is missing."""
        if self.state == "failed":
            return False, self.reason
        if os.geteuid() != 0:
            return False, "needs root (eBPF tracepoints and perf events)"
        if not Path(f"/proc/{self.pid}").exists():
            return False, f"no process {self.pid}"
        try:
            import bcc  # noqa: F401
        except Exception as exc:  # ImportError, or libbcc missing underneath
            return False, f"bcc is not importable ({type(exc).__name__}: {exc}); apt-get install python3-bpfcc"
        ok, why = self._headers(build=False)
        if not ok:
            return False, why
        ok, where = tracing_status()
        if not ok and not os.path.isdir("/sys/kernel/tracing"):
            return False, where
        return True, "" if ok else f"{where}: will mount it"

    def _headers(self, *, build: bool) -> tuple[bool, str]:
        if self.kernel_source:
            if Path(self.kernel_source, "include").is_dir():
                return True, self.kernel_source
            return False, f"kernel source {self.kernel_source} has no include/ directory"
        from fipstop.profile import kheaders

        if not build:
            env = os.environ.get("BCC_KERNEL_SOURCE")
            if not env:
                rel = os.uname().release
                if any((Path("/lib/modules") / rel / s / "include").is_dir() for s in ("build", "source")) \
                        or Path("/sys/kernel/kheaders.tar.xz").is_file():
                    return True, ""
                import platform

                if kheaders.debian_pairs(Path("/usr/src"), platform.machine()):
                    return True, "merged Debian kernel headers (built on start)"
        kh = kheaders.find_kernel_headers()
        if not kh.ok:
            return False, kh.reason
        self._kh_env = kh.env
        if kh.note:
            self.notes.append(f"kernel headers: {kh.note}")
        return True, kh.env or ""

    # -- lifecycle --------------------------------------------------------- #
    def start(self) -> None:
        """Compile and attach (takes seconds).  Never raises.  A parked
        program is attached again instead (no compile)."""
        if self.state == "parked" and self.resume():
            return
        with self._lock:
            if self.state in ("running", "failed", "closed"):
                return
            self.state = "compiling"
            t0 = time.monotonic()
            try:
                self._start()
            except Exception as exc:  # degrade with a reason, never raise
                self._fail(f"{type(exc).__name__}: {exc}")
            self.compile_s = time.monotonic() - t0

    def _fail(self, reason: str) -> None:
        self.state = "failed"
        self.reason = reason
        if self._bpf is not None:
            try:
                self._bpf.cleanup()
            except Exception:
                pass
            self._bpf = None

    def _start(self) -> None:
        if os.geteuid() != 0:
            return self._fail("needs root (eBPF tracepoints and perf events)")
        if not Path(f"/proc/{self.pid}").exists():
            return self._fail(f"no process {self.pid}")
        ok, note = prepare_tracing()
        if not ok:
            return self._fail(note)
        if note:
            self.notes.append(note)
        self._kh_env = None
        ok, src = self._headers(build=True)
        if not ok:
            return self._fail(src)
        try:
            import bcc
        except Exception as exc:
            return self._fail(f"bcc is not importable ({type(exc).__name__}: {exc}); apt-get install python3-bpfcc")
        # bcc picked its tracefs path at import; point it at the live one
        if not os.path.isdir(os.path.join(bcc.TRACEFS, "events")):
            ok, where = tracing_status()
            if ok:
                bcc.TRACEFS = where
        text = program_text(min_ns=self.offcpu_min_us * 1000, stacks=STACKS, ustacks=USTACKS, threads=THREADS,
                            keys=KEYS,
                            off_sample=self.off_sample)
        env_src = self.kernel_source or self._kh_env
        old_env = os.environ.get("BCC_KERNEL_SOURCE")
        errfile = tempfile.TemporaryFile()
        saved = os.dup(2)
        try:
            if env_src:
                os.environ["BCC_KERNEL_SOURCE"] = env_src
            os.dup2(errfile.fileno(), 2)  # bcc's compiler writes diagnostics to fd 2
            try:
                self._bpf = bcc.BPF(text=text.encode())
            finally:
                os.dup2(saved, 2)
                if env_src:
                    if old_env is None:
                        os.environ.pop("BCC_KERNEL_SOURCE", None)
                    else:
                        os.environ["BCC_KERNEL_SOURCE"] = old_env
        except Exception as exc:
            errfile.seek(0)
            diag = [ln for ln in errfile.read().decode(errors="replace").splitlines() if ln.strip()]
            errs = [ln for ln in diag if "error" in ln.lower() or "unable" in ln.lower()]
            detail = (errs or diag or [str(exc)])[0].strip()
            return self._fail(f"BPF compile failed: {detail[:200]}"
                              + (f" (headers: {env_src})" if env_src else ""))
        finally:
            os.close(saved)
            errfile.close()
        if self.oncpu_hz > 0:
            try:
                self._bpf.attach_perf_event(ev_type=bcc.PerfType.SOFTWARE, ev_config=bcc.PerfSWConfig.CPU_CLOCK,
                                            fn_name=b"on_cpu", sample_freq=max(1, int(round(self.oncpu_hz))))
            except Exception as exc:
                self.notes.append(f"on-CPU sampling off: cpu-clock perf event failed ({exc})")
        self._set_target()
        self._load_ranges(_read(f"/proc/{self.pid}/maps"))
        read_maps(self._bpf, self.off_sample)  # drop what was counted before the text ranges were known
        self._last_ns = time.monotonic_ns()
        self._set_window(self._last_ns)
        self.state = "running"

    def _set_window(self, start_ns: int) -> None:
        """Off-CPU time before ``start_ns`` is the previous interval's (see the window map)."""
        table = self._bpf[b"window"]
        table[table.Key(0)] = table.Leaf(start_ns)

    def _set_target(self) -> None:
        table = self._bpf[b"target"]
        table[table.Key(0)] = table.Leaf(self.pid)

    def retarget(self, pid: int) -> bool:
        """Point a parked program at process ``pid`` (the next :meth:`start`
        attaches it): no compile.  Everything known of the previous pid
        (symbols, thread names, the stack map, loss totals) is dropped.
        False when not parked."""
        with self._lock:
            if self.state != "parked" or self._bpf is None:
                return False
            if int(pid) == self.pid:
                return True
            self.pid = int(pid)
            self._set_target()
            for name in (b"stacks", b"ustacks", b"swcache", b"wkcache", b"offstart"):
                try:
                    self._bpf[name].clear()
                except Exception:
                    pass
            read_maps(self._bpf, self.off_sample)  # drain the old pid's counts
            self._stack_ids.clear()
            self._kstack_ids.clear()
            self._stack_cache.clear()
            self._sym_cache.clear()
            self._comm.clear()
            self._lost_total.clear()
            self._stack_resets = 0
            self._call_ok.clear()
            if self._mem_fd is not None:
                os.close(self._mem_fd)
                self._mem_fd = None
            self._load_ranges(_read(f"/proc/{self.pid}/maps"))
            return True

    #: what the program attaches to (bcc attaches its TRACEPOINT_PROBEs itself, at compile)
    TRACEPOINTS = (b"sched:sched_switch", b"sched:sched_waking")

    def park(self) -> bool:
        """Detach from the kernel but keep the compiled program, so a later
        :meth:`resume` of the same pid costs no compile (bcc takes seconds,
        43 s on a loaded host).  Parked, the target pays nothing.  False when
        there is nothing to park (not running)."""
        import bcc

        with self._lock:
            if self.state != "running" or self._bpf is None:
                return False
            for tp in self.TRACEPOINTS:
                try:
                    self._bpf.detach_tracepoint(tp=tp)
                except Exception:
                    pass
            if self.oncpu_hz > 0:
                try:
                    self._bpf.detach_perf_event(ev_type=bcc.PerfType.SOFTWARE, ev_config=bcc.PerfSWConfig.CPU_CLOCK)
                except Exception:
                    pass
            self.state = "parked"
            return True

    def resume(self) -> bool:
        """Attach a parked program again; False (and closed) when it cannot."""
        import bcc

        with self._lock:
            if self.state != "parked" or self._bpf is None:
                return False
            try:
                for tp in self.TRACEPOINTS:
                    self._bpf.attach_tracepoint(tp=tp, fn_name=b"tracepoint__" + tp.replace(b":", b"__"))
                if self.oncpu_hz > 0:
                    self._bpf.attach_perf_event(ev_type=bcc.PerfType.SOFTWARE, ev_config=bcc.PerfSWConfig.CPU_CLOCK,
                                                fn_name=b"on_cpu", sample_freq=max(1, int(round(self.oncpu_hz))))
                read_maps(self._bpf, self.off_sample)  # nothing counted while parked, but drain anyway
                # threads that left the CPU before the detach and ran since, unseen: no period in progress
                self._bpf[b"offstart"].clear()
            except Exception as exc:
                self._fail(f"re-attaching the parked program failed: {type(exc).__name__}: {exc}")
                return False
            self._last_ns = time.monotonic_ns()
            self._set_window(self._last_ns)
            self.state = "running"
            return True

    def close(self) -> None:
        with self._lock:
            if self._bpf is not None:
                try:
                    self._bpf.cleanup()
                except Exception:
                    pass
                self._bpf = None
                _malloc_trim()  # LLVM's compile left hundreds of MB in malloc's arenas
            if self._mem_fd is not None:
                os.close(self._mem_fd)
                self._mem_fd = None
            if self.state != "failed":
                self.state = "closed"

    def __enter__(self) -> BpfProfiler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- sampling ---------------------------------------------------------- #
    def sample(self) -> ProfileSample:
        now = time.monotonic_ns()
        if self.state == "idle":
            self.start()
        if self.state == "compiling":
            return ProfileSample.unavailable(self.name, self.pid, "compiling the BPF program…", now)
        if self.state != "running" or self._bpf is None:
            return ProfileSample.unavailable(self.name, self.pid, self.reason or f"profiler {self.state}", now)
        with self._lock:
            if self._bpf is None:
                return ProfileSample.unavailable(self.name, self.pid, "profiler closed", now)
            try:
                return self._sample(now)
            except Exception as exc:  # a probe degrades, it never raises
                return ProfileSample.unavailable(self.name, self.pid,
                                                 f"reading the BPF maps failed: {type(exc).__name__}: {exc}", now)

    def _sample(self, now: int) -> ProfileSample:
        bpf = self._bpf
        # the interval is [_last_ns, now): from here on the program counts off-CPU time for the next one, and
        # the periods in progress now are split here (their part so far is this interval's)
        self._set_window(now)
        inflight = read_inflight(bpf)
        off, on, fx, wk, errs = read_maps(bpf, self.off_sample)
        more_off, more_fx = inflight_rows(inflight, self._last_ns, now, min_ns=self.offcpu_min_us * 1000,
                                          off_sample=self.off_sample)
        off += more_off
        fx += more_fx
        alive = Path(f"/proc/{self.pid}").exists()
        maps_text = _read(f"/proc/{self.pid}/maps") if alive else ""
        resolve = self._resolver(bpf)
        rs = self._scan_resolver(bpf, maps_text) if alive else None
        oncpu = build_stacks(on, resolve, self._thread_name, resolve_scan=rs)
        offcpu = build_stacks(off, resolve, self._thread_name, resolve_scan=rs)
        locks = build_locks(fx, wk, resolve, self._thread_name, lambda a: region_of(a, maps_text), resolve_scan=rs)
        if alive and maps_text != self._maps_text:
            self._load_ranges(maps_text)  # a library was loaded or unloaded
        # the stack map is a dictionary that outlives one interval (ids are
        # hashes of the frames, so an id stays valid); reset it before it fills
        for r in (*off, *on):
            if r.ustack >= 0:
                self._stack_ids.add(r.ustack)
            if r.kstack >= 0:
                self._kstack_ids.add(r.kstack)
        held: list[FutexRow | WakeRow] = [*fx, *wk]
        self._stack_ids.update(h.ustack for h in held if h.ustack >= 0)
        if (len(self._stack_ids) > STACK_RESET_SHARE * USTACKS or len(self._kstack_ids) > STACK_RESET_SHARE * STACKS
                or errs.get("ustack_enomem") or errs.get("kstack_enomem")):
            for name in (b"stacks", b"ustacks"):
                try:
                    bpf[name].clear()
                except Exception:
                    pass
            self._stack_ids.clear()
            self._kstack_ids.clear()
            self._stack_cache.clear()
            self._stack_resets += 1
        for k, v in errs.items():
            self._lost_total[k] += v
        extra: dict[str, float] = {
            "oncpu_hz": self.oncpu_hz,
            "offcpu_min_us": float(self.offcpu_min_us),
            "compile_s": round(self.compile_s, 3),
            "runqueue_ns": float(sum(r.value for r in off if r.runnable)),
            "blocked_ns": float(sum(r.value for r in off if not r.runnable)),
            "lock_wait_ns": float(sum(r.wait_ns for r in fx if not r.condvar)),
            "condvar_wait_ns": float(sum(r.wait_ns for r in fx if r.condvar)),
            "stack_map_resets": float(self._stack_resets),
            "text_ranges_left_out": float(self._ranges_dropped),
        }
        for k, v in errs.items():
            extra[k] = float(v)
        reason = "" if alive else f"process {self.pid} exited: symbols unavailable"
        sample = ProfileSample(
            source=self.name, pid=self.pid, taken_mono_ns=now, duration_ns=max(0, now - self._last_ns),
            available=True, reason=reason, oncpu=oncpu, oncpu_unit="samples", oncpu_hz=self.oncpu_hz,
            offcpu=offcpu, locks=locks, extra=extra)
        self._last_ns = now
        return sample

    def lost_totals(self) -> dict[str, int]:
        """Every counted loss since start (for reports)."""
        return dict(self._lost_total)

    # -- stack scanning ------------------------------------------------------ #
    def _load_ranges(self, maps_text: str) -> None:
        """Give the kernel the target's text mappings (for scan_stack)."""
        bpf = self._bpf
        if bpf is None:
            return
        ranges, self._ranges_dropped = text_ranges(maps_text, NRANGES)
        table = bpf[b"ranges"]
        for i in range(NRANGES):
            lo, hi = ranges[i] if i < len(ranges) else (2**64 - 1, 0)
            leaf = table.Leaf()
            leaf.lo, leaf.hi = lo, hi
            table[table.Key(i)] = leaf
        self._maps_text = maps_text
        self._call_ok.clear()

    def _scan_resolver(self, bpf, maps_text: str) -> ScanResolver:
        ranges, _ = text_ranges(maps_text, 1 << 20)

        def in_text(a: int) -> bool:
            return any(lo <= a < hi for lo, hi in ranges)

        def resolve(addrs: tuple[int, ...]) -> tuple[str, ...]:
            out = []
            for a in addrs:
                ok = self._call_ok.get(a)
                if ok is None:
                    ok = in_text(a) and looks_like_call(self._peek(a - 7, 7))
                    self._call_ok[a] = ok
                if ok:
                    out.append(self._usym(bpf, a - 1))  # inside the call, not after it
            return tuple(out)

        return resolve

    def _peek(self, addr: int, n: int) -> bytes:
        try:
            if self._mem_fd is None:
                self._mem_fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)
            return os.pread(self._mem_fd, n, addr)
        except (OSError, OverflowError, ValueError):
            return b""

    # -- symbols ------------------------------------------------------------ #
    def _resolver(self, bpf) -> StackResolver:
        ktable, utable = bpf[b"stacks"], bpf[b"ustacks"]

        def resolve(stack_id: int, user: bool) -> tuple[str, ...]:
            table = utable if user else ktable
            key = (stack_id, user)
            hit = self._stack_cache.get(key)
            if hit is not None:
                return hit
            try:  # not table.walk(): it assumes 127 slots and ours hold STACK_DEPTH
                addrs = []
                for a in table[table.Key(stack_id)].ip:
                    if not a:
                        break
                    addrs.append(int(a))
            except Exception:
                addrs = []
            if user:
                frames = clean_user_frames([self._usym(bpf, a) for a in addrs])
            else:
                frames = tuple(self._ksym(bpf, a) for a in addrs)
            if not frames:
                frames = (f"[{'user' if user else 'kernel'} stack {stack_id} gone]",)
            self._stack_cache[key] = frames
            return frames

        return resolve

    def _usym(self, bpf, addr: int) -> str:
        s = self._sym_cache.get(addr)
        if s is None:
            try:
                name, offset, module = bpf._sym_cache(self.pid).resolve(addr, True)
            except Exception:
                name, offset, module = None, 0, None
            if name:
                s = name.decode(errors="replace")
            elif module:
                s = f"{os.path.basename(module.decode(errors='replace'))}+0x{offset:x}"
            else:
                s = f"0x{addr:x}"
            self._sym_cache[addr] = s
        return s

    def _ksym(self, bpf, addr: int) -> str:
        s = self._ksym_cache.get(addr)
        if s is None:
            try:
                s = bpf.ksym(addr).decode(errors="replace")
            except Exception:
                s = f"0x{addr:x}"
            self._ksym_cache[addr] = s
        return s

    def _thread_name(self, tid: int) -> str:
        n = self._comm.get(tid)
        if n is None:
            n = _read(f"/proc/{self.pid}/task/{tid}/comm").strip()
            if n:
                self._comm[tid] = n
        return n or ""
