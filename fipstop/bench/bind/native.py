"""Where the named with fipstop's native FIPS query log is (issue 23).

scripts/build-named-native.sh builds BIND 9.18.49 with contrib/bind/fips-native.patch into build/named-native/
(scripts/setup.sh runs it, so the tests and ``fipstop bench bind`` find it on a set-up machine).  Why a rebuilt
named at all: stock named pays for the query line's string building inside libns before any logging call (see
fipstop/csrc/fips_bindq.h); the patch hands the fields over in binary instead, and only to libfips_bind.so
(``fipstop wrap --bind``): without the preload the patched named logs exactly as BIND does.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO / "scripts" / "build-named-native.sh"


def native_named() -> tuple[Path | None, str]:
    """(the patched named, "") when it is built from the current patch and header, else (None, why not)."""
    if not BUILD_SCRIPT.exists():
        return None, f"{BUILD_SCRIPT} is missing (not a source checkout)"
    r = subprocess.run(["bash", str(BUILD_SCRIPT), "--print-named"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not r.stdout.strip():
        return None, f"the patched named is not built (run {BUILD_SCRIPT.relative_to(REPO)} or scripts/setup.sh)"
    return Path(r.stdout.strip()), ""
