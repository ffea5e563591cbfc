"""What the syslog(3) drop-in's tests share: tests/c/syslog_prog.c built in
its two variants, run with the shim preloaded, and a ring of the test's own
read back record by record.  The fixtures over these are in conftest.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fipstop._fips import Consumer, Domain
from fipstop.ring import snapshot_domain

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "fipstop" / "lib" / "libfips_syslog.so"
PROG_SRC = REPO / "tests" / "c" / "syslog_prog.c"
CC = shutil.which("cc") or shutil.which("gcc")
IDENT = b"syslog_prog"  # the program's name: syslog(3)'s default ident

LOG_KERN, LOG_USER, LOG_DAEMON, LOG_LOCAL3 = 0 << 3, 1 << 3, 3 << 3, 19 << 3
LOG_EMERG, LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG = 0, 3, 4, 5, 6, 7

#: Domain shape for most tests: small, so that files stay small.
DOMAIN_OPTS = dict(max_rings=64, max_consumers=4, ring_capacity=1 << 16, max_record=4096)

VARIANTS = {
    # name: (compiler flags, syslog symbols it must import, symbols it must not)
    "fortify": (["-O2", "-D_FORTIFY_SOURCE=2"], {"__syslog_chk", "__vsyslog_chk"}, {"syslog", "vsyslog"}),
    "plain": (["-O0", "-U_FORTIFY_SOURCE"], {"syslog", "vsyslog"}, {"__syslog_chk", "__vsyslog_chk"}),
}


# ---------------------------------------------------------------------------
# building and running syslog_prog
# ---------------------------------------------------------------------------


def compile_prog(src: Path, out: Path, flags: list[str]) -> subprocess.CompletedProcess[str]:
    assert CC is not None
    return subprocess.run(
        [CC, *flags, "-Wall", "-Wno-format", "-Wno-format-security", "-pthread", "-o", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@dataclass
class Run:
    rc: int
    out: dict[str, list[str]]  # key=value lines of stdout
    stdout: str
    stderr: bytes

    @property
    def pid(self) -> int:
        return int(self.out["pid"][0])

    @property
    def dropped(self) -> str:
        return self.out["dropped"][0]


def parse_output(stdout: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out.setdefault(key, []).append(value)
    return out


def shim_env(shm: Path | str, *, domain: str = "syslog", missing: str = "create", **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIPS_") and k != "LD_PRELOAD"}
    env.update(LD_PRELOAD=str(SHIM), FIPS_SHM_DIR=str(shm), FIPS_DOMAIN=domain, FIPS_SYSLOG_MISSING=missing)
    env.update(extra)
    return env


def run_prog(
    exe: Path, *args: object, env: dict[str, str], prefix: list[str] | None = None, timeout: float = 60
) -> Run:
    proc = subprocess.run(
        [*(prefix or []), str(exe), *map(str, args)],
        capture_output=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    stdout = proc.stdout.decode()
    return Run(proc.returncode, parse_output(stdout), stdout, proc.stderr)


@dataclass(frozen=True)
class Rec:
    ring: int
    seq: int
    flags: int
    lost: int
    truncated: bool
    ts_ns: int
    data: bytes


def drain(cons: Consumer) -> list[Rec]:
    out = []
    while (b := cons.read(1024)) is not None:
        for r in b:
            out.append(Rec(b.ring, r.seq, r.flags, r.lost, r.truncated, r.ts_ns, bytes(r.data)))
        b.release()
    return out


class Ring:
    """A domain of the test's own with a consumer registered before the
    program runs (so that nothing it logs can be missed)."""

    def __init__(self, shm: Path, name: str = "syslog", **opts: int) -> None:
        self.shm, self.name = shm, name
        self.domain = Domain(name, shm, create=2, **{**DOMAIN_OPTS, **opts})
        self.consumer = Consumer(self.domain, "test")

    def records(self) -> list[Rec]:
        return drain(self.consumer)

    def payloads(self) -> list[bytes]:
        return [r.data for r in self.records()]

    def snapshot(self):
        return snapshot_domain(self.name, self.shm)

    def close(self) -> None:
        self.consumer.close()
        self.domain.close()


def pri(fac: int, sev: int) -> bytes:
    return b"<%d>" % (fac | sev)


def strerror(code: int) -> bytes:
    return os.strerror(code).encode()

