"""The whole pipeline on one machine, as it is deployed (``fipstop demo``).

Three kinds of process, each with a pid of its own:

1. ``fips-demo-producer`` (C, through libfips; ``fipstop/lib/``): threads
   that log BIND's query lines for legitimate clients and refused-query lines
   for an attack from ``--attackers`` addresses at a rate ramping up to
   ``--attack-rate`` lines/s;
2. ``fipstop ips`` with the ``named-refused`` jail (dry-run unless
   ``--action`` says otherwise), publishing ban events into a bans domain of
   the demo's own;
3. the dashboard (this process): ``fipstop``'s app with the ring probe and
   the bans probe (key 5 shows the Bans panel; the header shows bans/s).

``--slow-consumer MS`` adds a second consumer process that sleeps MS ms after
every batch: it holds the rings back, so the producer drops (counted, red in
the dashboard), and the IPS misses what was dropped, as it would in a real
deployment with a slow archiver.

The demo creates its domains (``--domain`` and ``--domain``-bans in the shm
dir) and refuses to touch existing ones; on exit it stops its children and
removes what it created.  The demo process also drains the bans domain as a
registered consumer, so the IPS never drops ban events, and keeps every
time-to-ban for the summary.

``--headless --duration S`` runs without the dashboard and prints a summary
(records, drops, bans, time-to-ban percentiles, attackers banned); without a
terminal the demo runs headless for 10 s instead of failing (``make demo`` in
CI).  The command is :mod:`fipstop.commands.demo`.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fipstop import _fips
from fipstop.bans import IpsTally, decode_record
from fipstop.children import Janitor, dying_with_parent
from fipstop.config import ProbeConfig
from fipstop.errors import FipsError
from fipstop.ring import domain_path, resolve_shm_dir, snapshot_domain, valid_domain_name
from fipstop.sigflag import SignalFlag
from fipstop.sources.probeset import ProbeSet, build_probes

DEFAULT_DOMAIN = "demo"
#: a domain's created_realtime_ns (docs/ring-format.md): what tells the janitor this run's domain from a later one
DOMAIN_STAMP = (80, 8)
ATTACK_NET = (198, 18)
PRODUCER = "fips-demo-producer"


def producer_path() -> Path:
    return Path(__file__).resolve().parent / "lib" / PRODUCER


def is_attacker(ip: str, net: tuple[int, int] = ATTACK_NET) -> bool:
    parts = ip.split(".")
    return len(parts) == 4 and parts[0] == str(net[0]) and parts[1].isdigit() and net[1] <= int(parts[1]) <= net[1] + 1


def percentile(sorted_values: list[int], q: float) -> int | None:
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), -(-int(q * len(sorted_values) * 1000) // 1000)))
    return sorted_values[rank - 1]


# -- the bans domain, drained -------------------------------------------------------------------


@dataclass
class BanCollector:
    """Drains the bans domain as a registered consumer (so the IPS never drops
    a ban event) and keeps, per address, its first ban's time-to-ban."""

    domain: str
    shm_dir: str
    first_ban: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # ip -> (first, trigger, ban) ns
    bans: int = 0
    unbans: int = 0
    failed: int = 0
    bad: int = 0
    lost: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, dom) -> None:
        self._cons = _fips.Consumer(dom, "demo-bans")
        self._thread = threading.Thread(target=self._loop, name="demo-bans", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self.drain_once(decode_record):
                self._stop.wait(0.05)
        self.drain_once(decode_record)

    def drain_once(self, decode) -> bool:
        batch = self._cons.read(4096)
        if batch is None:
            return False
        with self._lock:
            self.lost += batch.lost
            for rec in batch:
                try:
                    ev = decode(rec.data)
                except ValueError:
                    self.bad += 1
                    continue
                if isinstance(ev, IpsTally):  # the IPS's own counters, not an event
                    continue
                if ev.kind == "unban":
                    self.unbans += 1
                elif not ev.ok:
                    self.failed += 1
                else:
                    self.bans += 1
                    self.first_ban.setdefault(ev.ip, (ev.first_ns, ev.trigger_ns, ev.ban_ns))
        batch.release()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._cons.close()
        except Exception:
            pass

    def times_to_ban_ns(self) -> tuple[list[int], list[int]]:
        with self._lock:
            vals = list(self.first_ban.values())
        # a negative latency (the wall clock stepped back): unknown, left out rather than shown as 0
        return sorted(b - f for f, _t, b in vals if f <= b), sorted(b - t for _f, t, b in vals if t <= b)


# -- the slow consumer (a child process: `python -m fipstop.demo --slow-child ...`) ---------------


def slow_consumer_main(domain: str, shm_dir: str, sleep_ms: float) -> int:
    """Reads 64 records, sleeps, again: a consumer that cannot keep up."""
    stop = SignalFlag()  # not a threading.Event: set from a signal handler
    signal.signal(signal.SIGTERM, stop.set)
    signal.signal(signal.SIGINT, stop.set)
    with _fips.Domain(domain, shm_dir, create=False) as dom:
        cons = _fips.Consumer(dom, "slow-archiver")
        while not stop.is_set():
            b = cons.read(64)
            if b is not None:
                b.release()
            cons.heartbeat()
            stop.wait(sleep_ms / 1000.0)
        cons.close()
    return 0


# -- the run ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoConfig:
    """What to run (``fipstop demo``'s options)."""

    attackers: int = 4096
    attack_rate: float = 20000.0
    legit_rate: float = 2000.0
    ramp: float = 5.0
    attack_start: float = 1.0
    threads: int = 4
    slow_consumer: float = 0.0  # ms a second consumer sleeps per batch; 0: none
    ring_size: int = 4 << 20
    maxretry: int = 5
    action: str = "dry-run"
    domain: str = DEFAULT_DOMAIN
    shm_dir: str | None = None


class Demo:
    def __init__(self, args: DemoConfig) -> None:
        self.args = args
        self.shm_dir = resolve_shm_dir(args.shm_dir)
        self.domain = args.domain
        self.bans_domain = f"{args.domain}-bans"
        for name in (self.domain, self.bans_domain):
            if not valid_domain_name(name):
                raise FipsError(f"--domain {args.domain!r}: not a domain name (1-58 of A-Z a-z 0-9 . _ -)")
        self.procs: dict[str, subprocess.Popen] = {}
        self.created: list[str] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="fipstop-demo-"))
        # removes the domains and self.tmp should this process be killed (SIGKILL: nothing here runs)
        self.janitor = Janitor()
        self.janitor.remove_dir(self.tmp)
        self._cleaned = False
        self.stats_path = self.tmp / "ips-stats.json"
        self.collector: BanCollector | None = None
        self._bans_dom: _fips.Domain | None = None
        self.producer_counters: dict = {}
        self.started_mono = 0.0

    # processes
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["FIPS_SHM_DIR"] = self.shm_dir
        return env

    def _spawn(self, name: str, argv: list[str], *, stdout=subprocess.DEVNULL) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.err", "wb")
        try:
            # SIGTERM from the kernel when this process dies, however (closed terminal, kill -9)
            proc = subprocess.Popen(dying_with_parent(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=log,
                                    env=self._env(), start_new_session=True)
        finally:
            log.close()
        self.procs[name] = proc
        return proc

    def stderr_tail(self, name: str, n: int = 3) -> str:
        try:
            lines = (self.tmp / f"{name}.err").read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(lines[-n:])[:400]

    def create_domains(self) -> None:
        ring = self.args.ring_size
        if ring & (ring - 1):
            raise FipsError(f"--ring-size {ring}: give a power of two")
        # the demo's domain, and its bans domain: room for every ban event of a burst
        for name, capacity, max_record, max_rings in ((self.domain, ring, 4096, 256),
                                                      (self.bans_domain, 16 << 20, 1024, 16)):
            try:
                d = _fips.Domain(name, self.shm_dir, create=2, ring_capacity=capacity, max_record=max_record,
                                 max_rings=max_rings)
            except (_fips.FipsError, OSError) as e:
                code = e.code if isinstance(e, _fips.FipsError) else e.errno
                if code == errno.EEXIST:
                    raise FipsError(f"domain {name!r} already exists in {self.shm_dir}: another demo is running, "
                                    "or give --domain") from None
                raise FipsError(f"cannot create domain {name!r} in {self.shm_dir}: {e}") from None
            self.created.append(name)
            self.janitor.remove_file(domain_path(name, self.shm_dir), stamp=DOMAIN_STAMP)
            if name == self.bans_domain:
                self._bans_dom = d
            else:
                d.close()

    def start(self, duration: float | None) -> None:
        a = self.args
        prod = producer_path()
        if not os.access(prod, os.X_OK):
            raise FipsError(f"{prod} is not built: run `make lib`")
        self.create_domains()
        self.collector = BanCollector(self.bans_domain, self.shm_dir)
        self.collector.start(self._bans_dom)
        ips = [sys.executable, "-m", "fipstop", "--shm-dir", self.shm_dir, "ips", "--domain", self.domain,
               "--consumer", "ips", "--jail", "named-refused", "--maxretry", str(a.maxretry),
               "--bans-domain", self.bans_domain, "--stats-json", str(self.stats_path), "--action", a.action, "-q"]
        self._spawn("ips", ips)
        if a.slow_consumer > 0:
            self._spawn("slow", [sys.executable, "-m", "fipstop.demo", "--slow-child", self.domain, self.shm_dir,
                                 str(a.slow_consumer)])
        time.sleep(0.3)  # let the consumers register: nothing is dropped for want of a reader
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise FipsError(f"`fipstop {name}` exited at once ({p.returncode}): {self.stderr_tail(name)}")
        argv = [str(prod), "--domain", self.domain, "--threads", str(a.threads), "--attackers", str(a.attackers),
                "--attack-rate", str(a.attack_rate), "--legit-rate", str(a.legit_rate), "--ramp", str(a.ramp),
                "--attack-start", str(a.attack_start), "--duration", str(duration or 0),
                "--attack-net", f"{ATTACK_NET[0]}.{ATTACK_NET[1]}.0.0"]
        self._spawn("producer", argv, stdout=subprocess.PIPE)
        self.started_mono = time.monotonic()

    def stop_producer(self) -> None:
        p = self.procs.get("producer")
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        try:
            self.producer_counters = json.loads((out or b"{}").decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.producer_counters = {}

    def ips_stats(self) -> dict:
        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return {}

    def ring_totals(self) -> dict[str, int]:
        try:
            s = snapshot_domain(self.domain, self.shm_dir)
        except Exception:
            return {}
        r = s.rings
        return {"records_committed": int(r["records_committed"].sum()),
                "records_dropped": int(r["records_dropped"].sum())}

    def wait_ips_caught_up(self, timeout: float = 10.0) -> None:
        """After the producer stopped: until the IPS has read what was
        committed and said so in a stats write (about once a second), and
        every ban event it published has been collected."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.procs.get("ips") and self.procs["ips"].poll() is not None:
                break
            st, ring = self.ips_stats(), self.ring_totals()
            c = self.collector
            seen = (c.bans + c.unbans + c.failed + c.bad) if c is not None else 0
            if (st.get("records", -1) >= ring.get("records_committed", 0)
                    and seen + st.get("events_dropped", 0) >= st.get("events_published", 0)):
                break
            time.sleep(0.1)

    def stop_all(self) -> None:
        for name in ("slow", "ips", "producer"):
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.collector is not None:
            self.collector.stop()

    def cleanup(self) -> None:
        """Stop the children, remove the domains and the temporary directory (once)."""
        if self._cleaned:
            return
        self._cleaned = True
        self.stop_all()
        if self._bans_dom is not None:
            try:
                self._bans_dom.close()
            except Exception:
                pass
        for name in self.created:
            try:
                _fips.Domain.unlink(name, self.shm_dir)
            except Exception:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.janitor.done()

    def probes(self) -> ProbeSet:
        """What the dashboard samples: what plain ``fipstop`` samples (CPU, backends, bans, Fail2Ban
        when there is one), on the demo's two domains and its ban events."""
        return build_probes(ProbeConfig(shm_dir=self.shm_dir, domains=(self.domain, self.bans_domain),
                                        bans_domain=self.bans_domain))

    def summary(self, wall_s: float) -> dict[str, Any]:
        c = self.collector
        assert c is not None
        ttb, reaction = c.times_to_ban_ns()
        attackers_banned = sum(1 for ip in c.first_ban if is_attacker(ip))
        legit_banned = len(c.first_ban) - attackers_banned
        ring = self.ring_totals()
        ips = self.ips_stats()
        pc = self.producer_counters

        def ms(v: int | None) -> float | None:
            return None if v is None else round(v / 1e6, 3)

        return {
            "seconds": round(wall_s, 2),
            "producer": {"threads": self.args.threads, "legit_lines": pc.get("legit_lines"),
                         "attack_lines": pc.get("attack_lines"), "dropped": pc.get("dropped")},
            "records_committed": ring.get("records_committed"),
            "records_dropped": ring.get("records_dropped"),
            "ips": {k: ips.get(k) for k in ("records", "matched", "lost", "bans", "active_bans", "bans_failed",
                                            "action_failures", "evictions", "events_dropped") if k in ips},
            "ban_events": c.bans, "unban_events": c.unbans, "failed_bans": c.failed,
            "ban_events_lost": c.lost, "bad_ban_records": c.bad,
            "attackers": self.args.attackers, "attackers_banned": attackers_banned,
            "legit_banned": legit_banned,
            "time_to_ban_ms": {"p50": ms(percentile(ttb, 0.5)), "p90": ms(percentile(ttb, 0.9)),
                               "p99": ms(percentile(ttb, 0.99)), "max": ms(ttb[-1] if ttb else None)},
            "reaction_ms": {"p50": ms(percentile(reaction, 0.5)), "p99": ms(percentile(reaction, 0.99))},
            "slow_consumer_ms": self.args.slow_consumer,
        }


def format_summary(s: dict) -> str:
    def n(v) -> str:
        return "-" if v is None else f"{v:,}"

    def t(v) -> str:
        return "-" if v is None else (f"{v:.2f} ms" if v < 1000 else f"{v / 1000:.2f} s")

    p = s["producer"]
    ttb = s["time_to_ban_ms"]
    share = s["attackers_banned"] / s["attackers"] * 100 if s["attackers"] else 0.0
    lines = [
        f"fipstop demo: {s['seconds']:.1f} s, {p['threads']} producer threads"
        + (f", slow consumer {s['slow_consumer_ms']:g} ms/batch" if s["slow_consumer_ms"] else ""),
        f"  records   {n(s['records_committed'])} committed ({n(p['legit_lines'])} legitimate, "
        f"{n(p['attack_lines'])} attack lines written), {n(s['records_dropped'])} dropped (ring full)",
        f"  ips       {n(s['ips'].get('records'))} records read, {n(s['ips'].get('matched'))} matched, "
        f"{n(s['ips'].get('bans'))} bans" + (f", {n(s['ips']['lost'])} lost to ring drops"
                                             if s["ips"].get("lost") else ""),
        f"  bans      {n(s['ban_events'])} ban events, {n(s['unban_events'])} unbans, {n(s['failed_bans'])} failed"
        + (f", {n(s['ban_events_lost'])} lost" if s["ban_events_lost"] else ""),
        f"  attackers {n(s['attackers_banned'])} banned of {n(s['attackers'])} ({share:.1f} %), "
        f"legitimate clients banned {n(s['legit_banned'])}",
        f"  time-to-ban (first offending record -> ban)  p50 {t(ttb['p50'])}  p90 {t(ttb['p90'])}  "
        f"p99 {t(ttb['p99'])}  max {t(ttb['max'])}",
        f"  IPS reaction (record crossing maxretry -> ban)  p50 {t(s['reaction_ms']['p50'])}  "
        f"p99 {t(s['reaction_ms']['p99'])}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":  # the slow consumer child
    if len(sys.argv) == 5 and sys.argv[1] == "--slow-child":
        raise SystemExit(slow_consumer_main(sys.argv[2], sys.argv[3], float(sys.argv[4])))
    raise SystemExit("usage: python -m fipstop.demo --slow-child DOMAIN SHM_DIR MS")
