"""fipstop.elfdyn against real files: a library built here twice (plain, and
-Bsymbolic-functions, where its own calls bind at link time) is the oracle
for which calls a preload can take; Debian's named and libns when present."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fipstop import elfdyn

CC = shutil.which("cc") or shutil.which("gcc")
SRC = """
#include <stdio.h>
void inner(const char *s) { puts(s); }
void outer(void) { inner("x"); }
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if CC is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("elfdyn")
    (d / "l.c").write_text(SRC)
    out = {}
    for name, extra in (("plain", []), ("symbolic", ["-Wl,-Bsymbolic-functions"])):
        lib = d / f"lib{name}.so"
        subprocess.run([CC, "-O1", "-shared", "-fPIC", "-o", str(lib), str(d / "l.c"), *extra], check=True)
        out[name] = lib
    return out


def test_own_calls_through_the_plt_are_found(libs: dict[str, Path]) -> None:
    plain = elfdyn.slot_relocated(str(libs["plain"]))
    symbolic = elfdyn.slot_relocated(str(libs["symbolic"]))
    assert plain is not None and symbolic is not None
    assert "inner" in plain and "puts" in plain
    assert "inner" not in symbolic and "puts" in symbolic  # bound at link time: no preload can take it
    assert elfdyn.needed_libraries(str(libs["plain"])) == ["libc.so.6"]


def test_bad_files_give_none(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF\x02\x01" + b"\xff" * 200)
    assert elfdyn.slot_relocated(str(junk)) is None or elfdyn.slot_relocated(str(junk)) == frozenset()
    (tmp_path / "text").write_text("#!/bin/sh\n")
    for p in (tmp_path / "text", tmp_path / "missing"):
        assert elfdyn.slot_relocated(str(p)) is None
        assert elfdyn.needed_libraries(str(p)) is None
        assert elfdyn.find_needed(str(p), "libns") is None


@pytest.mark.skipif(not os.access("/usr/sbin/named", os.X_OK), reason="named not installed")
def test_debian_libns_calls_ns_client_log_through_its_plt() -> None:
    lib = elfdyn.find_needed("/usr/sbin/named", "libns")
    assert lib is not None and os.path.basename(lib).startswith("libns-9.")
    slots = elfdyn.slot_relocated(lib)
    assert slots is not None and {"ns_client_log", "ns_client_logv", "isc_log_write"} <= slots
