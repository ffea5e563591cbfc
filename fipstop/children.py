"""Child processes that die with their parent, and a janitor that removes what
the parent created, however the parent dies.

A command that starts children (``fipstop demo``: the C producer, ``fipstop
ips``, the slow consumer) stops them and removes its domains when it exits.
When it is killed instead - the terminal closed (SIGHUP), SIGTERM, SIGKILL -
nothing of its own runs, so:

* every child is started through :func:`dying_with_parent`: a tiny launcher
  (``python -m fipstop.children exec PPID -- ARGV``) sets
  ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (ctypes) and execs ARGV, so the kernel
  sends the child SIGTERM when the parent dies; the setting survives execve
  (not into a set-uid program: the demo starts none).  If the parent is
  already gone when the launcher runs, it does not exec at all.  The launcher
  forks nothing and holds no lock: no ``preexec_fn`` in a threaded parent.
* a :class:`Janitor` process reads "remove" lines from a pipe whose write end
  only the parent holds; at EOF (the parent died, however) it removes those
  files (a domain only if it is still the same inode the parent created, so a
  later run's domain of the same name is left alone) and directories.  A
  parent that cleans up by itself says ``done`` first and the janitor leaves.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

__all__ = ["Janitor", "dying_with_parent", "popen", "set_parent_death_signal"]

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent (the
    thread that forked it) exits.  OSError if prctl refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` started so that it gets SIGTERM when this process dies.  Start it from a thread
    that lives as long as the child should (the main thread): the kernel sends the signal when the
    thread that forked the child exits, so a child started from a short-lived worker thread would
    be stopped with that thread."""
    return [sys.executable, "-m", "fipstop.children", "exec", str(os.getpid()), "--", *argv]


_forks: queue.SimpleQueue[tuple[list[str], dict[str, Any], Future]] = queue.SimpleQueue()
_forker: threading.Thread | None = None
_forker_lock = threading.Lock()


def _fork_loop() -> None:
    while True:
        argv, kw, fut = _forks.get()
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(subprocess.Popen(dying_with_parent(argv), **kw))
            except BaseException as exc:  # OSError, ValueError: raised in the caller's thread
                fut.set_exception(exc)


def popen(argv: list[str], **kw: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, **kw)`` whose child gets SIGTERM when this process dies (kill -9
    included), whichever thread calls it.  The pid is the program's own (the launcher execs it)."""
    global _forker
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(dying_with_parent(argv), **kw)
    with _forker_lock:
        if _forker is None or not _forker.is_alive():
            _forker = threading.Thread(target=_fork_loop, name="fipstop-children", daemon=True)
            _forker.start()
    fut: Future = Future()
    _forks.put((list(argv), kw, fut))
    return fut.result()


class Janitor:
    """A process that removes what this one created if this one dies first."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-m", "fipstop.children", "janitor"], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def _say(self, obj: dict) -> None:
        p = self.proc
        if p is None or p.stdin is None:
            return
        try:
            p.stdin.write(json.dumps(obj).encode() + b"\n")
            p.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def remove_file(self, path: str | os.PathLike[str], stamp: tuple[int, int] | None = None) -> None:
        """Remove ``path`` should this process die, if it is still this file:
        the same inode and, with ``stamp`` = (offset, length), the same bytes
        there (tmpfs hands a freed inode number to the next file at once; a
        domain's creation time at offset 80 tells two domains apart)."""
        st = os.stat(path)
        item: dict[str, object] = {"file": os.fspath(path), "dev": st.st_dev, "ino": st.st_ino}
        if stamp is not None:
            item["stamp"] = [stamp[0], _read_at(os.fspath(path), *stamp).hex()]
        self._say(item)

    def remove_dir(self, path: str | os.PathLike[str]) -> None:
        """Remove the directory tree ``path`` should this process die."""
        st = os.stat(path)
        self._say({"dir": os.fspath(path), "dev": st.st_dev, "ino": st.st_ino})

    def done(self) -> None:
        """This process cleaned up by itself: the janitor leaves without removing."""
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            if p.stdin is not None:
                p.stdin.write(b'{"done": true}\n')
                p.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _read_at(path: str, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _same(path: str, item: dict) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if (st.st_dev, st.st_ino) != (item.get("dev"), item.get("ino")):
        return False
    stamp = item.get("stamp")
    if stamp is None:
        return True
    try:
        want = bytes.fromhex(stamp[1])
        return _read_at(path, int(stamp[0]), len(want)) == want
    except (OSError, ValueError, TypeError, IndexError):
        return False


def janitor_main() -> int:
    """Read "remove" lines until EOF; at EOF without "done", remove them."""
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)  # only EOF ends the janitor
    items: list[dict] = []
    for raw in sys.stdin.buffer:
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        if item.get("done"):
            return 0
        items.append(item)
    for item in reversed(items):  # files before the directories that hold them
        if isinstance(item.get("file"), str) and _same(item["file"], item):
            try:
                os.unlink(item["file"])
            except OSError:
                pass
        elif isinstance(item.get("dir"), str) and _same(item["dir"], item) and Path(item["dir"]).is_dir():
            shutil.rmtree(item["dir"], ignore_errors=True)
    return 0


def exec_main(argv: list[str]) -> int:
    """``exec PPID -- ARGV``: die with PPID, then become ARGV."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m fipstop.children exec PPID -- ARGV...", file=sys.stderr)
        return 2
    ppid = int(argv[0])
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != ppid:  # the parent died before prctl: the signal will never come
        return 0
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as exc:
        print(f"fipstop: cannot run {argv[2]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 127  # not reached


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "janitor":
        raise SystemExit(janitor_main())
    if len(sys.argv) >= 2 and sys.argv[1] == "exec":
        raise SystemExit(exec_main(sys.argv[2:]))
    raise SystemExit("usage: python -m fipstop.children janitor | exec PPID -- ARGV...")
