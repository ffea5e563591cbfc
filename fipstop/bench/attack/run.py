"""``fipstop bench attack``: the attack end to end, as the FIPS paper measured it.

named (``named -f -c CONF -n 2``) runs in a network namespace of the bench's
own (:mod:`fipstop.bench.attack.netns`); 2^k attackers (2^10..2^16) flood it
with spoofed-source queries through the namespace's veth (``flood.c``), all
of them active for the whole attack, every one refused (``allow-query``
admits only the valid clients) and logged; the valid clients (``valid.c``)
query names of the zone from addresses never banned and measure their
response rate every 100 ms.  An nftables set in the server's input path
drops what an IPS banned, so a ban gives named back to the valid clients.

Pipelines, each from a cold start (a fresh named, an empty ruleset, a fresh
IPS), one after the other in one run:

``fips``      named under ``fipstop wrap`` logs its queries and security
              categories through syslog(3) into FIPS rings; ``fipstop ips``
              (jail named-refused, ``--action nft``) bans into
              ``inet fipstop banned``;
``fail2ban``  named logs both categories to one file (``print-time yes``);
              a real ``fail2ban-server`` (filter named-refused, Debian's
              nftables action with drop) reads it;
``crowdsec``  the same file read by a real crowdsec (the offline hub's
              mstilkerich/bind9 collection), its decisions turned into nft
              elements (:mod:`fipstop.bench.attack.crowdsec`);
``none``      the same file, no IPS: the floor.

Every pipeline runs for each attack length (``--lengths``): a recovery the
IPS caused happens at the same time however long the attack lasts; one the
attack's end caused does not (it is then reported as "not reached").

Figures per pipeline and length: the response-rate series, the time to 99 %
and 99.5 % and the mean valid response before it
(:mod:`fipstop.bench.attack.series`), attackers banned (by the IPS's own
account and as elements of the nft set at the end), time-to-ban p50/p99/max
(first logged refused query -> the ban in force) and the reaction time
(maxretry-th logged query -> ban), records dropped in the logging path (ring
drops; a file drops none, but named's socket may drop queries before they
are logged: attack lines logged / sent), and the IPS's CPU time (children
included: both IPSs fork nft).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fipstop.bench.attack import fail2ban as f2b
from fipstop.bench.attack import series
from fipstop.bench.attack.logscan import denied_times
from fipstop.bench.attack.netns import SERVER_IP, VALID_NET, Topology, attacker_ip, is_attacker, valid_ips
from fipstop.bench.bind.dns import N_NAMES, ZONE, render_named_conf, write_zone
from fipstop.bench.cbuild import build_c, source
from fipstop.bench.results import Output, machine_info, publish
from fipstop.children import popen
from fipstop.errors import FipsError, one_line

SCHEMA = 1
PIPELINES = ("fips", "fail2ban", "crowdsec", "none")
LABELS = {"fips": "FIPS -> fipstop ips", "fail2ban": "file -> Fail2Ban", "crowdsec": "file -> CrowdSec",
          "none": "no IPS"}
FLOOD_SRC = source("attack/flood.c")
VALID_SRC = source("attack/valid.c")
MAXRETRY = 5
QNAME = f"h1.{ZONE}"
PORT = 53
DEFAULT_LOG2, QUICK_LOG2 = 16, 10
DEFAULT_RATE, QUICK_RATE = 100_000.0, 20_000.0
DEFAULT_LENGTHS, QUICK_LENGTHS = (30.0, 60.0), (4.0,)
VALID_QPS, VALID_SOURCES = 2000.0, 4
BIN_MS, VALID_TIMEOUT_MS = 100, 1000
PRE_S, POST_S = 2.0, 2.0
TARGET_SPEEDUP = 5.0
TARGET_TTB_P99_MS = 100.0


def _log(msg: str) -> None:
    print(f"bench attack: {msg}", file=sys.stderr, flush=True)


def proc_cpu_s(pid: int | None, children: bool = True) -> float | None:
    """utime + stime of a process (and of its reaped children), seconds; None if gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(b")") + 2:].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class AttackConfig:
    """``fipstop bench attack``'s options (None: the default, or the --quick one)."""

    output: Output = Output()
    quick: bool = False
    attackers_log2: int | None = None
    rate: float | None = None
    lengths: tuple[float, ...] = ()
    pipelines: tuple[str, ...] = ()
    keep: bool = False
    nft_via: str = "auto"  # the FIPS pipeline's `fipstop ips --nft-via`
    ips_rt: int | None = None  # every IPS process under SCHED_FIFO of this priority (chrt -f); None: SCHED_OTHER
    chart: bool = True  # draw the chart in the terminal (plotext) after the table


@dataclass
class Running:
    """What one pipeline started (stopped in reverse order)."""

    procs: list[subprocess.Popen] = field(default_factory=list)
    ips_pid: int | None = None
    extra_pids: list[int] = field(default_factory=list)  # more IPS processes (CrowdSec's bouncer)
    cleanup: list[Any] = field(default_factory=list)


class Bench:
    def __init__(self, config: AttackConfig) -> None:
        self.config = config
        self.quick = config.quick
        #: what every IPS's command starts with: threads inherit the policy, so the whole process is real-time
        self.ips_prefix: list[str] = [] if config.ips_rt is None else ["chrt", "-f", str(int(config.ips_rt))]
        k = config.attackers_log2
        self.log2 = int(k if k is not None else (QUICK_LOG2 if self.quick else DEFAULT_LOG2))
        if not 0 <= self.log2 <= 20:
            raise FipsError(f"--attackers-log2 {self.log2}: give 0..20 (the paper: 10..16)")
        self.attackers = 1 << self.log2
        self.rate = float(config.rate or (QUICK_RATE if self.quick else DEFAULT_RATE))
        if self.rate <= 0:
            raise FipsError(f"--rate {self.rate:g}: give queries/s above 0")
        self.lengths = tuple(config.lengths) or (QUICK_LENGTHS if self.quick else DEFAULT_LENGTHS)
        if any(not 1 <= x <= 3600 for x in self.lengths):
            raise FipsError(f"--lengths {','.join(f'{x:g}' for x in self.lengths)}: give seconds in 1..3600")
        self.pipelines = tuple(config.pipelines) or PIPELINES
        bad = [p for p in self.pipelines if p not in PIPELINES]
        if bad:
            raise FipsError(f"--pipelines {bad[0]!r}: not a pipeline (one of {', '.join(PIPELINES)})")
        self.tmp = Path(tempfile.mkdtemp(prefix="fipstop-bench-attack-"))
        self.shm = self.tmp / "shm"
        self.shm.mkdir()
        self.net = Topology(valid_count=VALID_SOURCES)
        self.flood: Path | None = None
        self.valid: Path | None = None
        self.skipped: dict[str, str] = {}

    # -- tools -----------------------------------------------------------------------------

    @staticmethod
    def _which(prog: str) -> str:
        return shutil.which(prog) or f"/usr/sbin/{prog}"

    def missing(self) -> str | None:
        why = Topology.missing()
        if why:
            return why
        for prog in ("named", "dig"):
            if shutil.which(prog) is None and not Path(f"/usr/sbin/{prog}").exists():
                return f"{prog} not found (Debian: bind9, bind9-dnsutils)"
        return None

    def pipeline_missing(self, pipeline: str) -> str | None:
        if pipeline == "fail2ban" and shutil.which("fail2ban-server") is None:
            return "fail2ban-server not found (Debian: fail2ban)"
        if pipeline == "crowdsec":
            from fipstop.bench.attack import crowdsec

            return crowdsec.missing()
        return None

    @staticmethod
    def _tail(path: Path, n: int = 3) -> str:
        try:
            return one_line(" | ".join(path.read_text(errors="replace").splitlines()[-n:]), 300)
        except OSError:
            return "(no output)"

    def _spawn(self, run: Running, argv: list[str], log: Path, **kw: Any) -> subprocess.Popen:
        with open(log, "wb") as out:
            p = popen(argv, stdin=subprocess.DEVNULL, stdout=kw.pop("stdout", out), stderr=out, **kw)
        run.procs.append(p)
        return p

    @staticmethod
    def _stop(p: subprocess.Popen | None, timeout: float = 20.0) -> None:
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)

    def _answered(self) -> bool:
        r = subprocess.run(self.net.in_client([self._which("dig"), "-b", valid_ips(1)[0], f"@{SERVER_IP}", "-p",
                                               str(PORT), "+time=1", "+tries=1", "SOA", ZONE]),
                           capture_output=True, text=True, timeout=10)
        return "status: NOERROR" in r.stdout

    def _wait_named(self, p: subprocess.Popen, d: Path) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise RuntimeError(f"named exited {p.returncode}: {self._tail(d / 'named.out')}")
            if self._answered():
                return
            time.sleep(0.2)
        raise RuntimeError(f"named did not answer on {SERVER_IP}#{PORT}: {self._tail(d / 'named.out')}")

    def named_conf(self, pipeline: str, d: Path, zone: Path) -> str:
        if pipeline == "fips":
            channels = {"sys": "syslog daemon; severity info;"}
            cats = {"security": "sys", "queries": "sys"}
        else:
            channels = {"qlog": f'file "{d}/query.log"; severity info; print-time yes;'}
            cats = {"security": "qlog", "queries": "qlog"}
        return render_named_conf(d, PORT, zone, querylog=True, channels=channels, categories=cats,
                                 allow_query=VALID_NET, listen=SERVER_IP)

    # -- one pipeline, one attack length ------------------------------------------------------

    def run_one(self, pipeline: str, length: float) -> dict[str, Any]:
        d = self.tmp / f"{pipeline}-{length:g}s"
        d.mkdir()
        zone = d / "zone.db"
        write_zone(zone)
        conf = d / "named.conf"
        conf.write_text(self.named_conf(pipeline, d, zone))
        named_argv = [self._which("named"), "-f", "-c", str(conf), "-n", "2"]
        self.net.flush_server_nft()
        run = Running()
        res: dict[str, Any] = {"pipeline": pipeline, "label": LABELS[pipeline], "attack_length_s": length}
        domain = f"atk24{os.getpid()}"
        env = dict(os.environ, FIPS_SHM_DIR=str(self.shm))
        collector = None
        try:
            if pipeline == "fips":
                from fipstop import _fips
                from fipstop.demo import BanCollector

                bans_dom = _fips.Domain(f"{domain}-bans", str(self.shm), create=2, ring_capacity=16 << 20,
                                        max_record=1024, max_rings=16)
                run.cleanup.append(bans_dom.close)
                for name in (domain, f"{domain}-bans"):
                    run.cleanup.append(lambda n=name: _unlink_domain(n, str(self.shm)))
                collector = BanCollector(f"{domain}-bans", str(self.shm))
                collector.start(bans_dom)
                run.cleanup.insert(0, collector.stop)
                named = self._spawn(run, self.net.in_server([sys.executable, "-m", "fipstop", "--shm-dir",
                                                             str(self.shm), "wrap", "--domain", domain,
                                                             "--ring-size", "4M", "--", *named_argv]),
                                    d / "named.out", cwd=d, env=env)
                self._wait_named(named, d)
                stats = d / "ips-stats.json"
                ips = self._spawn(run, self.net.in_server([
                    *self.ips_prefix, sys.executable, "-m", "fipstop", "--shm-dir", str(self.shm), "ips",
                    "--domain", domain,
                    "--consumer", "ips-attack", "--jail", "named-refused", "--maxretry", str(MAXRETRY),
                    "--findtime", "600", "--bantime", "3600", "--ignoreself", "no", "--ignoreip", VALID_NET,
                    "--no-ranges", "--max-tracked", str(max(100000, 2 * self.attackers)),
                    "--action", "nft", "--nft-set", "inet:fipstop:banned", "--nft-via", self.config.nft_via,
                    "--bans-domain", f"{domain}-bans", "--stats-json", str(stats), "-q"]), d / "ips.out", env=env)
                self._wait_file(stats, ips, d / "ips.out", "fipstop ips")
                run.ips_pid = ips.pid
            else:
                named = self._spawn(run, self.net.in_server(named_argv), d / "named.out", cwd=d)
                self._wait_named(named, d)
                if pipeline == "fail2ban":
                    cfg = d / "f2b"
                    marks = d / "bans.txt"
                    marks.touch()
                    f2b.write_config(cfg, d / "query.log", marks, MAXRETRY)
                    srv = self._spawn(run, self.net.in_server([
                        *self.ips_prefix, self._which("fail2ban-server"), "-f", "-x", "-c", str(cfg), "-s",
                        str(cfg / "fail2ban.sock"), "-p", str(cfg / "fail2ban.pid")]), d / "fail2ban.out")
                    self._wait_fail2ban(srv, cfg)
                    run.ips_pid = srv.pid
                elif pipeline == "crowdsec":
                    from fipstop.bench.attack import crowdsec

                    cs = crowdsec.CrowdSec(self.net, d / "crowdsec", d / "query.log", MAXRETRY,
                                           prefix=self.ips_prefix)
                    run.cleanup.insert(0, cs.stop)
                    cs.start()
                    run.ips_pid = cs.pid
                    run.extra_pids = cs.pids[1:]
            cpu0 = sum(proc_cpu_s(p) or 0.0 for p in [run.ips_pid, *run.extra_pids])
            named_cpu0 = proc_cpu_s(named.pid, children=False) or 0.0
            load0 = os.getloadavg()
            assert self.valid is not None and self.flood is not None
            valid = self._spawn(run, self.net.in_client([
                str(self.valid), SERVER_IP, str(PORT), ",".join(valid_ips(VALID_SOURCES)), f"{VALID_QPS:g}",
                f"{PRE_S + length + POST_S:g}", str(BIN_MS), str(VALID_TIMEOUT_MS), str(N_NAMES)]),
                d / "valid.err", stdout=subprocess.PIPE)
            time.sleep(PRE_S)
            atk = subprocess.run(self.net.in_client([str(self.flood), SERVER_IP, str(PORT), attacker_ip(0),
                                                     str(self.attackers), f"{self.rate:g}", f"{length:g}", QNAME]),
                                 capture_output=True, text=True, timeout=length + 60)
            try:
                res["attack"] = json.loads(atk.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise RuntimeError(f"flood failed: {one_line(atk.stderr or atk.stdout, 300)}") from None
            out, _ = valid.communicate(timeout=POST_S + VALID_TIMEOUT_MS / 1000 + 30)
            try:
                vdoc = json.loads(out.decode().strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise RuntimeError(f"valid clients failed: {self._tail(d / 'valid.err')}") from None
            res["ips_cpu_s"] = None if run.ips_pid is None else round(
                sum(proc_cpu_s(p) or 0.0 for p in [run.ips_pid, *run.extra_pids]) - cpu0, 3)
            res["named_cpu_s"] = round((proc_cpu_s(named.pid, children=False) or 0.0) - named_cpu0, 3)
            res["loadavg_before"] = [round(x, 2) for x in load0]
            res["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
            a = res["attack"]
            s = series.from_valid(vdoc, a["first_ns"], a["last_ns"])
            res["valid"] = {"qps": VALID_QPS, "sources": VALID_SOURCES, "sent": vdoc["sent_total"],
                            "send_errors": vdoc["send_errors"], "late": vdoc["late"], "timeout_ms": VALID_TIMEOUT_MS}
            res["series"] = {"bin_s": s.bin_s, "t_s": list(s.t_s), "sent": list(s.sent), "answered": list(s.answered)}
            res.update(series.summarize(s))
            bans = self._bans(pipeline, d, collector)
            # after the bans: an IPS reports a ban once its element exists, so the set holds at least those
            res["nft_sets"] = self.net.server_set_size()
            res.update(self._ban_figures(bans, a["first_ns"]))
            if pipeline == "fips":
                res.update(self._fips_extra(domain, d / "ips-stats.json"))
            elif pipeline in ("fail2ban", "crowdsec", "none"):
                res["records_dropped"] = 0  # a file drops nothing; what named never logged is below
            if pipeline == "fail2ban":
                res["fail2ban_status"] = self._f2b_status(d / "f2b")
            if pipeline == "crowdsec":
                res["crowdsec"] = cs.stats()
            logged = res.get("attack_lines_logged")
            res["attack_lines_logged_share"] = round(logged / a["sent"], 4) if isinstance(logged, int) and a.get(
                "sent") else None
            return res
        finally:
            for p in reversed(run.procs):
                self._stop(p)
            for fn in run.cleanup:
                try:
                    fn()
                except Exception:
                    pass
            self.net.flush_server_nft()

    def _wait_file(self, path: Path, p: subprocess.Popen, log: Path, what: str) -> None:
        deadline = time.monotonic() + 20
        while not path.exists():
            if p.poll() is not None:
                raise RuntimeError(f"{what} exited {p.returncode}: {self._tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready after 20 s: {self._tail(log)}")
            time.sleep(0.1)

    def _f2b_client(self, cfg: Path, *args: str) -> str:
        r = subprocess.run(self.net.in_server([self._which("fail2ban-client"), "-s", str(cfg / "fail2ban.sock"),
                                               *args]), capture_output=True, text=True, timeout=20)
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

    def _bans(self, pipeline: str, d: Path, collector: Any) -> dict[str, tuple[int | None, int | None, int]]:
        """attacker ip -> (first offending record ns, maxretry-th record ns, ban in force ns)."""
        if pipeline == "fips":
            with collector._lock:
                return {ip: (v[0], v[1], v[2]) for ip, v in collector.first_ban.items() if is_attacker(ip)}
        times, total = denied_times(d / "query.log", MAXRETRY, is_attacker)
        self._denied_total = total
        if pipeline == "fail2ban":
            banned = f2b.read_marks(d / "bans.txt", is_attacker)
        elif pipeline == "crowdsec":
            from fipstop.bench.attack import crowdsec

            banned = crowdsec.read_marks(d / "crowdsec" / "bans.txt", is_attacker)
        else:
            banned = {}
        out = {}
        for ip, t in banned.items():
            first, nth = times.get(ip, (None, None))
            out[ip] = (first, nth, t)
        return out

    def _ban_figures(self, bans: dict[str, tuple[int | None, int | None, int]], attack_first_ns: int) -> dict[str, Any]:
        ttb = sorted((b - f) / 1e6 for f, _n, b in bans.values() if f is not None)
        react = sorted(max(0.0, (b - n) / 1e6) for _f, n, b in bans.values() if n is not None)
        last = max((b for *_x, b in bans.values()), default=None)
        out: dict[str, Any] = {
            "attackers": self.attackers, "attackers_banned": len(bans),
            "banned_share": round(len(bans) / self.attackers, 4),
            "last_ban_after_s": None if last is None else round((last - attack_first_ns) / 1e9, 3),
            "ttb_ms": _pcts(ttb), "reaction_ms": _pcts(react),
        }
        # when not every attacker was banned: how long banning them all would take at the rate it banned at (an
        # estimate, labelled so: the rate may change as the attack goes on)
        span = None if last is None else (last - attack_first_ns) / 1e9
        rate = len(bans) / span if span and span > 0 else None
        out["bans_per_s"] = None if rate is None else round(rate, 2)
        out["all_banned_estimate_s"] = (round(span, 3) if len(bans) >= self.attackers and span is not None else
                                        None if not rate else round(self.attackers / rate, 1))
        if hasattr(self, "_denied_total"):
            out["attack_lines_logged"] = self._denied_total
            del self._denied_total
        return out

    def _fips_extra(self, domain: str, stats: Path) -> dict[str, Any]:
        from fipstop.ring import snapshot_domain

        out: dict[str, Any] = {}
        try:
            snap = snapshot_domain(domain, str(self.shm))
            out["records_committed"] = int(snap.rings["records_committed"].sum())
            out["records_dropped"] = int(snap.rings["records_dropped"].sum())
        except Exception as exc:  # the domain is gone: unknown, said so
            out["records_dropped"] = None
            out["records_error"] = one_line(exc, 200)
        try:
            st = json.loads(stats.read_text())
        except (OSError, ValueError):
            st = {}
        out["ips_stats"] = {k: st.get(k) for k in ("records", "matched", "lost", "bans", "bans_failed",
                                                   "events_dropped", "action", "action_failures", "reaction_ms",
                                                   "reaction_read_ms", "reaction_action_ms")}
        m = st.get("matched")
        out["attack_lines_logged"] = m if isinstance(m, int) else None
        return out

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        why = self.missing()
        if why:
            raise FipsError(f"bench attack: {why}")
        for name, src in (("attack-flood", FLOOD_SRC), ("attack-valid", VALID_SRC)):
            binary, err, _info = build_c(name, (src,))
            if binary is None:
                raise FipsError(f"bench attack: {err}")
            if name == "attack-flood":
                self.flood = binary
            else:
                self.valid = binary
        for p in self.pipelines:
            why = self.pipeline_missing(p)
            if why:
                self.skipped[p] = why
                _log(f"{p}: skipped: {why}")
        runs: dict[str, dict[str, Any]] = {}
        try:
            self.net.up()
            for length in self.lengths:
                key = f"{length:g}s"
                runs[key] = {}
                for p in self.pipelines:
                    if p in self.skipped:
                        continue
                    _log(f"{p}: {self.attackers} attackers, {self.rate:g} q/s for {length:g} s")
                    try:
                        r = self.run_one(p, length)
                        runs[key][p] = r
                        _log(f"{p}: 99.5 % at {r.get('time_to_99_5_s')} s, banned {r['attackers_banned']}"
                             f"/{self.attackers}, attack {r['attack']['rate_qps']:.0f} q/s")
                    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                        runs[key][p] = {"pipeline": p, "label": LABELS[p], "error": one_line(e, 300)}
                        _log(f"{p}: {one_line(e, 300)}")
        finally:
            self.net.down()
        return self.document(runs)

    def params(self) -> dict[str, Any]:
        return {"attackers": self.attackers, "attackers_log2": self.log2, "attack_rate_qps": self.rate,
                "attack_lengths_s": list(self.lengths), "maxretry": MAXRETRY, "qname": QNAME,
                "valid_qps": VALID_QPS, "valid_sources": VALID_SOURCES, "bin_ms": BIN_MS,
                "valid_timeout_ms": VALID_TIMEOUT_MS, "pre_s": PRE_S, "post_s": POST_S, "quick": self.quick,
                "window_bins": series.WINDOW_BINS, "pipelines": list(self.pipelines), "skipped": self.skipped,
                "named": "named -f -c CONF -n 2 in netns atk24s*, allow-query the valid clients only",
                "attack": "flood DST PORT 10.96.0.0 N RATE S (spoofed via IP_PKTINFO over AnyIP, veth)",
                "fips": "fipstop wrap --ring-size 4M -- named ...; fipstop ips --jail named-refused --action nft "
                        f"--nft-via {self.config.nft_via}",
                "fail2ban": "fail2ban-server -f -x -c DIR (backend polling, filter named-refused, "
                            "action nftables[type=allports, blocktype=drop] + a timestamp)",
                "crowdsec": "crowdsec -c OWN.yaml (file acquisition, mstilkerich/bind9, LAPI 127.0.0.1, no CAPI) "
                            "-> decisions -> nft",
                "ips_scheduling": ("SCHED_OTHER (the normal scheduler)" if self.config.ips_rt is None else
                                   f"SCHED_FIFO {self.config.ips_rt} (chrt -f) for fipstop ips, fail2ban-server, "
                                   "crowdsec and crowdsec-firewall-bouncer")}

    def document(self, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        ratios: dict[str, dict[str, Any]] = {}
        targets: list[dict[str, Any]] = []
        for key, rs in runs.items():
            p = rs.get("fips", {})
            rk: dict[str, Any] = {}
            for other in ("fail2ban", "crowdsec"):
                o = rs.get(other)
                if not o or "error" in o or "error" in p:
                    continue
                for th in ("99", "99_5"):
                    rk[f"{other}_time_to_{th}"] = _ratio(o, p, f"time_to_{th}_s")
                rk[f"{other}_ttb_p50"] = _ratio(o.get("ttb_ms") or {}, p.get("ttb_ms") or {}, "p50")
            ratios[key] = rk
            length = p.get("attack_length_s")
            for other in ("fail2ban", "crowdsec"):
                o = rs.get(other)
                if not o or "error" in o:
                    reason = (o or {}).get("error") or self.skipped.get(other, "not run")
                    targets.append({"name": f"[{key}] FIPS reaches 99.5 % sooner than {LABELS[other]}",
                                    "target": f">= {TARGET_SPEEDUP:g}x", "measured": None, "ok": None,
                                    "note": reason})
                    continue
                targets.append(_speed_target(key, other, o, p, length))
            if "error" not in p and p:
                ttb = (p.get("ttb_ms") or {}).get("p99")
                react = (p.get("reaction_ms") or {}).get("p99")
                targets += [
                    {"name": f"[{key}] FIPS bans every attacker", "target": f"{self.attackers}",
                     "measured": p.get("attackers_banned"), "ok": p.get("attackers_banned") == self.attackers},
                    {"name": f"[{key}] records dropped in the FIPS path", "target": "0",
                     "measured": p.get("records_dropped"),
                     "ok": None if p.get("records_dropped") is None else p.get("records_dropped") == 0},
                    {"name": f"[{key}] FIPS time-to-ban p99 (first logged query -> ban)",
                     "target": f"<= {TARGET_TTB_P99_MS:g} ms", "measured": ttb,
                     "ok": None if ttb is None else ttb <= TARGET_TTB_P99_MS,
                     "note": f"includes the attack's own pace: each attacker sends every "
                             f"{self.attackers / self.rate:.2f} s, {MAXRETRY} logged queries make a ban"},
                    {"name": f"[{key}] FIPS reaction p99 (maxretry-th logged query -> ban)",
                     "target": f"<= {TARGET_TTB_P99_MS:g} ms", "measured": react,
                     "ok": None if react is None else react <= TARGET_TTB_P99_MS},
                ]
        if self.config.ips_rt is not None:  # a verdict of real-time IPSs is not one of the default set-up
            for t in targets:
                t["note"] = "; ".join(x for x in (t.get("note"), f"every IPS SCHED_FIFO {self.config.ips_rt}") if x)
        return {"schema": SCHEMA, "kind": "attack", "command": self.config.output.command,
                "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "machine": machine_info(),
                "params": self.params(), "runs": runs, "ratios": ratios, "targets": targets}

    def cleanup(self) -> None:
        self.net.down()
        if self.config.keep:
            _log(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _unlink_domain(name: str, shm: str) -> None:
    from fipstop import _fips

    try:
        _fips.Domain.unlink(name, shm)
    except Exception:
        pass


def _pcts(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": _r(series.percentile(values, 0.5)), "p99": _r(series.percentile(values, 0.99)),
            "max": _r(values[-1] if values else None)}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
    x, y = a.get(key), b.get(key)
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y > 0:
        return round(x / y, 2)
    return None


def _speed_target(key: str, other: str, o: dict[str, Any], p: dict[str, Any], length: float | None) -> dict[str, Any]:
    name = f"[{key}] FIPS reaches 99.5 % sooner than {LABELS[other]}"
    tf, to = p.get("time_to_99_5_s"), o.get("time_to_99_5_s")
    if tf is None:
        return {"name": name, "target": f">= {TARGET_SPEEDUP:g}x", "measured": None, "ok": False,
                "note": "FIPS did not reach 99.5 % during the attack"}
    if tf <= 0:
        return {"name": name, "target": f">= {TARGET_SPEEDUP:g}x", "measured": None, "ok": None,
                "note": "FIPS never fell below 99.5 %: the attack did not hurt the valid clients"}
    if to is None:
        lower = round((length or 0) / tf, 2)
        return {"name": name, "target": f">= {TARGET_SPEEDUP:g}x", "measured": f">= {lower}",
                "ok": lower >= TARGET_SPEEDUP,
                "note": f"{other} never reached 99.5 % before the attack ended: a lower bound (attack length / FIPS)"}
    ratio = round(to / tf, 2)
    return {"name": name, "target": f">= {TARGET_SPEEDUP:g}x", "measured": ratio, "ok": ratio >= TARGET_SPEEDUP}


def main(config: AttackConfig) -> int:
    """Run ``fipstop bench attack``, publish the result (JSON, table, the chart)."""
    from fipstop.bench.attack.report import render_table

    bench = Bench(config)
    try:
        doc = bench.run()
    finally:
        bench.cleanup()
    written = publish("attack", doc, config.output, _dt.datetime.now(_dt.UTC), render_table, _log)
    from fipstop.bench.attack.plot import write

    for p in written:
        try:
            for f in write(doc, p):
                _log(f"wrote {f}")
        except OSError as exc:
            _log(f"cannot write the chart beside {p}: {exc}")
    return 0
