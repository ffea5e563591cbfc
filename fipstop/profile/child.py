"""The profilers in a child process, so the dashboard never loads bcc or LLVM.

Why a process: bcc's compile maps libbcc and LLVM (86 MB of code) and leaves
about 100 MB in malloc's arenas, and none of it goes back when the program
is closed (measured in the dashboard: 66 MB before the profile, 195 MB after
leaving it).  In a child that exits, all of it goes back to the kernel, and
the dashboard itself never grows by more than the reports it holds.

:class:`ChildProfiling` implements :class:`fipstop.sources.protocol.Profiling`
in the dashboard: each call is a request to ``python -m fipstop.profile.child``,
which serves it with the in-process :class:`fipstop.sources.profiling.
ProfileSessions` (the same code, so the same parking and reuse: one bcc
compile serves every pid while the child lives).  The child pushes its start-up
phase ("compiling the eBPF program") as it changes, so the progress line
needs no request.

Wire: length-prefixed pickle frames on the child's stdin and stdout.  Both
ends are this package, started by this process from ``sys.executable`` over
private pipes; the profiled process's text inside the reports is data, escaped
at display as before.

Lifetime: the child exits at EOF on its stdin, whose write end only this
process holds, so the kernel ends it however the dashboard dies (SIGKILL
included).  ``PR_SET_PDEATHSIG`` (fipstop.children) would not do here: it fires
when the *thread* that forked exits, and the child is started from the
profile's worker thread, which ends with the profile.  After the last profile
stops the child is kept ``linger_s`` seconds (its program parked) so that going
back to the profile, of any pid, costs no compile; then it is ended.
"""

from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from fipstop.profile.session import ProfileOptions, ProfileReport

__all__ = ["ChildProfiling", "ProfilerProcessError", "main"]

#: a frame bigger than this is a broken stream, not a report
MAX_FRAME = 64 << 20
_LEN = struct.Struct("<I")
#: how often the child looks at a start's phase
PHASE_POLL_S = 0.1


class ProfilerProcessError(RuntimeError):
    """The profiler process failed a request or ended."""


def write_frame(out: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()


def _read_exact(inp: IO[bytes], n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = inp.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(inp: IO[bytes]) -> Any:
    """The next object, or EOFError at the end of the stream (or a broken one)."""
    head = _read_exact(inp, _LEN.size)
    if head is None:
        raise EOFError
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise EOFError(f"frame of {n} bytes")
    data = _read_exact(inp, n)
    if data is None:
        raise EOFError
    return pickle.loads(data)


# --------------------------------------------------------------------------- #
# the dashboard's side
# --------------------------------------------------------------------------- #
@dataclass
class _Call:
    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False
    value: Any = None


class _Child:
    """One running profiler process, its reader thread and its calls in flight."""

    def __init__(self, argv: list[str], on_phase: Callable[[int, str], None]) -> None:
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     start_new_session=True)  # the terminal's Ctrl-C is the dashboard's
        self._on_phase = on_phase
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._calls: dict[int, _Call] = {}
        self._next = 0
        self.ended = ""
        self._reader = threading.Thread(target=self._read, name="fipstop-profiler-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return not self.ended and self.proc.poll() is None

    def call(self, op: str, pid: int, arg: Any = None) -> Any:
        c = _Call()
        with self._lock:
            if self.ended:
                raise ProfilerProcessError(self.ended)
            self._next += 1
            cid = self._next
            self._calls[cid] = c
        try:
            with self._write_lock:
                assert self.proc.stdin is not None
                write_frame(self.proc.stdin, (cid, op, int(pid), arg))
        except (OSError, ValueError):
            pass  # the reader sees the end and fails the call with the reason
        c.done.wait()
        if not c.ok:
            raise ProfilerProcessError(str(c.value))
        return c.value

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        try:
            while True:
                msg = read_frame(out)
                if msg[0] == "phase":
                    self._on_phase(int(msg[1]), str(msg[2]))
                    continue
                _, cid, ok, value = msg
                with self._lock:
                    c = self._calls.pop(cid, None)
                if c is not None:
                    c.ok, c.value = bool(ok), value
                    c.done.set()
        except (EOFError, OSError, ValueError, pickle.UnpicklingError, TypeError, IndexError):
            pass
        rc = self.proc.wait()
        why = f"the profiler process ended (exit status {rc})"
        last = self._last_stderr_line()
        if last:
            why += f": {last}"
        with self._lock:
            self.ended = why
            calls, self._calls = list(self._calls.values()), {}
        for c in calls:
            c.ok, c.value = False, why
            c.done.set()

    def _last_stderr_line(self) -> str:
        try:
            self.stderr.seek(0)
            lines = [ln.strip() for ln in self.stderr.read()[-4096:].decode(errors="replace").splitlines()]
        except (OSError, ValueError):
            return ""
        lines = [ln for ln in lines if ln]
        return lines[-1][:200] if lines else ""

    def end(self, timeout_s: float = 2.0) -> None:
        """Close its stdin (it exits at EOF); kill it if it does not."""
        with self._write_lock:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout_s)
        try:
            self.stderr.close()
        except OSError:
            pass


class ChildProfiling:
    """Implements :class:`fipstop.sources.protocol.Profiling` through a child
    process (see the module docstring)."""

    def __init__(self, *, linger_s: float = 30.0, argv: list[str] | None = None) -> None:
        self.linger_s = float(linger_s)
        self.argv = argv or [sys.executable, "-m", "fipstop.profile.child"]
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._phase: dict[int, str] = {}
        self._active: set[int] = set()
        self._linger: threading.Timer | None = None
        #: profiler processes started (a test's oracle: one per visit after the linger, else one)
        self.spawned = 0

    @property
    def child_pid(self) -> int | None:
        """The profiler process's pid while one runs (for memory accounting)."""
        c = self._child
        return c.proc.pid if c is not None and c.alive else None

    def _set_phase(self, pid: int, phase: str) -> None:
        with self._lock:
            if pid in self._phase:
                self._phase[pid] = phase

    def _ensure(self) -> _Child:
        with self._lock:
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
            if self._child is None or not self._child.alive:
                old = self._child
                self._child = _Child(self.argv, self._set_phase)
                self.spawned += 1
            else:
                old = None
            child = self._child
        if old is not None:
            old.end(0.5)
        return child

    def profile_start(self, pid: int, options: ProfileOptions | None = None) -> None:
        pid = int(pid)
        with self._lock:
            self._phase[pid] = "starting the profiler process"
            self._active.add(pid)
        try:
            self._ensure().call("start", pid, options)
        finally:
            with self._lock:
                self._phase.pop(pid, None)

    def profile_phase(self, pid: int) -> str:
        with self._lock:
            return self._phase.get(int(pid), "")

    def profile_poll(self, pid: int) -> ProfileReport | None:
        child = self._child
        if child is None or int(pid) not in self._active:
            return None
        report = child.call("poll", int(pid))
        return report if isinstance(report, ProfileReport) else None

    def profile_stop(self, pid: int) -> None:
        pid = int(pid)
        with self._lock:
            self._active.discard(pid)
            child = self._child
        if child is not None and child.alive:
            try:
                child.call("stop", pid)
            except ProfilerProcessError:
                pass
        with self._lock:
            if self._active or self._child is not child or child is None:
                return
            if self._linger is not None:
                self._linger.cancel()
            self._linger = threading.Timer(self.linger_s, self._end_if_idle, args=(child,))
            self._linger.daemon = True
            self._linger.start()

    def _end_if_idle(self, child: _Child) -> None:
        with self._lock:
            if self._active or self._child is not child:
                return
            self._child = None
            self._linger = None
        child.end()

    def close(self) -> None:
        with self._lock:
            child, self._child = self._child, None
            self._active.clear()
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
        if child is not None:
            child.end()


# --------------------------------------------------------------------------- #
# the child's side
# --------------------------------------------------------------------------- #
def _serve(inp: IO[bytes], out: IO[bytes]) -> int:
    from fipstop.sources.profiling import ProfileSessions

    sessions = ProfileSessions(park_s=10.0**9)  # parked until the dashboard ends this process
    write_lock = threading.Lock()
    requests: queue.Queue[tuple | None] = queue.Queue()
    starting: list[int] = []

    def send(obj: Any) -> None:
        with write_lock:
            write_frame(out, obj)

    def reader() -> None:
        try:
            while True:
                requests.put(read_frame(inp))
        except (EOFError, OSError, ValueError, pickle.UnpicklingError):
            pass
        requests.put(None)
        # EOF: the dashboard is done or dead.  Detach now, even while a
        # compile runs (the kernel would detach at exit anyway).
        closer = threading.Thread(target=sessions.close, daemon=True)
        closer.start()
        closer.join(2.0)
        os._exit(0)

    def phases() -> None:
        last: dict[int, str] = {}
        while True:
            for pid in list(starting):
                ph = sessions.profile_phase(pid)
                if ph and ph != last.get(pid):
                    last[pid] = ph
                    send(("phase", pid, ph))
            threading.Event().wait(PHASE_POLL_S)

    threading.Thread(target=reader, name="requests", daemon=True).start()
    threading.Thread(target=phases, name="phases", daemon=True).start()
    while True:
        req = requests.get()
        if req is None:
            return 0
        cid, op, pid, arg = req
        try:
            if op == "start":
                starting.append(pid)
                try:
                    sessions.profile_start(pid, arg)
                finally:
                    starting.remove(pid)
                value: Any = None
            elif op == "poll":
                value = sessions.profile_poll(pid)
            elif op == "stop":
                sessions.profile_stop(pid)
                value = None
            else:
                raise ValueError(f"unknown request {op!r}")
            send(("reply", cid, True, value))
        except Exception as exc:
            from fipstop.errors import exc_line

            send(("reply", cid, False, exc_line(exc, 300)))


def main() -> int:
    """``python -m fipstop.profile.child``: serve requests on stdin until EOF."""
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # a stray print of a library goes to stderr, never into the frames
    return _serve(inp, out)


if __name__ == "__main__":
    raise SystemExit(main())
