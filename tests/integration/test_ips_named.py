"""The whole pipeline with real components: BIND 9 under ``fipstop wrap``
(syslog(3) -> preload shim -> rings) refuses queries for a zone
(``allow-query { none; }``); ``fipstop ips`` with Fail2Ban's named-refused
filter, loaded from the installed Fail2Ban (/etc/fail2ban/filter.d), bans the
loopback source addresses that crossed maxretry and not the ignored one.

A second test feeds a message longer than the domain's max_record through the
same shim (Python's ``syslog`` module calls syslog(3)): the record arrives
truncated and flagged, and the IPS counts it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fipstop.bench.bind.dns import free_port
from fipstop.ips.stats import read_stats

pytestmark = [pytest.mark.integration, pytest.mark.root]

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "fipstop" / "lib" / "libfips_syslog.so"
F2B_FILTER = Path("/etc/fail2ban/filter.d/named-refused.conf")
ZONE = "refused.test"


def _find(prog: str) -> str | None:
    return shutil.which(prog) or next(
        (p for d in ("/usr/sbin", "/sbin", "/usr/bin") if os.access(p := f"{d}/{prog}", os.X_OK)), None)


NAMED = _find("named")
DIG = _find("dig")


def fipstop(*args: str) -> list[str]:
    return [sys.executable, "-m", "fipstop", *args]


def write_conf(d: Path, port: int) -> Path:
    zone = d / "zone"
    zone.write_text(f"$TTL 300\n@ IN SOA ns.{ZONE}. a.{ZONE}. 1 3600 600 86400 300\n@ IN NS ns.{ZONE}.\n"
                    "ns IN A 127.0.0.1\nwww IN A 192.0.2.1\n")
    conf = d / "named.conf"
    conf.write_text(f"""options {{
    directory "{d}"; pid-file "{d}/named.pid"; session-keyfile "{d}/session.key";
    listen-on port {port} {{ 127.0.0.1; }}; listen-on-v6 {{ none; }};
    recursion no; dnssec-validation no; querylog yes;
}};
controls {{ }};
logging {{
    channel fips {{ syslog daemon; severity info; }};
    category security {{ fips; }}; category queries {{ fips; }}; category default {{ fips; }};
}};
zone "{ZONE}" {{ type primary; file "{zone}"; allow-query {{ none; }}; }};
zone "ok.test" {{ type primary; file "{zone}"; }};
""")
    return conf


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def stats_ok(path: Path, cond) -> bool:
    try:
        return cond(read_stats(path))
    except (OSError, ValueError):
        return False


def test_real_named_refused_queries_get_banned(tmp_path: Path) -> None:
    if NAMED is None or DIG is None:
        pytest.skip("named and dig are needed (apt-get install bind9 bind9-dnsutils)")
    if not SHIM.exists():
        pytest.skip("fipstop/lib/libfips_syslog.so is not built (make lib)")
    if not F2B_FILTER.exists():
        pytest.skip("fail2ban's named-refused filter is not installed")
    d = tmp_path / "named"
    d.mkdir()
    d.chmod(0o755)
    shm = tmp_path / "shm"
    shm.mkdir()
    port = free_port()
    conf = write_conf(d, port)
    stats = tmp_path / "ips.json"
    named = subprocess.Popen(fipstop("--shm-dir", str(shm), "wrap", "--domain", "dns", "--", NAMED, "-f", "-c",
                                     str(conf), "-n", "2"), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, cwd=d)
    ips = None
    try:
        def up() -> bool:
            assert named.poll() is None, "named exited"
            r = subprocess.run([DIG, "@127.0.0.1", "-p", str(port), "ok.test", "SOA", "+short", "+tries=1",
                                "+time=1"], capture_output=True, text=True)
            return "a.refused.test." in r.stdout

        assert wait(up, 30), "named did not answer"
        ips = subprocess.Popen(fipstop("--shm-dir", str(shm), "ips", "--domain", "dns", "--consumer", "ips",
                                       "--filter", "named-refused", "--maxretry", "3", "--ignoreip", "127.0.0.1",
                                       "--ignoreself", "no",  # the clients are simulated on loopback
                                       "--stats-json", str(stats)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert wait(lambda: stats.exists(), 15)
        for src, n in (("127.0.0.2", 4), ("127.0.0.3", 3), ("127.0.0.4", 2), ("127.0.0.1", 5)):
            for _ in range(n):
                r = subprocess.run([DIG, "@127.0.0.1", "-p", str(port), "-b", src, f"www.{ZONE}", "A", "+tries=1",
                                    "+time=1"], capture_output=True, text=True)
                assert "REFUSED" in r.stdout, r.stdout + r.stderr
        assert wait(lambda: stats_ok(stats, lambda s: s.bans >= 2 and s.matched >= 14), 15), stats.read_text()
        time.sleep(1.2)  # one more stats write: nothing else arrives
    finally:
        if ips is not None:
            stop(ips)
        stop(named)
    s = read_stats(stats)
    assert s.jails.keys() == {"named-refused"}
    assert s.bans == 2 and s.matched == 14 and s.active_bans == 2, s
    err = ips.stderr.read() if ips is not None else ""
    assert "ban 127.0.0.2 jail=named-refused hits=3" in err and "ban 127.0.0.3 " in err
    assert "127.0.0.4" not in err and "ban 127.0.0.1 " not in err


def test_truncated_record_through_the_shim(tmp_path: Path, shm_dir: Path) -> None:
    if not SHIM.exists():
        pytest.skip("fipstop/lib/libfips_syslog.so is not built (make lib)")
    from fipstop import _fips

    stats = tmp_path / "ips.json"
    _fips.Domain("sys", shm_dir, ring_capacity=1 << 16, max_record=256).close()
    ips = subprocess.Popen(fipstop("--shm-dir", str(shm_dir), "ips", "--domain", "sys", "--consumer", "ips",
                                   "--maxretry", "1", "--stats-json", str(stats), "-q"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait(lambda: stats.exists(), 15)
        line = "client @0x7f00 10.7.7.7#53 (a.test): query (cache) 'a.test/A/IN' denied"
        code = ("import syslog; syslog.openlog('named', syslog.LOG_PID);"
                f"syslog.syslog({line!r});"
                f"syslog.syslog({line!r}.replace('10.7.7.7', '10.8.8.8').replace('(a.test)', '(' + 'x' * 400 + ')'))")
        env = dict(os.environ, LD_PRELOAD=str(SHIM), FIPS_DOMAIN="sys", FIPS_SHM_DIR=str(shm_dir),
                   FIPS_SYSLOG_MISSING="drop")
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30)
        assert wait(lambda: stats_ok(stats, lambda s: s.records == 2 and s.truncated == 1), 10)
    finally:
        stop(ips)
    from fipstop.ips.jails import BUILTIN_JAILS, compile_jail

    whole = ("<30>named[1]: " + line.replace("10.7.7.7", "10.8.8.8").replace("(a.test)", "(" + "x" * 400 + ")"))
    assert compile_jail(BUILTIN_JAILS["named-refused"]).match(whole.encode()) == ("hit", "10.8.8.8")
    s = read_stats(stats)
    # the whole line was banned; the truncated one (a 400-byte name: it would match whole) lost its
    # "denied" to truncation and cannot match
    assert (s.bans, s.truncated, s.matched, s.nomatch) == (1, 1, 1, 1)
