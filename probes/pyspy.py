"""py-spy for Python processes (consumers such as fail2ban-server).

Why ``py-spy record`` and not repeated ``py-spy dump``: a dump is a new
process that attaches, reads the interpreter's symbols and exits, about
30 ms of CPU for one stack per thread, so 100 Hz of dumps is impossible;
``record`` attaches once and samples at ``rate_hz`` (measured here: ~40 ms
of CPU per second at 100 Hz, 2 threads, ``--nonblocking``).  The profiler
keeps ``record`` running for one window (``start()`` to ``sample()``),
stops it with SIGINT (py-spy then writes its raw folded output) and starts
the next window.

py-spy has no per-sample "idle" or "GIL" mark in its output, so the
profiler runs at most two recorders side by side, each at ``rate_hz``:

- ``gil`` (``--gil --idle``): stacks of the thread holding the GIL: the one
  running Python code: the on-CPU stacks, and the GIL share (GIL-holding
  samples over the window's ticks);
- ``all`` (``--idle``, when ``idle``): every thread's stack at every tick;
  what is not on the GIL holder's stack is an idle stack.

With ``gil=False`` the on-CPU stacks come from py-spy's own notion of an
active thread (no flags).  ``--nonblocking`` (default) never pauses the
target; ``native`` adds C frames (``--native``, which needs blocking mode).

Never imports textual.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from fipstop.children import popen
from fipstop.probes.stacks import ProfileSample, StackCount

__all__ = ["PySpyProfiler", "find_pyspy", "is_python_process", "parse_raw"]

#: the longest window one recorder runs (a poll normally ends it much sooner)
MAX_WINDOW_S = 600

_THREAD = re.compile(r"thread \((?P<tid>0x[0-9a-fA-F]+|\d+)\)(?::\s?(?P<name>.*))?$")


def find_pyspy() -> str | None:
    """py-spy on PATH, else next to this interpreter (a venv's bin/)."""
    found = shutil.which("py-spy")
    if found:
        return found
    cand = Path(sys.executable).parent / "py-spy"
    return str(cand) if cand.is_file() and os.access(cand, os.X_OK) else None


def is_python_process(pid: int, procfs_root: str = "/proc") -> tuple[bool | None, str]:
    """(True/False, what was seen), or (None, why we cannot tell)."""
    base = f"{procfs_root}/{pid}"
    try:
        exe = os.path.basename(os.readlink(f"{base}/exe"))
    except FileNotFoundError:
        return None, f"no process {pid}"
    except OSError:
        exe = ""
    if exe.startswith(("python", "pypy")):
        return True, exe
    try:
        with open(f"{base}/maps", "rb") as f:
            maps = f.read()
        if b"libpython" in maps:
            return True, "libpython mapped"
        return False, f"{exe or 'its executable'} is not a Python interpreter (no libpython mapped)"
    except PermissionError:
        if exe.startswith(("python", "pypy")):
            return True, exe
        return None, (f"not permitted to inspect process {pid} (another user's): run as root or as its user")
    except OSError as e:
        if not exe:
            return None, f"cannot inspect process {pid}: {e.strerror or e}"
        return False, f"{exe} is not a Python interpreter"


def parse_raw(text: str) -> list[StackCount]:
    """py-spy's raw output (``--threads``): ``thread (TID): NAME;frame;... COUNT``."""
    out: list[StackCount] = []
    for line in text.splitlines():
        line = line.rstrip()
        head, sep, count = line.rpartition(" ")
        if not sep or not count.isdigit():
            continue
        frames = head.split(";")
        tid, name = 0, ""
        m = _THREAD.match(frames[0]) if frames else None
        if m:
            tid = int(m.group("tid"), 0)
            name = m.group("name") or ""
            frames = frames[1:]
        elif frames and frames[0].startswith("process "):
            frames = frames[1:]
        out.append(StackCount(tuple(frames), int(count), tid, name))
    return out


def _key(s: StackCount) -> tuple:
    return (s.tid, s.thread, s.frames)


class _Recorder:
    """One ``py-spy record`` process for one window."""

    def __init__(self, argv: list[str], out: Path) -> None:
        self.out = out
        self.err = out.with_suffix(".err")
        with open(self.err, "wb") as err:
            self.proc = popen([*argv, "-o", str(out)], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def stop(self, timeout: float = 5.0) -> tuple[list[StackCount] | None, str]:
        """(stacks, "") or (None, why)."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None, "py-spy did not stop within 5 s"
        try:
            text = self.out.read_text("utf-8", "replace")
        except OSError:
            text = None
        finally:
            for p in (self.out,):
                try:
                    p.unlink()
                except OSError:
                    pass
        if text is None:
            return None, self.error() or f"py-spy exited with {self.proc.returncode} and wrote nothing"
        return parse_raw(text), ""

    def error(self) -> str:
        try:
            lines = [ln.strip() for ln in self.err.read_text("utf-8", "replace").splitlines()
                     if ln.strip() and not ln.startswith("py-spy>")]
        except OSError:
            return ""
        for ln in lines:
            if ln.lower().startswith("error"):
                return ln[:300]
        return lines[0][:300] if lines else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class PySpyProfiler:
    """On-CPU and idle stacks and the GIL share of one Python process."""

    name = "py-spy"

    def __init__(self, pid: int, *, rate_hz: int = 100, nonblocking: bool = True, idle: bool = True,
                 native: bool = False, gil: bool = True, by_line: bool = False, procfs_root: str = "/proc",
                 pyspy: str | None = None) -> None:
        self.pid = int(pid)
        self.rate_hz = max(1, int(rate_hz))
        self.nonblocking = bool(nonblocking) and not native
        self.idle = bool(idle)
        self.native = bool(native)
        self.gil = bool(gil)
        self.by_line = bool(by_line)
        self.procfs_root = procfs_root
        self.pyspy = pyspy or find_pyspy()
        self._dir: tempfile.TemporaryDirectory | None = None
        self._recorders: dict[str, _Recorder] = {}
        self._window_start = 0
        self._n = 0
        self._last: ProfileSample | None = None

    def available(self) -> tuple[bool, str]:
        if self.pyspy is None:
            return False, "py-spy is not installed (pip install py-spy)"
        py, why = is_python_process(self.pid, self.procfs_root)
        if py is None:
            return False, why
        if not py:
            return False, f"not a Python process: {why}"
        if os.geteuid() != 0:
            try:
                uid = os.stat(f"{self.procfs_root}/{self.pid}").st_uid
            except OSError as e:
                return False, f"cannot inspect process {self.pid}: {e.strerror or e}"
            if uid != os.geteuid():
                return False, (f"not permitted: py-spy needs ptrace rights on pid {self.pid} "
                               f"(owned by uid {uid}); run as root or as that user")
            try:
                scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip())
            except (OSError, ValueError):
                scope = 0
            if scope >= 2:
                return False, f"not permitted: kernel.yama.ptrace_scope={scope} allows only root to attach"
        return True, ""

    def _modes(self) -> dict[str, list[str]]:
        modes: dict[str, list[str]] = {}
        if self.gil:
            modes["gil"] = ["--gil", "--idle"]
        else:
            modes["active"] = []
        if self.idle:
            modes["all"] = ["--idle"]
        return modes

    def _argv(self, flags: list[str]) -> list[str]:
        # --duration: a recorder orphaned by a killed fipstop stops by itself
        argv = [str(self.pyspy), "record", "--pid", str(self.pid), "--format", "raw", "--threads",
                "--rate", str(self.rate_hz), "--duration", str(MAX_WINDOW_S), *flags]
        if not self.by_line:
            argv.append("--function")
        if self.nonblocking:
            argv.append("--nonblocking")
        if self.native:
            argv.append("--native")
        return argv

    def start(self) -> None:
        if self._recorders:
            return
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="fipstop-pyspy-")
        self._n += 1
        for mode, flags in self._modes().items():
            out = Path(self._dir.name) / f"{mode}-{self._n}.txt"
            self._recorders[mode] = _Recorder(self._argv(flags), out)
        self._window_start = time.monotonic_ns()

    def sample(self) -> ProfileSample:
        """The window since ``start()`` or the previous ``sample()``; the
        next window starts right away."""
        ok, why = self.available()
        if not ok:
            self.close()
            return ProfileSample.unavailable(self.name, self.pid, why, time.monotonic_ns())
        if not self._recorders:
            self.start()
            time.sleep(min(1.0, 10 / self.rate_hz))  # a first window, short
        recorders, self._recorders = self._recorders, {}
        started = self._window_start
        results: dict[str, list[StackCount]] = {}
        errors = []
        for mode, rec in recorders.items():
            stacks, err = rec.stop()
            if stacks is None:
                errors.append(err)
            else:
                results[mode] = stacks
            try:
                rec.err.unlink()
            except OSError:
                pass
        now = time.monotonic_ns()
        self.start()  # the next window
        if errors and not results:
            reason = errors[0] or "py-spy failed"
            if "ermission" in reason or "EPERM" in reason:
                reason = f"not permitted: {reason}"
            self._last = ProfileSample.unavailable(self.name, self.pid, reason, now)
            return self._last
        self._last = self._build(results, started, now, errors)
        return self._last

    def _build(self, results: dict[str, list[StackCount]], started: int, now: int,
               errors: list[str]) -> ProfileSample:
        duration = max(now - started, 1)
        ticks = self.rate_hz * duration / 1e9
        oncpu = results.get("gil", results.get("active", []))
        extra: dict[str, float] = {"rate_hz": float(self.rate_hz), "nonblocking": float(self.nonblocking)}
        if "gil" in results:
            extra["gil_pct"] = min(100.0, 100.0 * sum(s.value for s in oncpu) / ticks) if ticks else 0.0
        offcpu: list[StackCount] = []
        if "all" in results:
            allst = results["all"]
            total = sum(s.value for s in allst)
            on = Counter({_key(s): s.value for s in oncpu})
            ns_per = 1e9 / self.rate_hz
            idle_samples = 0
            for s in allst:
                rest = s.value - on.get(_key(s), 0)
                if rest > 0:
                    idle_samples += rest
                    offcpu.append(StackCount(s.frames, int(rest * ns_per), s.tid, s.thread))
            extra["idle_pct"] = 100.0 * idle_samples / total if total else 0.0
            extra["samples"] = float(total)
        else:
            extra["samples"] = float(sum(s.value for s in oncpu))
        return ProfileSample(
            source=self.name, pid=self.pid, taken_mono_ns=now, duration_ns=duration,
            reason="; ".join(e for e in errors if e), oncpu=tuple(oncpu), oncpu_unit="samples",
            oncpu_hz=float(self.rate_hz), offcpu=tuple(offcpu), extra=extra)

    def close(self) -> None:
        for rec in self._recorders.values():
            rec.kill()
        self._recorders = {}
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
