"""A SIGBUS handler installed after libfips' (Python's faulthandler, as pytest and many services enable it) must
not hide a truncated domain: faulthandler re-raises with raise(), which carries no fault address, so without libfips
putting its handler back in front the reader died with 'Bus error' instead of getting ETRUNC."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROG = r"""
import faulthandler, os, sys
from fipstop import _fips
d = sys.argv[1]
dom = _fips.Domain("t", d, max_rings=4, ring_capacity=1 << 16)
_fips.Producer(dom).log(b"x")
m = _fips.Monitor("t", d)          # libfips installs its SIGBUS handler here (the first mapping)
faulthandler.enable()              # ... and faulthandler puts its own in front
os.truncate(os.path.join(d, "fips.t"), 4096)
try:
    m.snapshot()
except _fips.FipsError as e:
    print("ETRUNC" if e.code == _fips.ETRUNC else f"other {e.code}")
"""


def test_truncation_under_a_later_faulthandler_is_etrunc(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", PROG, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    assert r.stdout.strip() == "ETRUNC"
