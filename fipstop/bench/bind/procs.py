"""The processes of one ``fipstop bench bind`` run: named, and the consumers
that drain its rings (the C drain of mode ``fips``, ``fipstop tail``).

Each starts, says it is ready (or why not, in one line) and stops with
SIGTERM; the drain prints what it read as its last JSON line.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from fipstop.bench.bind.dns import QUERY_TOKEN, soa_answered
from fipstop.bench.cbuild import FIPS_SRC, build_c, source
from fipstop.bench.results import output_line
from fipstop.children import popen

DRAIN_SRC = source("bind/drain.c")
NULLSYSLOG_SRC = source("bind/nullsyslog.c")


def find_program(prog: str) -> str | None:
    return shutil.which(prog) or next(
        (p for d in ("/usr/sbin", "/sbin", "/usr/bin") if os.access(p := f"{d}/{prog}", os.X_OK)), None
    )


def tool_version(argv: list[str], pattern: str) -> str | None:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(pattern, r.stdout + r.stderr)
    return m.group(1).strip() if m else None


def build_drain(cache_dir: Path | None = None) -> tuple[Path | None, str | None, dict[str, Any]]:
    """bench/bind/drain.c + fips.c: the C consumer of the fips modes (the native mode's binary records it matches on
    their fields, as an IPS can, and formats one in 64 with fipstop/csrc/fips_bindq_fmt.c to cross-check)."""
    csrc = FIPS_SRC.parent
    return build_c("binddrain", (DRAIN_SRC, FIPS_SRC), cache_dir=cache_dir,
                   depends=(csrc / "fips_bindq_fmt.c", csrc / "fips_bindq.h"))


def build_nullsyslog(cache_dir: Path | None = None) -> tuple[Path | None, str | None, dict[str, Any]]:
    """bench/bind/nullsyslog.c: the no-op syslog(3) preload of mode null_syslog."""
    return build_c("libnullsyslog", (NULLSYSLOG_SRC,), ("-shared", "-fPIC"), cache_dir=cache_dir)


def stop_process(proc: subprocess.Popen | None, timeout: float = 20.0) -> int | None:
    """SIGTERM, then SIGKILL after ``timeout``; the exit status."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode


def named_tail(d: Path) -> str:
    """The last lines named wrote in its run directory, on one line."""
    text = ""
    for name in ("named.out", "named.log"):
        try:
            text += (d / name).read_text(errors="replace")
        except OSError:
            pass
    return output_line("\n".join(text.splitlines()[-4:]), 300) or "(no output)"


def start_named(argv: list[str], d: Path, port: int,
                env: dict[str, str] | None = None) -> tuple[subprocess.Popen | None, str | None]:
    """named in the foreground in ``d``, once it answers the zone's SOA on ``port``."""
    out = open(d / "named.out", "wb")
    try:
        proc = popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=d, env=env)
    except OSError as exc:
        return None, f"cannot start named: {exc}"
    finally:
        out.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None, f"named exited {proc.returncode} before answering: " + named_tail(d)
        if soa_answered(port):
            return proc, None
        time.sleep(0.1)
    stop_process(proc)
    return None, f"named did not answer on 127.0.0.1#{port} within 30 s: " + named_tail(d)


def start_drain(drain: Path, shm: Path, domain: str, name: str,
                token: bytes = QUERY_TOKEN) -> tuple[subprocess.Popen | None, str | None]:
    """The C consumer ``name`` draining ``domain``, counting records with ``token``."""
    proc = popen(
        [str(drain), str(shm), domain, name, token.decode()],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    r, _, _ = select.select([proc.stdout], [], [], 15)
    line = proc.stdout.readline() if r else ""
    if line.startswith("ready"):
        return proc, None
    stop_process(proc, 5)
    err = (proc.stderr.read() if proc.stderr else "") + line
    return None, f"drain did not start: {output_line(err, 200)}"


def start_capture(fstrm_capture: str, sock: Path, out: Path) -> tuple[subprocess.Popen | None, str | None]:
    """``fstrm_capture`` listening on ``sock`` for named's dnstap, writing ``out``; ready once the socket exists."""
    from fipstop.bench.bind.dnstap import CONTENT_TYPE

    err = open(sock.parent / "fstrm_capture.err", "wb")
    try:
        proc = popen([fstrm_capture, "-t", CONTENT_TYPE, "-u", str(sock), "-w", str(out)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    except OSError as exc:
        return None, f"cannot start fstrm_capture: {exc}"
    finally:
        err.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = (sock.parent / "fstrm_capture.err").read_text(errors="replace")
            return None, f"fstrm_capture exited {proc.returncode}: {output_line(text, 200)}"
        if sock.exists():
            return proc, None
        time.sleep(0.05)
    stop_process(proc, 5)
    return None, "fstrm_capture did not open its socket within 15 s"


def stop_drain(proc: subprocess.Popen) -> dict[str, Any] | None:
    """SIGTERM the drain; the JSON line it printed last (what it read), or None."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    for line in reversed((out or "").splitlines()):
        if line.startswith("{"):
            try:
                found: dict[str, Any] = json.loads(line)
                return found
            except ValueError:
                return None
    return None
