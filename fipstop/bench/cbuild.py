"""Compiling the benchmarks' C helpers, shared by every ``fipstop bench``.

The helpers' sources ship with the package (:func:`source`: the files of
``bench/*/`` through the symlinks ``fipstop/bench/csrc/*``, and libfips's
``fipstop/csrc/fips.c``), so the benchmarks run from an installed package as
from a checkout.  Each helper is built with fips.c compiled in (no installed
library needed) into ``build/bench/NAME-HASH`` of the source tree (a temp dir
when installed, or when the tree is read-only), keyed by the compiler, flags
and source contents so a rebuilt libfips is never measured with a stale
binary; older builds of the same helper are removed.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: the checkout fipstop runs from (None: an installed package)
SOURCE_TREE = PACKAGE_DIR.parent if (PACKAGE_DIR.parent / "pyproject.toml").is_file() else None
FIPS_SRC = PACKAGE_DIR / "csrc" / "fips.c"
FIPS_HDR = PACKAGE_DIR / "csrc" / "fips.h"
CFLAGS = ("-O2", "-std=c11", "-D_GNU_SOURCE", "-pthread")


def source(path: str) -> Path:
    """A helper's C source, e.g. ``source("ring/ringbench.c")`` (bench/ring/ringbench.c)."""
    return (Path(__file__).resolve().parent / "csrc" / path).resolve()


def _one_line(text: str, limit: int = 240) -> str:
    out = " | ".join(ln.strip() for ln in text.splitlines() if ln.strip())
    return out if len(out) <= limit else out[: limit - 3] + "..."


def cc_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.splitlines()[0] if out.stdout else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def build_c(name: str, sources: tuple[Path, ...], extra: tuple[str, ...] = (),
            cache_dir: Path | None = None,
            include_dir: Path | None = None,
            depends: tuple[Path, ...] = ()) -> tuple[Path | None, str | None, dict[str, Any]]:
    """Compile ``sources`` (cc CFLAGS + extra) into NAME-HASH, cached by content.
    ``include_dir``: where fips.h is (default: this libfips's); every header there
    is part of the key.  ``depends``: files the sources #include besides fips.h (part
    of the key too).  Returns (binary, None, info) or (None, one-line reason, info)."""
    cc = os.environ.get("CC", "cc")
    flags = (*CFLAGS, *extra)
    info: dict[str, Any] = {"cc": cc, "cflags": list(flags)}
    inc = include_dir or FIPS_HDR.parent
    headers = tuple(sorted(include_dir.glob("*.h"))) if include_dir else (FIPS_HDR,)
    for src in (*sources, inc / FIPS_HDR.name):
        if not src.is_file():
            rel = src.relative_to(PACKAGE_DIR.parent) if src.is_relative_to(PACKAGE_DIR.parent) else src
            return None, f"{rel} not found (fipstop was installed without the benchmarks' C sources)", info
    if shutil.which(cc) is None:
        return None, f"C compiler {cc!r} not found", info
    info["cc_version"] = cc_version(cc)
    h = hashlib.sha256()
    for part in (info["cc_version"], " ".join(flags)):
        h.update(part.encode())
    for src in (*sources, *headers, *depends):
        h.update(src.read_bytes())
    key = h.hexdigest()[:16]
    dirs = [cache_dir] if cache_dir else ([SOURCE_TREE / "build" / "bench"] if SOURCE_TREE is not None else [])
    dirs.append(Path(tempfile.gettempdir()) / f"fipstop-bench-{os.getuid()}")
    last = "no writable build directory"
    for d in dirs:
        binary = d / f"{name}-{key}"
        if binary.is_file() and os.access(binary, os.R_OK):
            info.update(binary=str(binary), cached=True)
            return binary, None, info
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            last = f"cannot create {d}: {exc}"
            continue
        tmp = d / f".{name}-{key}.{os.getpid()}"
        cmd = [cc, *flags, "-I", str(inc), *map(str, sources), "-o", str(tmp)]
        info["build_command"] = shlex.join(cmd)
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"{name} build failed: {exc}", info
        if res.returncode != 0:
            errs = [ln for ln in res.stderr.splitlines() if "error" in ln]
            return None, f"{name} build failed: " + _one_line(errs[0] if errs else res.stderr), info
        try:
            os.replace(tmp, binary)
        except OSError as exc:
            last = f"cannot write {binary}: {exc}"
            continue
        info.update(binary=str(binary), cached=False)
        for old in d.glob(f"{name}-*"):  # builds of older sources
            if old != binary:
                try:
                    old.unlink()
                except OSError:
                    pass
        return binary, None, info
    return None, last, info
