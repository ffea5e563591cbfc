"""Thread time split of one process from /proc: no root, no BPF.

Per thread, the share of wall time spent on CPU, waiting in the run queue,
blocked on a lock, blocked in I/O or a socket send, sleeping (waiting for
work or a timer), and anything else; the shares add up to 100 %.

How the split is made, and why it is cheap:

- On-CPU and run-queue time are exact: ``schedstat`` holds the cumulative
  nanoseconds a thread ran and waited runnable; the sampler reads it only at
  interval boundaries (``sample()``).
- What is left of the wall time is time off the run queue (blocked).  A
  background thread looks at every thread ``hz`` times a second and
  classifies what each blocked one waits for; the blocked time is split in
  proportion to those ticks.  One tick per thread is one ``pread`` of
  ``syscall`` (``running`` for a runnable thread, else the syscall number
  and its arguments), plus one of ``wchan`` (the kernel function it sleeps
  in) for a blocked thread: about 3 us each, on descriptors kept open.
- ``syscall`` needs ptrace-attach rights on the target (same user, or root);
  without them the tick reads ``stat`` (state) and ``wchan`` and the split
  says the classification is by kernel function only.

A futex wait with ``FUTEX_WAIT``/``FUTEX_LOCK_PI`` is a contended mutex (that
is what glibc's ``pthread_mutex_lock`` slow path issues), so it counts as
*lock*, and its first argument is the lock's address: the probe reports the
addresses threads were seen waiting on (:class:`fipstop.probes.stacks.LockWait`,
times estimated from ticks).  ``FUTEX_WAIT_BITSET`` is what glibc's condition
variables, semaphores and ``pthread_join`` use: waiting to be told there is
work, which counts as *sleep*.

The sampler measures its own CPU time (``sampler_cpu_pct``) and the rate it
really achieved (``hz_achieved``).  Never imports textual.
"""

from __future__ import annotations

import os
import platform
import threading
import time
from collections import Counter
from dataclasses import dataclass

from fipstop.probes.stacks import LockWait

__all__ = ["CATEGORIES", "ThreadSampler", "ThreadSplit", "ThreadsSample", "classify"]

SCHEMA_VERSION = 1

#: the categories of a thread's wall time, in the order they are drawn
CATEGORIES = ("oncpu", "runqueue", "lock", "io", "sleep", "other")
BLOCKED = ("lock", "io", "sleep", "other")

_X86_64 = {
    "lock": {202: "futex", 449: "futex_waitv", 73: "flock", 65: "semop", 220: "semtimedop"},
    "io": {0: "read", 1: "write", 17: "pread64", 18: "pwrite64", 19: "readv", 20: "writev", 7: "poll",
           23: "select", 270: "pselect6", 271: "ppoll", 40: "sendfile", 42: "connect", 44: "sendto",
           45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 299: "recvmmsg", 307: "sendmmsg", 74: "fsync",
           75: "fdatasync", 277: "sync_file_range", 26: "msync", 208: "io_getevents", 426: "io_uring_enter",
           275: "splice", 276: "tee", 326: "copy_file_range", 295: "preadv", 296: "pwritev", 327: "preadv2",
           328: "pwritev2", 2: "open", 257: "openat", 285: "fallocate", 72: "fcntl"},
    "sleep": {232: "epoll_wait", 281: "epoll_pwait", 441: "epoll_pwait2", 35: "nanosleep",
              230: "clock_nanosleep", 34: "pause", 130: "rt_sigsuspend", 128: "rt_sigtimedwait", 61: "wait4",
              247: "waitid", 43: "accept", 288: "accept4", 70: "msgrcv", 243: "mq_timedreceive"},
}
_AARCH64 = {
    "lock": {98: "futex", 449: "futex_waitv", 32: "flock", 193: "semop", 192: "semtimedop"},
    "io": {63: "read", 64: "write", 67: "pread64", 68: "pwrite64", 65: "readv", 66: "writev", 73: "ppoll",
           72: "pselect6", 71: "sendfile", 203: "connect", 206: "sendto", 207: "recvfrom", 211: "sendmsg",
           212: "recvmsg", 243: "recvmmsg", 269: "sendmmsg", 82: "fsync", 83: "fdatasync", 227: "msync",
           4: "io_getevents", 426: "io_uring_enter", 76: "splice", 56: "openat", 25: "fcntl"},
    "sleep": {22: "epoll_pwait", 441: "epoll_pwait2", 101: "nanosleep", 115: "clock_nanosleep",
              133: "rt_sigsuspend", 137: "rt_sigtimedwait", 260: "wait4", 95: "waitid", 202: "accept",
              242: "accept4", 188: "msgrcv"},
}


def syscall_table(machine: str | None = None) -> dict[int, tuple[str, str]]:
    """syscall number -> (category, name) for this machine's ABI."""
    m = (machine or platform.machine()).lower()
    table = _AARCH64 if m in ("aarch64", "arm64") else _X86_64
    return {nr: (cat, name) for cat, nrs in table.items() for nr, name in nrs.items()}


_FUTEX_CMD_MASK = ~(128 | 256)  # FUTEX_PRIVATE_FLAG, FUTEX_CLOCK_REALTIME
#: futex commands that wait for a lock's owner (mutex slow paths, PI locks)
_FUTEX_LOCK_CMDS = {0: "FUTEX_WAIT", 6: "FUTEX_LOCK_PI", 13: "FUTEX_LOCK_PI2"}

_WCHAN_LOCK = ("futex_", "rt_mutex", "locks_lock", "flock_lock", "posix_lock", "fcntl_setlk", "do_semtimedop",
               "rwsem_down", "__mutex_lock")
_WCHAN_SLEEP = ("hrtimer_nanosleep", "do_nanosleep", "ep_poll", "do_epoll_wait", "sigsuspend", "do_sigtimedwait",
                "do_wait", "kernel_wait", "inet_csk_accept", "unix_accept", "schedule_hrtimeout", "pause")
_WCHAN_IO = ("poll", "select", "wait_woken", "sk_wait", "sock_", "unix_", "tcp_", "udp_", "pipe_", "folio_",
             "io_schedule", "wait_on_page", "blk", "jbd2", "ext4", "xfs", "nfs", "n_tty", "tty_", "wait_for_",
             "skb_", "sk_stream", "netlink")


def classify(state: str, nr: int | None, args: tuple[int, ...], wchan: str,
             table: dict[int, tuple[str, str]]) -> tuple[str, str, int]:
    """(category, label, futex address or 0) of one blocked thread at one tick.

    ``nr`` None: the syscall was not readable (classify by state + wchan);
    -1: blocked outside a syscall (a page fault: I/O)."""
    if nr is not None and nr >= 0:
        cat, name = table.get(nr, ("", f"syscall {nr}"))
        if name == "futex":
            cmd = (args[1] & _FUTEX_CMD_MASK) if len(args) > 1 else 0
            label = _FUTEX_LOCK_CMDS.get(cmd)
            if label is not None:
                return "lock", f"futex {label}", args[0] if args else 0
            return "sleep", "futex wait (condvar/semaphore/join)", 0
        if name == "fcntl" and not wchan.startswith(("locks_", "fcntl", "posix_lock")):
            cat = "io"
        elif name == "fcntl":
            cat = "lock"
        if cat:
            return cat, f"{name} {wchan}".strip(), 0
    elif nr == -1:  # blocked outside a syscall: a page fault (I/O) when it sleeps somewhere
        return ("io", f"fault {wchan}", 0) if wchan else ("other", "no syscall", 0)
    # no syscall number, or one we do not know: the kernel function decides
    w = wchan
    if w and w != "0":
        if w.startswith(_WCHAN_LOCK):
            return "lock", w, 0
        if w.startswith(_WCHAN_SLEEP):
            return "sleep", w, 0
        if w.startswith(_WCHAN_IO) or state == "D":
            return "io", w, 0
    if state == "D":
        return "io", w or "uninterruptible", 0
    label = f"syscall {nr} {w}".strip() if nr is not None and nr >= 0 else (w or state or "?")
    return "other", label, 0


@dataclass(frozen=True, slots=True)
class ThreadSplit:
    """One thread's wall time over one interval, split into shares (percent)."""

    tid: int
    name: str
    wall_ns: int
    oncpu_pct: float
    runqueue_pct: float
    lock_pct: float
    io_pct: float
    sleep_pct: float
    other_pct: float
    #: ticks that saw the thread blocked, and the ticks in the interval
    blocked_ticks: int = 0
    ticks: int = 0
    #: the most frequent blocking labels (syscall + kernel function), with tick counts
    top_waits: tuple[tuple[str, int], ...] = ()

    def shares(self) -> tuple[float, ...]:
        """The shares in CATEGORIES order."""
        return (self.oncpu_pct, self.runqueue_pct, self.lock_pct, self.io_pct, self.sleep_pct, self.other_pct)

    def pct(self, category: str) -> float:
        """The share of one of CATEGORIES."""
        return self.shares()[CATEGORIES.index(category)]


@dataclass(frozen=True)
class ThreadsSample:
    """What the thread sampler saw of one process over one interval."""

    pid: int
    comm: str
    taken_mono_ns: int
    duration_ns: int
    available: bool = True
    reason: str = ""
    threads: tuple[ThreadSplit, ...] = ()
    #: lock addresses threads were seen waiting on (times estimated from ticks)
    locks: tuple[LockWait, ...] = ()
    hz: float = 0.0
    hz_achieved: float = 0.0
    sampler_cpu_pct: float = 0.0
    #: how blocked threads were classified: "syscall+wchan" or "state+wchan"
    method: str = ""
    #: threads beyond max_threads that were not sampled
    untracked_threads: int = 0
    notes: tuple[str, ...] = ()
    source: str = "threads"
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def unavailable_sample(cls, pid: int, reason: str) -> ThreadsSample:
        return cls(pid=pid, comm="", taken_mono_ns=time.monotonic_ns(), duration_ns=0,
                   available=False, reason=reason)

    def process_split(self) -> dict[str, float]:
        """The whole process: each category's share of the threads' summed wall time."""
        total = sum(t.wall_ns for t in self.threads)
        out = {c: 0.0 for c in CATEGORIES}
        if total <= 0:
            return out
        for t in self.threads:
            for c in CATEGORIES:
                out[c] += t.pct(c) * t.wall_ns / total
        return out


def _read(fd: int) -> bytes:
    return os.pread(fd, 4096, 0)


def _schedstat(fd: int) -> tuple[int, int]:
    f = _read(fd).split()
    return int(f[0]), int(f[1])


def _state(stat: bytes) -> str:
    i = stat.rfind(b")")
    return chr(stat[i + 2]) if 0 <= i < len(stat) - 2 else "?"


class _Thread:
    __slots__ = ("tid", "name", "fd_syscall", "fd_wchan", "fd_stat", "fd_sched", "base_ns", "base_run",
                 "base_wait", "ticks", "blocked", "labels", "last_addr", "alive")

    def __init__(self, tid: int, name: str) -> None:
        self.tid, self.name = tid, name
        self.fd_syscall = self.fd_wchan = self.fd_stat = self.fd_sched = -1
        self.base_ns = self.base_run = self.base_wait = 0
        self.ticks = 0
        self.blocked: Counter[str] = Counter()
        self.labels: Counter[str] = Counter()
        self.last_addr = 0
        self.alive = True

    def close(self) -> None:
        for fd in (self.fd_syscall, self.fd_wchan, self.fd_stat, self.fd_sched):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fd_syscall = self.fd_wchan = self.fd_stat = self.fd_sched = -1


class ThreadSampler:
    """Samples every thread of ``pid`` ``hz`` times a second in one
    background thread (``start()``); ``sample()`` returns the split since the
    previous ``sample()`` (or ``start()``)."""

    name = "threads"

    def __init__(self, pid: int, *, hz: float = 100.0, procfs_root: str = "/proc", max_threads: int = 256,
                 rescan_s: float = 0.25, clock=time.monotonic_ns, machine: str | None = None) -> None:
        self.pid = int(pid)
        self.hz = float(hz)
        self.root = procfs_root.rstrip("/") or "/"
        self.max_threads = int(max_threads)
        self.rescan_s = float(rescan_s)
        self._clock = clock
        self._table = syscall_table(machine)
        self._fcntl = {nr for nr, (_, name) in self._table.items() if name == "fcntl"}
        self._threads: dict[int, _Thread] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._own_tid = 0  # the sampler thread itself, when profiling our own process
        self._interval_start = 0
        self._ticks = 0
        self._cpu_ns = 0
        self._last_scan = 0
        self._untracked = 0
        self._locks: dict[int, list] = {}  # addr -> [ticks, waits, set(tids)]
        self._use_syscall: bool | None = None
        self._notes: list[str] = []
        self._started = False
        self._comm = ""

    # -- protocol ------------------------------------------------------------------------

    def _task_dir(self, tid: int | None = None) -> str:
        base = f"{self.root}/{self.pid}/task"
        return base if tid is None else f"{base}/{tid}"

    def available(self) -> tuple[bool, str]:
        if self.pid <= 0:
            return False, f"pid {self.pid}: not a process id"
        try:
            tids = os.listdir(self._task_dir())
        except FileNotFoundError:
            return False, f"no process {self.pid} (in {self.root})"
        except OSError as e:
            return False, f"cannot list {self._task_dir()}: {e.strerror or e}"
        if not tids:
            return False, f"process {self.pid} has no threads (exited?)"
        try:
            with open(f"{self._task_dir(int(tids[0]))}/schedstat", "rb") as f:
                f.read()
        except FileNotFoundError:
            return False, "the kernel has no schedstat (CONFIG_SCHED_INFO off): run-queue time unknown"
        except OSError as e:
            return False, f"cannot read schedstat of {self.pid}: {e.strerror or e}"
        return True, ""

    def start(self) -> None:
        """Take the baseline and (``hz`` > 0) start the background sampler."""
        if self._started:
            return
        self._started = True
        now = self._clock()
        with self._lock:
            self._interval_start = now
            self._scan(now)
        if self.hz > 0:
            self._worker = threading.Thread(target=self._run, name=f"fipstop-threads-{self.pid}", daemon=True)
            self._worker.start()

    def close(self) -> None:
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=2.0)
            self._worker = None
        with self._lock:
            for t in self._threads.values():
                t.close()
            self._threads.clear()

    def __enter__(self) -> ThreadSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the background loop -------------------------------------------------------------

    def _run(self) -> None:
        if self.pid == os.getpid():
            self._own_tid = threading.get_native_id()
        period = 1e9 / self.hz
        nxt: float = time.monotonic_ns()
        while not self._stop.is_set():
            c0 = time.thread_time_ns()
            try:
                self.tick()
            except Exception as e:  # never die silently: say so in the next sample
                with self._lock:
                    note = f"sampler error: {type(e).__name__}: {e}"
                    if note not in self._notes:
                        self._notes.append(note[:200])
            self._cpu_ns += time.thread_time_ns() - c0
            nxt += period
            now = time.monotonic_ns()
            if nxt < now:  # fell behind (a loaded machine): skip, do not burst
                nxt = now + period
            time.sleep((nxt - now) / 1e9)  # half the CPU of Event.wait per wakeup; close() waits <= 1 tick

    def tick(self) -> None:
        """One look at every thread (the background loop calls this ``hz``
        times a second; tests call it directly)."""
        with self._lock:
            now = self._clock()
            if now - self._last_scan >= self.rescan_s * 1e9:
                self._scan(now)
            self._ticks += 1
            gone = []
            for t in self._threads.values():
                try:
                    self._look(t)
                except (ProcessLookupError, FileNotFoundError):
                    gone.append(t)
                except OSError:
                    gone.append(t)
            for t in gone:
                t.alive = False
                t.close()

    def _look(self, t: _Thread) -> None:
        t.ticks += 1
        nr: int | None = None
        args: tuple[int, ...] = ()
        state = "S"
        if t.fd_syscall >= 0:
            raw = _read(t.fd_syscall)
            if raw[:1] == b"r":  # "running": runnable, schedstat accounts for it
                t.last_addr = 0
                return
            parts = raw.split()
            if not parts:
                return
            nr = int(parts[0])
            if nr >= 0:
                args = (int(parts[1], 16), int(parts[2], 16)) if len(parts) > 2 else ()
                if self._table.get(nr, ("",))[0] in ("lock", "sleep") and nr not in self._fcntl:
                    # the syscall says it all: spare the wchan read (half the tick's cost)
                    self._count(t, *classify(state, nr, args, "", self._table))
                    return
        else:
            state = _state(_read(t.fd_stat))
            if state == "R":
                t.last_addr = 0
                return
        wchan = _read(t.fd_wchan).decode("ascii", "replace").strip() if t.fd_wchan >= 0 else ""
        if wchan == "0":  # woke up between the two reads, or hidden (another user's process)
            wchan = ""
            if nr is None:
                self._count(t, "io" if state == "D" else "other",
                            "uninterruptible" if state == "D" else f"state {state}, reason hidden", 0)
                return
        self._count(t, *classify(state, nr, args, wchan, self._table))

    def _count(self, t: _Thread, cat: str, label: str, addr: int) -> None:
        t.blocked[cat] += 1
        t.labels[label] += 1
        if addr:
            rec = self._locks.get(addr)
            if rec is None:
                rec = self._locks[addr] = [0, 0, set()]
            rec[0] += 1
            if t.last_addr != addr:
                rec[1] += 1
            rec[2].add(t.tid)
        t.last_addr = addr

    # -- threads -------------------------------------------------------------------------

    def _scan(self, now: int) -> None:
        self._last_scan = now
        try:
            names = os.listdir(self._task_dir())
        except OSError:
            names = []
        if not self._comm:
            try:
                with open(f"{self.root}/{self.pid}/comm", "rb") as f:
                    self._comm = f.read().decode("utf-8", "replace").strip()
            except OSError:
                pass
        tids = sorted(int(n) for n in names if n.isdigit() and int(n) != self._own_tid)
        present = set(tids)
        for tid in [tid for tid in self._threads if tid not in present]:
            self._threads[tid].alive = False
            self._threads[tid].close()
        untracked = 0
        for tid in tids:
            if tid in self._threads:
                continue
            if len([t for t in self._threads.values() if t.alive]) >= self.max_threads:
                untracked += 1
                continue
            t = self._open(tid, now)
            if t is not None:
                self._threads[tid] = t
        self._untracked = untracked

    def _open(self, tid: int, now: int) -> _Thread | None:
        d = self._task_dir(tid)
        try:
            with open(f"{d}/comm", "rb") as f:
                name = f.read().decode("utf-8", "replace").rstrip("\n")
        except OSError:
            return None
        t = _Thread(tid, name)
        try:
            t.fd_sched = os.open(f"{d}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
            t.base_run, t.base_wait = _schedstat(t.fd_sched)
        except (OSError, ValueError, IndexError):
            t.close()
            return None
        t.base_ns = now
        if self._use_syscall is not False:
            try:
                t.fd_syscall = os.open(f"{d}/syscall", os.O_RDONLY | os.O_CLOEXEC)
                _read(t.fd_syscall)
                self._use_syscall = True
            except OSError as e:
                if t.fd_syscall >= 0:
                    os.close(t.fd_syscall)
                t.fd_syscall = -1
                if self._use_syscall is None:
                    self._use_syscall = False
                    self._notes.append(f"syscall not readable ({e.strerror or e}): blocking reasons from "
                                       "state + kernel function only (which the kernel hides too from "
                                       "whoever may not ptrace the process: then it is 'other')")
        if t.fd_syscall < 0:
            try:
                t.fd_stat = os.open(f"{d}/stat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                t.close()
                return None
        try:
            t.fd_wchan = os.open(f"{d}/wchan", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            t.fd_wchan = -1
        return t

    # -- the interval --------------------------------------------------------------------

    def sample(self) -> ThreadsSample:
        ok, why = self.available() if not self._started else (True, "")
        if not ok:
            return ThreadsSample.unavailable_sample(self.pid, why)
        if not self._started:
            self.start()
        with self._lock:
            now = self._clock()
            self._scan(now)
            duration = max(now - self._interval_start, 1)
            ticks, cpu_ns = self._ticks, self._cpu_ns
            splits = []
            for t in list(self._threads.values()):
                if not t.alive:
                    continue
                try:
                    run, wait = _schedstat(t.fd_sched)
                except (OSError, ValueError, IndexError):
                    t.alive = False
                    t.close()
                    continue
                splits.append(self._split(t, now, run, wait))
                t.base_ns, t.base_run, t.base_wait = now, run, wait
                t.ticks = 0
                t.blocked.clear()
                t.labels.clear()
            for tid in [tid for tid, t in self._threads.items() if not t.alive]:
                del self._threads[tid]
            period_ns = duration / ticks if ticks else 0
            locks = tuple(sorted(
                (LockWait(address=a, wait_ns=int(r[0] * period_ns), waits=r[1], waiter_tids=tuple(sorted(r[2])))
                 for a, r in self._locks.items()), key=lambda lw: (-lw.wait_ns, lw.address)))
            notes = tuple(self._notes)
            self._locks = {}
            self._ticks = 0
            self._cpu_ns = 0
            self._interval_start = now
            if not splits and not os.path.isdir(self._task_dir()):
                return ThreadsSample.unavailable_sample(self.pid, f"process {self.pid} exited")
        splits.sort(key=lambda s: s.tid)
        return ThreadsSample(
            pid=self.pid, comm=self._comm, taken_mono_ns=now, duration_ns=duration, threads=tuple(splits),
            locks=locks, hz=self.hz, hz_achieved=ticks * 1e9 / duration,
            sampler_cpu_pct=100.0 * cpu_ns / duration,
            method="syscall+wchan" if self._use_syscall else "state+wchan",
            untracked_threads=self._untracked, notes=notes)

    @staticmethod
    def _split(t: _Thread, now: int, run: int, wait: int) -> ThreadSplit:
        wall = max(now - t.base_ns, 1)
        on = min(max(run - t.base_run, 0) / wall, 1.0)
        rq = min(max(wait - t.base_wait, 0) / wall, 1.0 - on)
        blocked = max(1.0 - on - rq, 0.0)
        nb = sum(t.blocked.values())
        share = {c: 0.0 for c in BLOCKED}
        if nb:
            for c in BLOCKED:
                share[c] = blocked * t.blocked[c] / nb
        else:
            share["other"] = blocked
        return ThreadSplit(
            tid=t.tid, name=t.name, wall_ns=wall, oncpu_pct=100 * on, runqueue_pct=100 * rq,
            lock_pct=100 * share["lock"], io_pct=100 * share["io"], sleep_pct=100 * share["sleep"],
            other_pct=100 * share["other"], blocked_ticks=nb, ticks=t.ticks,
            top_waits=tuple(t.labels.most_common(3)))
