"""Shared bench helpers for the syslog cases: a private rsyslogd, and running a
program whose ``/dev/log`` is that rsyslogd's socket.

The approach is the one of ``fipstop bench ring``'s syslog case
(``bench/ring/ringbench.c``, ``syslog_redirect``): rsyslogd runs in the
foreground with imuxsock on a socket path of the bench's own (rate limiting
off) and writes everything to one file; the program under test runs in a
private mount namespace where ``/dev/log`` is that socket: a bind mount over
``/dev/log`` when it exists, otherwise a private tmpfs on ``/dev`` holding a
symlink ``/dev/log -> SOCK`` and links to the few real devices a server needs.
Nothing outside the namespace changes, so the machine's own syslog (if any)
and other tests never see the bench's traffic.  Needs root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fipstop.bench.results import output_line
from fipstop.children import popen


def find_rsyslogd() -> str | None:
    return shutil.which("rsyslogd") or next(
        (p for p in ("/usr/sbin/rsyslogd", "/sbin/rsyslogd") if os.access(p, os.X_OK)), None
    )


def _one_line(text: str, limit: int = 200) -> str:
    return output_line(text, limit)


@dataclass
class Rsyslogd:
    proc: subprocess.Popen
    sock: Path
    out: Path
    conf: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()


def rsyslog_conf(d: Path, sock: Path, out: Path) -> str:
    return (
        f'global(workDirectory="{d}")\n'
        'module(load="imuxsock" SysSock.Use="off")\n'
        f'input(type="imuxsock" Socket="{sock}" CreatePath="on" RateLimit.Interval="0")\n'
        f'*.* action(type="omfile" file="{out}")\n'
    )


def start_rsyslogd(
    d: Path, rsyslogd: str | None = None, preexec: Callable[[], None] | None = None, timeout: float = 10.0
) -> tuple[Rsyslogd | None, str | None]:
    """Start ``rsyslogd -n -f D/rsyslog.conf -i D/rsyslogd.pid`` listening on
    D/log.sock and writing D/messages; (Rsyslogd, None) once the socket
    exists, else (None, reason)."""
    rsyslogd = rsyslogd or find_rsyslogd()
    if not rsyslogd:
        return None, "rsyslogd not found (apt-get install rsyslog)"
    d.mkdir(parents=True, exist_ok=True)
    sock, out, conf, pidf = d / "log.sock", d / "messages", d / "rsyslog.conf", d / "rsyslogd.pid"
    conf.write_text(rsyslog_conf(d, sock, out), encoding="utf-8")
    proc = popen(
        [rsyslogd, "-n", "-f", str(conf), "-i", str(pidf)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.exists():
            return Rsyslogd(proc, sock, out, conf), None
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            return None, f"rsyslogd exited {proc.returncode}: {_one_line(err)}"
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    return None, f"rsyslogd did not create its socket within {timeout:.0f} s"


def count_token(path: Path, token: bytes) -> int:
    """Occurrences of token in the file (read in chunks; 0 if it is missing)."""
    n, carry = 0, b""
    try:
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 22)
                if not chunk:
                    break
                buf = carry + chunk
                n += buf.count(token)
                # keep a tail shorter than the token: it cannot hold a whole (already counted) token
                carry = buf[-(len(token) - 1) :] if len(token) > 1 else b""
    except OSError:
        return 0
    return n


def wait_settled(path: Path, token: bytes, want: int, settle_s: float = 1.0, timeout: float = 30.0) -> int:
    """Count token in path until it reaches want or stops growing for settle_s."""
    last, since = -1, time.monotonic()
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        n = count_token(path, token)
        if n >= want:
            return n
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > settle_s:
            return n
        time.sleep(0.1)
    return n


# Run "$@" with /dev/log -> $1 in a private mount namespace ($2: a directory
# of the caller's own for the old /dev when /dev/log does not exist).
_DEVLOG_SCRIPT = r"""
set -e
sock=$1; tmp=$2; shift 2
if [ -e /dev/log ] || [ -L /dev/log ]; then
    mount --bind "$sock" /dev/log
else
    mkdir -p "$tmp/olddev"
    mount --rbind /dev "$tmp/olddev"
    mount -t tmpfs -o mode=755 tmpfs /dev
    for n in null zero full random urandom tty shm pts; do
        if [ -e "$tmp/olddev/$n" ]; then ln -s "$tmp/olddev/$n" "/dev/$n"; fi
    done
    ln -s /proc/self/fd /dev/fd
    ln -s /proc/self/fd/0 /dev/stdin
    ln -s /proc/self/fd/1 /dev/stdout
    ln -s /proc/self/fd/2 /dev/stderr
    ln -s "$sock" /dev/log
fi
exec "$@"
"""


def devlog_argv(sock: Path, tmp: Path, argv: Sequence[str]) -> list[str]:
    """argv that runs ``argv`` (exec'd: same pid) with /dev/log -> sock in a
    private mount namespace.  tmp must be a directory of the caller's own."""
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    return [unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", _DEVLOG_SCRIPT, "sh",
            str(sock), str(tmp), *argv]


def devlog_reason() -> str | None:
    """None if devlog_argv can work here, else why not."""
    if os.geteuid() != 0:
        return "a private mount namespace for /dev/log needs root"
    if not (shutil.which("unshare") or os.access("/usr/bin/unshare", os.X_OK)):
        return "unshare(1) not found (util-linux)"
    return None
