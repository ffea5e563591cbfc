"""``fipstop bench ban``: time-to-ban of Fail2Ban on a file vs ``fipstop ips`` on FIPS rings.

The same attack against two set-ups, one after the other, on loopback:

``fail2ban``  named (``named -f -c CONF -n 2``) logs its ``security`` and
              ``queries`` categories to files (``print-time yes``); a real
              ``fail2ban-server -f -x -c DIR`` (socket, pid, database and log
              in the temp dir, ``backend = polling``, Debian's
              ``named-refused`` filter, maxretry 5) reads the security log and
              bans with a dummy action that appends ``<time> <ip>`` to a file.
``fips``      named started by ``fipstop wrap`` logs both categories through
              syslog(3) into FIPS rings; ``fipstop ips`` (dry-run, its
              ``named-refused`` jail, maxretry 5) reads them and publishes ban
              events, which the bench drains as a registered consumer.

named's ``allow-query { 127.0.0.1; }`` refuses (and logs in ``security``)
every query from another source address.  The attack: 2^k attackers
127.16.0.0 + i (all of 127.0.0.0/8 is local) arrive in groups of 64, each
sending ``BURST`` refused queries interleaved with its group, the total rate ramping from
a tenth of ``--rate`` to ``--rate`` queries/s (``bench/ban/attack.c``: one
socket, the source address of each packet set with IP_PKTINFO; dnsperf has a
single source address per process).  Meanwhile dnsperf sends legitimate
queries from 127.0.0.1 (``dnsperf -s 127.0.0.1 -p PORT -d queries.txt -c 4
-T 1 -Q LEGIT``), which named answers and logs, so both IPSs read their
attack lines among ordinary query-log lines, and its queries/s is named's.

Measured per set-up: attackers banned (share), time from the first attack
packet until every attacker is banned, time-to-ban per attacker (first
offending log record -> ban: for Fail2Ban the first line of that address in
the log file, BIND's millisecond timestamp, to the dummy action's
timestamp; for fipstop ips the record's commit time to the ban event's ban
time), records dropped (ring drops; a file drops none), named's queries/s
under the attack, and the CPU time of the IPS.  Ratios are Fail2Ban / fips.
Targets (checked here, never in tests): every attacker banned by fips, and
the time until every attacker is banned >= 10x shorter than Fail2Ban's.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fipstop.bench.ban_report import render_table
from fipstop.bench.bind.dns import (
    ZONE,
    free_port,
    parse_dnsperf,
    render_named_conf,
    soa_answered,
    write_queries,
    write_zone,
)
from fipstop.bench.bind.hostload import proc_cpu_s
from fipstop.bench.cbuild import build_c, source
from fipstop.bench.results import Output, machine_info, publish
from fipstop.children import popen
from fipstop.demo import BanCollector
from fipstop.errors import FipsError, one_line
from fipstop.probes.fail2ban import line_time_ns
from fipstop.ring import snapshot_domain

SCHEMA = 1
ATTACK_SRC = source("ban/attack.c")
MAXRETRY = 5
# Twice maxretry: under load the kernel drops some queries before named sees
# them (counted: attack lines logged vs sent), and an attacker must still
# reach maxretry logged lines to be bannable.
BURST = 2 * MAXRETRY
QNAME = f"h1.{ZONE}"
ATTACK_NET = "127.16.0.0"
DEFAULT_LOG2, QUICK_LOG2 = 12, 8
DEFAULT_RATE, QUICK_RATE = 10000.0, 5000.0
LEGIT_QPS = 3000
DEFAULT_TIMEOUT_S = 300.0
SETTLE_S = 20.0
TARGET_SPEEDUP = 10.0
SIDES = ("fail2ban", "fips")


def _log(msg: str) -> None:
    print(f"bench ban: {msg}", file=sys.stderr, flush=True)


def _one_line(text: object, limit: int = 300) -> str:
    return one_line(text, limit)


def attacker_ip(i: int) -> str:
    return f"127.{16 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"


def is_attacker(ip: str) -> bool:
    p = ip.split(".")
    return len(p) == 4 and p[0] == "127" and p[1].isdigit() and 16 <= int(p[1]) < 32


def named_conf(side: str, d: Path, port: int, zone_file: Path) -> str:
    """Queries from anywhere but 127.0.0.1 are refused and logged (security category): to files for Fail2Ban,
    through syslog(3) - the fips shim under `fipstop wrap` - for fipstop ips."""
    if side == "fail2ban":
        channels = {"sec": f'file "{d}/security.log"; severity info; print-time yes;',
                    "q": f'file "{d}/queries.log"; severity info; print-time yes;'}
        cats = {"security": "sec", "queries": "q"}
    else:
        channels = {"sys": "syslog daemon; severity info;"}
        cats = {"security": "sys", "queries": "sys"}
    return render_named_conf(d, port, zone_file, querylog=True, channels=channels, categories=cats,
                             allow_query="127.0.0.1")


def fail2ban_config(cfg: Path, logpath: Path, marks: Path) -> None:
    """A private Fail2Ban configuration: Debian's filters, one jail, a dummy action with a timestamp."""
    cfg.mkdir(parents=True, exist_ok=True)
    shutil.copytree("/etc/fail2ban/filter.d", cfg / "filter.d", dirs_exist_ok=True)
    (cfg / "action.d").mkdir(exist_ok=True)
    (cfg / "fail2ban.conf").write_text(f"""[Definition]
loglevel = INFO
logtarget = {cfg}/fail2ban.log
socket = {cfg}/fail2ban.sock
pidfile = {cfg}/fail2ban.pid
dbfile = {cfg}/fail2ban.sqlite3
dbpurgeage = 1d
dbmaxmatches = 10
""")
    (cfg / "action.d" / "benchmark.conf").write_text("""[Definition]
actionstart =
actionstop =
actioncheck =
actionban = printf '%%s %%s\\n' "$(date +%%s.%%N)" '<ip>' >> <marks>
actionunban =

[Init]
marks = /dev/null
""")
    (cfg / "jail.conf").write_text(f"""[DEFAULT]
backend = polling
usedns = no
ignoreself = false
ignoreip =
maxretry = {MAXRETRY}
findtime = 600
bantime = 3600

[named-refused]
enabled = true
filter = named-refused
logpath = {logpath}
action = benchmark[marks="{marks}"]
""")


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), -(-int(q * len(sorted_values) * 1000) // 1000)))
    return sorted_values[rank - 1]


def first_lines(log: Path) -> dict[str, int]:
    """ip -> timestamp (ns) of its first refused-query line in a BIND log file."""
    out: dict[str, int] = {}
    try:
        f = open(log, encoding="utf-8", errors="replace")
    except OSError:
        return out
    with f:
        for line in f:
            i = line.find(" client @")
            if i < 0 or not line.rstrip().endswith("denied"):
                continue
            rest = line[i + 9:].split(" ", 2)
            if len(rest) < 2:
                continue
            ip = rest[1].rsplit("#", 1)[0]
            if ip not in out:
                t = line_time_ns(line)
                if t is not None:
                    out[ip] = t
    return out


def count_denied(log: Path) -> int:
    try:
        with open(log, "rb") as f:
            return sum(1 for line in f if line.rstrip().endswith(b"denied"))
    except OSError:
        return 0


@dataclass(frozen=True)
class BanConfig:
    """``fipstop bench ban``'s options (None: the default, or the --quick one)."""

    output: Output = Output()
    quick: bool = False
    attackers_log2: int | None = None
    rate: float | None = None
    timeout: float | None = None
    keep: bool = False


class Bench:
    def __init__(self, config: BanConfig) -> None:
        self.config = config
        self.quick = config.quick
        k = config.attackers_log2
        self.log2 = int(k if k is not None else (QUICK_LOG2 if self.quick else DEFAULT_LOG2))
        if not 0 <= self.log2 <= 16:
            raise FipsError(f"--attackers-log2 {self.log2}: give 0..16")
        self.attackers = 1 << self.log2
        self.rate = float(config.rate or (QUICK_RATE if self.quick else DEFAULT_RATE))
        self.timeout = float(config.timeout or DEFAULT_TIMEOUT_S)
        self.tmp = Path(tempfile.mkdtemp(prefix="fipstop-bench-ban-"))
        self.shm = self.tmp / "shm"
        self.shm.mkdir()
        self.procs: list[subprocess.Popen] = []
        self.attack_bin: Path | None = None

    # -- tools ---------------------------------------------------------------------------

    def missing(self) -> str | None:
        for prog in ("named", "dnsperf", "fail2ban-server", "fail2ban-client"):
            if shutil.which(prog) is None and not Path(f"/usr/sbin/{prog}").exists():
                return f"{prog} not found (Debian: bind9, dnsperf, fail2ban)"
        return None

    @staticmethod
    def _which(prog: str) -> str:
        return shutil.which(prog) or f"/usr/sbin/{prog}"

    def _spawn(self, argv: list[str], log: Path, **kw) -> subprocess.Popen:
        with open(log, "wb") as out:
            p = popen(argv, stdin=subprocess.DEVNULL, stdout=kw.pop("stdout", out), stderr=out, **kw)
        self.procs.append(p)
        return p

    @staticmethod
    def _stop(p: subprocess.Popen | None, timeout: float = 15.0) -> None:
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)

    def _wait_named(self, p: subprocess.Popen, port: int, d: Path) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise RuntimeError(f"named exited {p.returncode}: {self._tail(d / 'named.out')}")
            if soa_answered(port):
                return
            time.sleep(0.1)
        raise RuntimeError(f"named did not answer on 127.0.0.1#{port}: {self._tail(d / 'named.out')}")

    @staticmethod
    def _tail(path: Path, n: int = 3) -> str:
        try:
            return _one_line(" | ".join(path.read_text(errors="replace").splitlines()[-n:]))
        except OSError:
            return "(no output)"

    # -- one side --------------------------------------------------------------------------

    def run_side(self, side: str) -> dict[str, Any]:
        d = self.tmp / side
        d.mkdir()
        zone = d / "zone.db"
        write_zone(zone)
        queries = d / "queries.txt"
        write_queries(queries)
        port = free_port()
        conf = d / "named.conf"
        conf.write_text(named_conf(side, d, port, zone))
        named_argv = [self._which("named"), "-f", "-c", str(conf), "-n", "2"]
        res: dict[str, Any] = {"side": side, "port": port}
        collector = None
        bans_dom = None
        domain = f"benchban{os.getpid()}"
        ips_proc = f2b_proc = None
        try:
            if side == "fail2ban":
                named = self._spawn(named_argv, d / "named.out", cwd=d)
                self._wait_named(named, port, d)
                cfg = d / "f2b"
                marks = d / "bans.txt"
                marks.touch()
                fail2ban_config(cfg, d / "security.log", marks)
                f2b_proc = self._spawn([self._which("fail2ban-server"), "-f", "-x", "-c", str(cfg),
                                        "-s", str(cfg / "fail2ban.sock"), "-p", str(cfg / "fail2ban.pid")],
                                       d / "fail2ban.out")
                self._wait_fail2ban(f2b_proc, cfg)
                consumer_pid = f2b_proc.pid
            else:
                from fipstop import _fips

                env = dict(os.environ, FIPS_SHM_DIR=str(self.shm))
                bans_dom = _fips.Domain(f"{domain}-bans", str(self.shm), create=2, ring_capacity=16 << 20,
                                        max_record=1024, max_rings=16)
                collector = BanCollector(f"{domain}-bans", str(self.shm))
                collector.start(bans_dom)
                named = self._spawn([sys.executable, "-m", "fipstop", "--shm-dir", str(self.shm), "wrap",
                                     "--domain", domain, "--ring-size", "4M", "--", *named_argv],
                                    d / "named.out", cwd=d, env=env)
                self._wait_named(named, port, d)
                stats = d / "ips-stats.json"
                ips_proc = self._spawn([sys.executable, "-m", "fipstop", "--shm-dir", str(self.shm), "ips",
                                        "--domain", domain, "--consumer", "ips-bench", "--jail", "named-refused",
                                        "--maxretry", str(MAXRETRY), "--findtime", "600", "--bantime", "3600",
                                        "--ignoreself", "no",  # the attackers are simulated on loopback
                                        "--bans-domain", f"{domain}-bans", "--stats-json", str(stats), "-q"],
                                       d / "ips.out", env=env)
                deadline = time.monotonic() + 20
                while not stats.exists() and time.monotonic() < deadline:
                    if ips_proc.poll() is not None:
                        raise RuntimeError(f"fipstop ips exited {ips_proc.returncode}: {self._tail(d / 'ips.out')}")
                    time.sleep(0.1)
                consumer_pid = ips_proc.pid
            cpu0 = proc_cpu_s(consumer_pid) or 0.0
            named_cpu0 = proc_cpu_s(named.pid) or 0.0
            r0, r1 = self.rate / 10, self.rate
            expected_s = self.attackers * BURST * math.log(r1 / r0) / (r1 - r0)  # the ramp in attack.c
            load_s = int(max(5, expected_s + 4))
            dnsperf = self._spawn([self._which("dnsperf"), "-s", "127.0.0.1", "-p", str(port), "-d", str(queries),
                                   "-l", str(load_s), "-c", "4", "-T", "1", "-Q", str(LEGIT_QPS)],
                                  d / "dnsperf.err", stdout=subprocess.PIPE)
            time.sleep(1.0)
            assert self.attack_bin is not None
            t_attack = time.monotonic()
            atk = subprocess.run([str(self.attack_bin), str(port), str(self.attackers), str(BURST),
                                  str(self.rate / 10), str(self.rate), QNAME],
                                 capture_output=True, text=True, timeout=self.timeout + 60)
            try:
                res["attack"] = json.loads(atk.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise RuntimeError(f"attack failed: {_one_line(atk.stderr or atk.stdout)}") from None
            _log(f"{side}: attack sent {res['attack']['sent']} queries in {res['attack']['seconds']:.2f} s")
            # wait until every attacker is banned, the timeout, or no new ban for SETTLE_S
            # (attackers none of whose queries reached the log often enough cannot be banned)
            deadline = t_attack + self.timeout
            banned, last_change = 0, time.monotonic()
            while time.monotonic() < deadline:
                n = len(self._bans(side, d, collector))
                if n != banned:
                    banned, last_change = n, time.monotonic()
                if banned >= self.attackers or time.monotonic() - last_change > SETTLE_S:
                    break
                time.sleep(0.1)
            res["waited_s"] = round(time.monotonic() - t_attack, 2)
            try:
                out, _ = dnsperf.communicate(timeout=load_s + 30)
            except subprocess.TimeoutExpired:
                dnsperf.kill()
                out, _ = dnsperf.communicate()
            perf = parse_dnsperf(out.decode(errors="replace") if out else "")
            res["named_qps"] = perf.get("qps") if perf else None
            res["dnsperf"] = perf
            res["consumer_cpu_s"] = round((proc_cpu_s(consumer_pid) or 0.0) - cpu0, 3)
            res["named_cpu_s"] = round((proc_cpu_s(named.pid) or 0.0) - named_cpu0, 3)
            bans = self._bans(side, d, collector)
            if side == "fail2ban":
                firsts = first_lines(d / "security.log")
                pairs = {ip: (firsts.get(ip), t) for ip, t in bans.items()}
                res["attack_lines_logged"] = count_denied(d / "security.log")
                res["records_dropped"] = 0
                res["fail2ban_status"] = self._f2b_status(d / "f2b")
            else:
                assert collector is not None
                with collector._lock:
                    fb = dict(collector.first_ban)
                pairs = {ip: (v[0], v[2]) for ip, v in fb.items() if is_attacker(ip)}
                snap = snapshot_domain(domain, str(self.shm))
                res["records_committed"] = int(snap.rings["records_committed"].sum())
                res["records_dropped"] = int(snap.rings["records_dropped"].sum())
                try:
                    st = json.loads((d / "ips-stats.json").read_text())
                except (OSError, ValueError):
                    st = {}
                res["ips_stats"] = {k: st.get(k) for k in ("records", "matched", "lost", "bans", "bans_failed",
                                                           "events_dropped", "time_to_ban_ms", "reaction_ms")}
                res["attack_lines_logged"] = st.get("matched")
            res.update(self._figures(pairs, res["attack"]["first_ns"], res["attack"]["last_ns"]))
            logged = res.get("attack_lines_logged")
            res["attack_lines_logged_share"] = round(logged / res["attack"]["sent"], 4) if isinstance(
                logged, int) and res["attack"].get("sent") else None
            return res
        finally:
            for p in (ips_proc, f2b_proc):
                self._stop(p)
            for p in list(self.procs):
                self._stop(p)
            self.procs.clear()
            if collector is not None:
                collector.stop()
            if bans_dom is not None:
                bans_dom.close()
            if side == "fips":
                from fipstop import _fips

                for name in (domain, f"{domain}-bans"):
                    try:
                        _fips.Domain.unlink(name, str(self.shm))
                    except Exception:
                        pass

    def _bans(self, side: str, d: Path, collector) -> dict[str, int]:
        """attacker ip -> ban time (ns) of its first ban."""
        if side == "fail2ban":
            out: dict[str, int] = {}
            try:
                text = (d / "bans.txt").read_text()
            except OSError:
                return out
            for line in text.splitlines():
                parts = line.split()
                if len(parts) == 2 and is_attacker(parts[1]):
                    try:
                        out.setdefault(parts[1], int(round(float(parts[0]) * 1e9)))
                    except ValueError:
                        pass
            return out
        with collector._lock:
            return {ip: v[2] for ip, v in collector.first_ban.items() if is_attacker(ip)}

    def _f2b_client(self, cfg: Path, *args: str) -> str:
        r = subprocess.run([self._which("fail2ban-client"), "-s", str(cfg / "fail2ban.sock"), *args],
                           capture_output=True, text=True, timeout=10)
        return r.stdout if r.returncode == 0 else ""

    def _wait_fail2ban(self, p: subprocess.Popen, cfg: Path) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise RuntimeError(f"fail2ban-server exited {p.returncode}: {self._tail(cfg / 'fail2ban.log')}")
            if "named-refused" in self._f2b_client(cfg, "status"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"fail2ban-server not ready: {self._tail(cfg / 'fail2ban.log')}")

    def _f2b_status(self, cfg: Path) -> dict[str, int]:
        text = self._f2b_client(cfg, "status", "named-refused")
        out = {}
        for key, pat in (("total_failed", "Total failed:"), ("total_banned", "Total banned:"),
                         ("currently_banned", "Currently banned:")):
            for line in text.splitlines():
                if pat in line:
                    try:
                        out[key] = int(line.split(pat)[1].split()[0])
                    except (IndexError, ValueError):
                        pass
        return out

    def _figures(self, pairs: dict[str, tuple[int | None, int]], attack_first_ns: int,
                 attack_last_ns: int) -> dict[str, Any]:
        ttb = sorted((b - f) / 1e6 for f, b in pairs.values() if f is not None)
        banned = len(pairs)
        last_ban = max((b for _f, b in pairs.values()), default=None)
        all_banned_s = (last_ban - attack_first_ns) / 1e9 if banned >= self.attackers and last_ban is not None else None
        return {
            "attackers": self.attackers,
            "attackers_banned": banned,
            "banned_share": banned / self.attackers,
            "time_all_banned_s": None if all_banned_s is None else round(all_banned_s, 3),
            "last_ban_after_s": None if last_ban is None else round((last_ban - attack_first_ns) / 1e9, 3),
            "attack_s": round((attack_last_ns - attack_first_ns) / 1e9, 3),
            # how long after the last attack packet the last attacker was banned
            "all_banned_after_attack_end_s": None if all_banned_s is None or last_ban is None else
            round(max(0, last_ban - attack_last_ns) / 1e9, 3),
            "ttb_ms": {"n": len(ttb), "p50": _r(percentile(ttb, 0.5)), "p90": _r(percentile(ttb, 0.9)),
                       "p99": _r(percentile(ttb, 0.99)), "max": _r(ttb[-1] if ttb else None)},
        }

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        why = self.missing()
        if why:
            raise FipsError(f"bench ban: {why}")
        binary, err, info = build_c("ban-attack", (ATTACK_SRC,))
        if binary is None:
            raise FipsError(f"bench ban: {err}")
        self.attack_bin = binary
        results = {}
        for side in SIDES:
            _log(f"{side}: {self.attackers} attackers x {BURST} queries, ramp to {self.rate:g} q/s")
            try:
                results[side] = self.run_side(side)
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                results[side] = {"side": side, "error": _one_line(e)}
                _log(f"{side}: {_one_line(e)}")
        return self.document(results)

    def params(self) -> dict[str, Any]:
        return {"attackers": self.attackers, "attackers_log2": self.log2, "burst": BURST, "maxretry": MAXRETRY,
                "rate_start_qps": self.rate / 10, "rate_end_qps": self.rate, "legit_qps_cap": LEGIT_QPS,
                "attack_net": ATTACK_NET, "qname": QNAME, "timeout_s": self.timeout, "quick": self.quick,
                "named": "named -f -c CONF -n 2 (allow-query 127.0.0.1; security + queries logged)",
                "dnsperf": f"dnsperf -s 127.0.0.1 -p PORT -d queries.txt -l S -c 4 -T 1 -Q {LEGIT_QPS}",
                "fail2ban": "fail2ban-server -f -x -c DIR (backend polling, filter named-refused, "
                            "action: printf time ip >> file)",
                "fips": "fipstop wrap --domain D --ring-size 4M -- named ...; fipstop ips --jail named-refused "
                        "(dry-run)"}

    def document(self, results: dict[str, Any]) -> dict[str, Any]:
        f, p = results.get("fail2ban", {}), results.get("fips", {})

        def ratio(a, b):
            return round(a / b, 2) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None

        ratios = {
            "time_all_banned": ratio(f.get("time_all_banned_s") or f.get("last_ban_after_s"),
                                     p.get("time_all_banned_s")),
            "ttb_p50": ratio((f.get("ttb_ms") or {}).get("p50"), (p.get("ttb_ms") or {}).get("p50")),
            "ttb_p99": ratio((f.get("ttb_ms") or {}).get("p99"), (p.get("ttb_ms") or {}).get("p99")),
            "named_qps": ratio(p.get("named_qps"), f.get("named_qps")),
        }
        all_fips = p.get("attackers_banned") == p.get("attackers") and "error" not in p
        speed = ratios["time_all_banned"]
        targets = [
            {"name": "fips bans every attacker", "target": "100 %", "measured": p.get("banned_share"),
             "ok": bool(all_fips)},
            {"name": "time until every attacker is banned, Fail2Ban / fips", "target": f">= {TARGET_SPEEDUP:g}x",
             "measured": speed, "ok": None if speed is None else speed >= TARGET_SPEEDUP,
             "note": "" if f.get("time_all_banned_s") is not None else
             "Fail2Ban did not ban every attacker before the timeout: its last ban time is used (a lower bound)"},
        ]
        return {"schema": SCHEMA, "kind": "ban", "command": self.config.output.command,
                "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "machine": machine_info(), "params": self.params(), "results": results, "ratios": ratios,
                "targets": targets}

    def cleanup(self) -> None:
        for p in self.procs:
            self._stop(p)
        if self.config.keep:
            _log(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def main(config: BanConfig) -> int:
    """Run ``fipstop bench ban``, publish the result."""
    bench = Bench(config)
    try:
        doc = bench.run()
    finally:
        bench.cleanup()
    publish("ban", doc, config.output, _dt.datetime.now(_dt.UTC), render_table, _log)
    return 0
