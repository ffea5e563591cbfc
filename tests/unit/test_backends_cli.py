"""``fipstop snapshot --backends`` and the backends flags: JSON key, text section, bad config as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fipstop.probes.logfiles import LogFileProbe


def fipstop(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    shm = tmp_path / "shm"
    shm.mkdir(exist_ok=True)
    e = {**os.environ, "FIPS_SHM_DIR": str(shm)}
    e.pop("FIPSTOP_CONFIG", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "fipstop", *args], capture_output=True, text=True, env=e,
                          cwd=tmp_path, timeout=60)


def test_snapshot_backends_json_and_text(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("hello\n")
    p = fipstop(tmp_path, "snapshot", "--backends", "--json", "--backends-window", "0.1", "--watch-file", str(log),
                "--watch-socket", str(tmp_path / "nosock"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["domains"] == [] and set(doc["backends"]) >= {"files", "sockets", "net", "audit", "journald", "dt_s"}
    (f,) = [f for f in doc["backends"]["files"] if f["path"] == str(log)]
    assert f["ok"] and f["size_bytes"] == 6 and f["bytes_per_s"] == 0.0
    s = next(s for s in doc["backends"]["sockets"] if s["path"] == str(tmp_path / "nosock"))
    assert not s["ok"] and s["reason"] == "no such file"
    p = fipstop(tmp_path, "snapshot", "--backends", "--backends-window", "0", "--watch-file", str(log))
    assert p.returncode == 0 and "backends  (no rates: one sample)" in p.stdout and str(log) in p.stdout


def test_snapshot_without_backends_is_unchanged(tmp_path: Path) -> None:
    p = fipstop(tmp_path, "snapshot", "--json")
    assert p.returncode == 0 and json.loads(p.stdout) == {"domains": []}


def test_bad_config_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "fipstop.toml"
    bad.write_text("[backends]\nfiles = [1, 2]\n")
    p = fipstop(tmp_path, "snapshot", "--backends")  # ./fipstop.toml is found
    assert p.returncode == 2 and p.stderr.strip() == "fipstop: ./fipstop.toml: backends.files must be a list of " \
        "non-empty strings" and "Traceback" not in p.stderr
    p = fipstop(tmp_path, "snapshot", "--backends", "--config", str(tmp_path / "missing.toml"))
    assert p.returncode == 2 and "no such config file" in p.stderr
    p = fipstop(tmp_path, "snapshot", "--backends", "--backends-window", "nan")
    assert p.returncode == 2 and "--backends-window" in p.stderr


def test_reader_of_a_deleted_file(tmp_path: Path) -> None:
    """A reader still holding a deleted (rotated-away) file: measured on that file, marked as the old one."""
    log = tmp_path / "d.log"
    log.write_bytes(b"x" * 1000)
    fd = os.open(log, os.O_RDONLY)
    try:
        os.read(fd, 100)
        log.unlink()
        log.write_bytes(b"new\n")
        s = LogFileProbe(str(log)).sample()
        (r,) = [r for r in s.readers if r.pid == os.getpid()]
        assert not r.same_file and r.pos_bytes == 100 and r.lag_bytes == 900 and s.size_bytes == 4
    finally:
        os.close(fd)
