"""The helper processes of ``fipstop bench ring`` and how their output is read.

The C harness (bench/ring/ringbench.c, built with libfips compiled in) has
roles - produce, consume, recv, hold, snap, monitor; the Python cases run in
a child of their own (:mod:`fipstop.bench.ring.pychild`).  A helper prints
``ready`` once set up and a JSON line when it ends; a role that fails prints
``{"error": ...}``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import FIPS_SRC, build_c, source
from fipstop.bench.results import output_line
from fipstop.children import popen

HARNESS_SRC = source("ring/ringbench.c")

Preexec = Callable[[], None]


def log(msg: str) -> None:
    print(f"bench ring: {msg}", file=sys.stderr, flush=True)


def parse_json_lines(text: str) -> dict[str, Any] | None:
    """The last JSON object line of a harness's stdout."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("ready "):
            line = line[len("ready ") :]
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def record_bytes(size: int, seq: int) -> bytes:
    """The same record the C harness formats: 'bench ring seq=<16 hex> xxx...\\n'."""
    head = b"bench ring seq=%016x " % seq
    return head + b"x" * (size - len(head) - 1) + b"\n"


def fs_type(path: Path) -> str:
    try:
        best, fstype = "", "unknown"
        p = str(path.resolve())
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (p == parts[1] or p.startswith(parts[1].rstrip("/") + "/")):
                    if len(parts[1]) >= len(best):
                        best, fstype = parts[1], parts[2]
        return fstype
    except OSError:
        return "unknown"


def build_harness(cache_dir: Path | None = None) -> tuple[Path | None, str | None, dict[str, Any]]:
    """Compile ringbench.c + fips.c; returns (binary, None, info) or (None, reason, info)."""
    return build_c("ringbench", (HARNESS_SRC, FIPS_SRC), cache_dir=cache_dir)


def build_harness_so(cache_dir: Path | None = None) -> tuple[Path | None, str | None, dict[str, Any]]:
    """ringbench.c linked with fips.c built as a shared library (-fPIC -shared, as setup.py builds
    libfips.so), by its absolute path: what a program linking libfips runs (a PLT call per fips_log,
    the TLS model of a shared library); the fips_c_so case."""
    lib, why, info = build_c("libfips-bench.so", (FIPS_SRC,), ("-fPIC", "-shared"), cache_dir=cache_dir)
    if lib is None:
        return None, why, info
    binary, why, info2 = build_c("ringbench-so", (HARNESS_SRC,), ("-Wl,--no-as-needed", str(lib)),
                                 cache_dir=cache_dir)
    return binary, why, {**info2, "library": info}


class Child:
    """A helper process that prints 'ready' once set up and a JSON line at exit."""

    nice = 0  # set by Bench; applied to every helper process

    def __init__(self, argv: Sequence[str], *, stdin: bool = False, preexec=None, env=None) -> None:
        if preexec is None and Child.nice:
            preexec = pin_preexec(None, Child.nice)
        self.argv = list(argv)
        self.proc = popen(
            self.argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=preexec,
            env=env,
        )
        self.ready_line = ""

    def wait_ready(self, timeout: float = 30.0) -> str | None:
        """None once ready, else a reason."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return f"{Path(self.argv[0]).name} {self.argv[1]}: not ready after {timeout:.0f} s"
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if not r:
                continue
            line = self.proc.stdout.readline()
            if not line:  # EOF: it died
                err = self.proc.stderr.read() if self.proc.stderr else ""
                self.proc.wait()
                return f"{Path(self.argv[0]).name} {self.argv[1]} exited {self.proc.returncode}: " + output_line(
                    err, 200
                )
            if line.startswith("ready"):
                self.ready_line = line.strip()
                return None
            if line.startswith("{"):
                obj = parse_json_lines(line) or {}
                if "error" in obj:
                    self.proc.wait()
                    return str(obj["error"])

    def stop(self, timeout: float = 30.0) -> dict[str, Any] | None:
        """SIGTERM (and stdin EOF), then the JSON line it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # communicate() also closes stdin
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        return parse_json_lines(out or "")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            pass


def run_to_end(
    argv: Sequence[str], timeout: float, env=None, preexec=None
) -> tuple[dict[str, Any] | None, str | None]:
    """Run to completion; returns (json, None) or (None, reason)."""
    try:
        res = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env, preexec_fn=preexec
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return None, str(exc)
    obj = parse_json_lines(res.stdout)
    if obj is None:
        return None, f"exit {res.returncode}: " + output_line(res.stderr or res.stdout, 240)
    if "error" in obj:
        return None, str(obj["error"])
    return obj, None


def pin_preexec(cpu: int | None, nice: int = 0):
    if cpu is None and not nice:
        return None

    def _pin() -> None:  # runs in the child before exec
        try:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})
        except OSError:
            pass
        if nice:
            # With autogroup scheduling (kernel.sched_autogroup_enabled=1) a task's nice value weighs only
            # against tasks of its own session: the CPU is shared per session. A new session gets a new
            # autogroup, whose nice is set through /proc/self/autogroup.
            try:
                os.setsid()
                with open("/proc/self/autogroup", "w", encoding="ascii") as f:
                    f.write(str(nice))
            except OSError:
                pass
            try:
                os.setpriority(os.PRIO_PROCESS, 0, nice)
            except OSError:
                pass

    return _pin


def python_binding_reason() -> str | None:
    try:
        from fipstop import _fips  # noqa: F401
    except Exception as exc:  # ImportError or a broken build
        return f"Python binding fipstop._fips not importable ({type(exc).__name__}: {exc}); run `make lib`"
    for name in ("Domain", "Producer", "Monitor"):
        if not hasattr(_fips, name):
            return f"fipstop._fips has no {name}"
    return None


def count_records(path: Path) -> int:
    token = b"bench ring seq="
    n, carry = 0, b""
    try:
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 22)
                if not chunk:
                    break
                buf = carry + chunk
                n += buf.count(token)
                carry = buf[-(len(token) - 1) :]
                # a token wholly inside carry was counted already; carry is shorter than it
    except OSError:
        return 0
    return n
