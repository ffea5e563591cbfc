"""Fixtures of the unit tests: the syslog(3) drop-in's program and ring
(shimprog.py has the helpers they are made of)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from shimprog import CC, PROG_SRC, SHIM, VARIANTS, Ring, compile_prog


@pytest.fixture(scope="session")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """variant -> path of the compiled syslog_prog (each named syslog_prog)."""
    if CC is None:
        pytest.skip("no C compiler (cc) to build tests/c/syslog_prog.c")
    if not SHIM.exists():
        pytest.skip(f"{SHIM} is missing: build it with `make lib`")
    root = tmp_path_factory.mktemp("syslog_prog")
    os.chmod(root, 0o755)  # the set-uid/non-root tests exec from here
    out = {}
    for name, (flags, _, _) in VARIANTS.items():
        d = root / name
        d.mkdir()
        os.chmod(d, 0o755)
        exe = d / "syslog_prog"
        proc = compile_prog(PROG_SRC, exe, flags)
        assert proc.returncode == 0, f"cc {' '.join(flags)} failed:\n{proc.stderr}"
        out[name] = exe
    return out


@pytest.fixture(params=sorted(VARIANTS))
def prog(request: pytest.FixtureRequest, progs: dict[str, Path]) -> Path:
    return progs[request.param]


@pytest.fixture
def ring(shm_dir: Path) -> Iterator[Ring]:
    r = Ring(shm_dir)
    yield r
    r.close()


