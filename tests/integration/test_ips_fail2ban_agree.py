"""fipstop ips matches what Fail2Ban matches: the same lines through the real
``fail2ban-regex`` (as a syslog file: "DATE HOST named[PID]: MSG") and through
``fipstop._ipsfast`` (as libfips_syslog.so stores them: "<PRI>named[PID]: MSG"),
with the filter loaded from the installed Fail2Ban, must give the same address
for every line, or no address for both."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from fipstop.ips.filters import NAMED_REFUSED, load_filter
from fipstop.ips.jails import JailSpec, compile_jail

pytestmark = [pytest.mark.integration]

F2B_DIR = Path("/etc/fail2ban/filter.d")
REGEX = shutil.which("fail2ban-regex")

MESSAGES = [
    "client @0x7f00aa 1.2.3.4#5353 (example.com): query (cache) 'example.com/A/IN' denied",
    "client @0x7f00aa 2001:db8::5#5353 (example.com): query 'example.com/A/IN' denied",
    "client @0x7f00aa ::ffff:10.1.1.1#5353 (example.com): query 'example.com/A/IN' denied",
    "client @0x7f00aa 1.2.3.5#5353 (example.com): query: example.com IN A +E(0) (127.0.0.1)",
    "client @0x7f00aa evil.example#5353 (example.com): query (cache) 'example.com/A/IN' denied",
    "client @0x7f00aa 1.2.3.6#5353 (example.com): view external: query (cache) 'example.com/A/IN' denied",
    "client @0x7f00aa 1.2.3.7#5353 (example.com): view internal: query 'example.com/ANY/IN' denied",
    "client @0x7f00aa 1.2.3.8#5353 (example.com): zone transfer 'example.com/AXFR/IN' denied",
    "client @0x7f00aa 1.2.3.9#5353: bad zone transfer request: 'example.com/IN': non-authoritative zone (NOTAUTH)",
    "security: client @0x7f00aa 1.2.3.10#5353 (example.com): query (cache) 'example.com/A/IN' denied",
    "info: client @0x7f00aa 1.2.3.11#5353 (example.com): query (cache) 'example.com/A/IN' denied",
    "client 1.2.3.12#5353: query (cache) 'example.com/A/IN' denied",
    "client @0x7f00aa 1.2.3.13#5353 (example.com): update 'example.com/IN' denied",
    "client @0x7f00aa 1.2.3.14#5353 (example.com): query (cache) 'example.com/A/IN' denied trailing",
    "zone example.com/IN: loaded serial 1",
    "client @0x7f00aa 2001:db8:0:0:0:0:0:9#5353 (x): query 'x/A/IN' denied",
]


@pytest.mark.skipif(REGEX is None or not (F2B_DIR / "named-refused.conf").exists(),
                    reason="fail2ban (fail2ban-regex, filter.d/named-refused.conf) is not installed")
def test_named_refused_agrees_with_fail2ban(tmp_path: Path) -> None:
    log = tmp_path / "named.log"
    # the second of each line's time stamp is its index: fail2ban-regex reports rows by time
    log.write_text("".join(f"Nov 30 12:00:{i:02d} localhost named[77]: {m}\n" for i, m in enumerate(MESSAGES)))
    r = subprocess.run([REGEX, "-o", "row", str(log), str(F2B_DIR / "named-refused.conf")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    theirs: dict[int, str] = {}
    for line in r.stdout.splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("["):
            ip, ts, _groups = ast.literal_eval(line.replace("\t", " "))
            theirs[int(ts) % 60] = ip
    assert theirs, r.stdout  # fail2ban matched something: the comparison is not vacuous

    for jail in (compile_jail(JailSpec("f2b", load_filter("named-refused", F2B_DIR))),
                 compile_jail(JailSpec("builtin", NAMED_REFUSED))):
        ours = {}
        for i, m in enumerate(MESSAGES):
            res, ip = jail.match(f"<30>named[77]: {m}".encode())
            if res == "hit":
                ours[i] = ip
        # Fail2Ban keeps the address as written; ours is canonical (IPv4-mapped -> IPv4)
        canon = {i: (ip.removeprefix("::ffff:") if ip.startswith("::ffff:") and "." in ip else ip)
                 for i, ip in theirs.items()}
        import ipaddress

        canon = {i: str(ipaddress.ip_address(ip)) for i, ip in canon.items()}
        assert ours == canon, (jail.name, ours, canon)
