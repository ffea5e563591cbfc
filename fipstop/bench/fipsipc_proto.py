"""Building the FIPS paper's prototype (FIPS-IPC) for tests and ``fipstop bench ring``.

fipstop does not ship the prototype: its source (github.com/schrc3b6/FIPS-IPC,
MIT) is found at ``$FIPSIPC_SRC`` or :data:`DEFAULT_SRC`.  Only its ring
library is needed (``src/lib/fips_buf.c``, libconfig and pthreads: Debian's
libconfig-dev); a program is built with the upstream flags (``-O3
-march=native``, as ``src/programs/Makefile`` does) into ``build/fipsipc`` of
the source tree (a temp dir when installed), keyed by the contents of its
sources, and nothing of it is committed.  ``build_program`` returns the
binary, or None with a one-line reason (no source, no libconfig, a compiler
error), so callers skip instead of failing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fipstop.bench.cbuild import SOURCE_TREE

__all__ = ["DEFAULT_SRC", "PROGRAMS", "build_program", "prototype_src", "write_config"]

#: where this project's machines keep an unchanged copy (see its ORIGIN.md)
DEFAULT_SRC = "/work/shared/third_party/FIPS-IPC"
FLAGS = ("-O3", "-march=native", "-D_GNU_SOURCE")
LIBS = ("-lpthread", "-lconfig")

#: the prototype's own programs: name -> source under src/programs
PROGRAMS = {"producer": "test_fips_buf_producer.c", "consumer": "test_fips_buf_consumer.c"}


def prototype_src(env: dict[str, str] | None = None) -> tuple[Path | None, str]:
    """The prototype's source tree, or None and why not."""
    e = os.environ if env is None else env
    root = Path(e.get("FIPSIPC_SRC") or DEFAULT_SRC)
    if not (root / "src" / "lib" / "fips_buf.c").is_file():
        return None, (f"FIPS-IPC source not found at {root} (set FIPSIPC_SRC to a checkout of "
                      "github.com/schrc3b6/FIPS-IPC)")
    return root, ""


def _build_dirs() -> list[Path]:
    dirs = [SOURCE_TREE / "build" / "fipsipc"] if SOURCE_TREE is not None else []
    return [*dirs, Path(tempfile.gettempdir()) / f"fipstop-fipsipc-{os.getuid()}"]


def build_program(name: str, sources: tuple[Path, ...] = (), *, root: Path | None = None) -> tuple[Path | None, str]:
    """Build the prototype's program ``name`` (a key of :data:`PROGRAMS`), or
    one of ours from ``sources`` linked with its ring library."""
    if root is None:
        root, why = prototype_src()
        if root is None:
            return None, why
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        return None, f"C compiler {cc!r} not found"
    if not (Path("/usr/include/libconfig.h").is_file() or Path("/usr/local/include/libconfig.h").is_file()):
        return None, "libconfig.h not found: install libconfig-dev (scripts/setup.sh does)"
    main = tuple(sources) or (root / "src" / "programs" / PROGRAMS[name],)
    srcs = (*main, root / "src" / "lib" / "fips_buf.c")
    h = hashlib.sha256(" ".join((cc, *FLAGS)).encode())
    for s in (*srcs, root / "src" / "lib" / "include" / "fips_buf.h"):
        try:
            h.update(s.read_bytes())
        except OSError as e:
            return None, f"{s}: {e.strerror or e}"
    key = h.hexdigest()[:16]
    last = "no writable build directory"
    for d in _build_dirs():
        binary = d / f"{name}-{key}"
        if binary.is_file():
            return binary, ""
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            last = f"cannot create {d}: {e.strerror or e}"
            continue
        tmp = d / f".{name}-{key}.{os.getpid()}"
        cmd = [cc, *FLAGS, "-I", str(root / "src" / "lib" / "include"), *map(str, srcs), "-o", str(tmp), *LIBS]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            return None, f"{name}: build failed: {e}"
        if res.returncode != 0:
            errs = [ln for ln in res.stderr.splitlines() if "error" in ln] or res.stderr.splitlines() or ["?"]
            return None, f"{name}: build failed: {errs[0].strip()[:200]}"
        os.replace(tmp, binary)
        return binary, ""
    return None, last


def write_config(path: Path, shm_name: str, *, line_size: int, line_count_exp: int, segments: int,
                 readers: int = 2, reader_threads: int = 16, sqe: int = 64, overwrite: bool = False) -> Path:
    """A fips_buf.conf (libconfig syntax) for the prototype's programs (they read ``$FIPS_BUF_CONF``)."""
    path.write_text(
        f'shm_name = "{shm_name}";\nline_size = {line_size};\nflags = {1 if overwrite else 0};\n'
        f"line_count_exp = {line_count_exp};\nmax_reader_count = {readers};\n"
        f"max_reader_thread_count = {reader_threads};\nmax_segment_count = {segments};\nmax_sqe_count = {sqe};\n")
    return path
