"""The compiler and linker flags of the libfips that ships with this package.

An installed package has ``include/`` (the build copies fips.h there) and
``lib/libfips.so``; a source tree also has ``csrc/``, which is the same
header.  ``python -m fipstop.ring --cflags --libs`` prints them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PACKAGE_DIR", "cflags", "libs"]

PACKAGE_DIR = Path(__file__).resolve().parent


def cflags() -> str:
    inc = PACKAGE_DIR / "include"
    if not (inc / "fips.h").exists():
        inc = PACKAGE_DIR / "csrc"
    return f"-I{inc}"


def libs() -> str:
    lib = PACKAGE_DIR / "lib"
    if not (lib / "libfips.so").exists():
        raise FileNotFoundError(f"{lib / 'libfips.so'} is missing: run `make lib` first")
    return f"-L{lib} -Wl,-rpath,{lib} -lfips -lpthread"
