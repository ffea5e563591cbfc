"""``fipstop demo``: the whole pipeline on one machine, as it is deployed.

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
terminal the demo runs headless for ``NO_TTY_DURATION_S`` seconds instead of
failing (``make demo`` in CI).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fipstop.errors import FipsError

#: headless duration when there is no terminal and none was given
NO_TTY_DURATION_S = 10.0
DEFAULT_DOMAIN = "demo"
ATTACK_NET = (198, 18)
PRODUCER = "fips-demo-producer"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="the whole pipeline: a C producer under attack, `fipstop ips` banning, the dashboard",
        description="Create a domain, start a multi-threaded DNS-server-like producer (C, libfips) logging "
        "BIND query lines with an attack from many addresses, start `fipstop ips` with the named-refused "
        "jail, and open the dashboard (5: the Bans panel).  Everything it starts and creates is removed "
        "on exit.  Without a terminal it runs --headless for "
        f"{NO_TTY_DURATION_S:g} s.",
    )
    p.add_argument("--attackers", type=_int_range(1, 65536), default=4096, metavar="N",
                   help="attacking client addresses, up to 65536 (default %(default)s)")
    p.add_argument("--attack-rate", type=_float_range(0, 1e8), default=20000.0, metavar="R",
                   help="attack lines/s at the end of the ramp (default %(default)g)")
    p.add_argument("--legit-rate", type=_float_range(0, 1e8), default=2000.0, metavar="R",
                   help="legitimate query lines/s (default %(default)g)")
    p.add_argument("--ramp", type=_float_range(0, 3600), default=5.0, metavar="S",
                   help="seconds for the attack to ramp from 0 to --attack-rate (default %(default)g)")
    p.add_argument("--attack-start", type=_float_range(0, 3600), default=1.0, metavar="S",
                   help="seconds of legitimate traffic before the attack (default %(default)g)")
    p.add_argument("--threads", type=_int_range(1, 64), default=4, metavar="N",
                   help="producer threads, one ring each (default %(default)s)")
    p.add_argument("--slow-consumer", type=_float_range(0, 60000), default=0.0, metavar="MS",
                   help="add a consumer that sleeps MS ms per batch of 64: the rings fill and drop")
    p.add_argument("--ring-size", type=_int_range(1 << 16, 1 << 30), default=4 << 20, metavar="BYTES",
                   help="ring capacity per producer thread (power of two, default 4 MiB)")
    p.add_argument("--maxretry", type=_int_range(1, 10**6), default=5, metavar="N",
                   help="refused queries that ban an address (default %(default)s)")
    p.add_argument("--action", choices=("dry-run", "nft"), default="dry-run",
                   help="the IPS's ban action (default dry-run)")
    p.add_argument("--domain", default=DEFAULT_DOMAIN, metavar="NAME",
                   help="domain to create (default %(default)s; NAME-bans holds the ban events)")
    p.add_argument("--headless", action="store_true", help="no dashboard: run --duration seconds, print a summary")
    p.add_argument("--duration", type=_float_range(0.5, 86400), default=None, metavar="S",
                   help="stop after S seconds (headless default 20; dashboard: until q)")
    p.add_argument("--interval", type=_float_range(0.05, 3600), default=None, metavar="S",
                   help="dashboard sampling interval (default 1)")
    p.add_argument("--json", action="store_true", help="headless: print the summary as JSON")
    p.set_defaults(func=run)


def _int_range(lo: int, hi: int):
    def conv(text: str) -> int:
        try:
            v = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is not in {lo}..{hi}")
        return v
    return conv


def _float_range(lo: float, hi: float):
    def conv(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text} is not in {lo:g}..{hi:g}")
        return v
    return conv


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
        from fipstop._fips import Consumer

        self._cons = Consumer(dom, "demo-bans")
        self._thread = threading.Thread(target=self._loop, name="demo-bans", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        from fipstop.bans import decode

        while not self._stop.is_set():
            if not self.drain_once(decode):
                self._stop.wait(0.05)
        self.drain_once(decode)

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
        ttb = sorted(max(0, b - f) for f, _t, b in vals)
        reaction = sorted(max(0, b - t) for _f, t, b in vals)
        return ttb, reaction


# -- the slow consumer (a child process: `python -m fipstop.demo --slow-child ...`) ---------------


def slow_consumer_main(domain: str, shm_dir: str, sleep_ms: float) -> int:
    """Reads 64 records, sleeps, again: a consumer that cannot keep up."""
    from fipstop._fips import Consumer, Domain

    from fipstop.sigflag import SignalFlag

    stop = SignalFlag()  # not a threading.Event: set from a signal handler
    signal.signal(signal.SIGTERM, stop.set)
    signal.signal(signal.SIGINT, stop.set)
    with Domain(domain, shm_dir, create=False) as dom:
        cons = Consumer(dom, "slow-archiver")
        while not stop.is_set():
            b = cons.read(64)
            if b is not None:
                b.release()
            cons.heartbeat()
            stop.wait(sleep_ms / 1000.0)
        cons.close()
    return 0


# -- the run ---------------------------------------------------------------------------------------


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        from fipstop.ring import resolve_shm_dir, valid_domain_name

        self.args = args
        self.shm_dir = resolve_shm_dir(getattr(args, "shm_dir", None))
        self.domain = args.domain
        self.bans_domain = f"{args.domain}-bans"
        for name in (self.domain, self.bans_domain):
            if not valid_domain_name(name):
                raise FipsError(f"--domain {args.domain!r}: not a domain name (1-58 of A-Z a-z 0-9 . _ -)")
        self.procs: dict[str, subprocess.Popen] = {}
        self.created: list[str] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="fipstop-demo-"))
        self.stats_path = self.tmp / "ips-stats.json"
        self.collector: BanCollector | None = None
        self._bans_dom = None
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
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=log, env=self._env(),
                                    start_new_session=True)
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
        from fipstop import _fips

        ring = self.args.ring_size
        if ring & (ring - 1):
            raise FipsError(f"--ring-size {ring}: give a power of two")
        for name, kw in ((self.domain, {"ring_capacity": ring}),
                         (self.bans_domain, {"ring_capacity": 16 << 20, "max_record": 1024, "max_rings": 16})):
            try:
                d = _fips.Domain(name, self.shm_dir, create=2, **kw)
            except (_fips.FipsError, OSError) as e:
                if getattr(e, "code", None) == errno.EEXIST or getattr(e, "errno", None) == errno.EEXIST:
                    raise FipsError(f"domain {name!r} already exists in {self.shm_dir}: another demo is running, "
                                    "or give --domain") from None
                raise FipsError(f"cannot create domain {name!r} in {self.shm_dir}: {e}") from None
            self.created.append(name)
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
        from fipstop.ring import snapshot_domain

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
        for name, p in self.procs.items():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.collector is not None:
            self.collector.stop()

    def cleanup(self) -> None:
        from fipstop import _fips

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
        for f in self.tmp.iterdir():
            f.unlink(missing_ok=True)
        self.tmp.rmdir()

    def summary(self, wall_s: float) -> dict:
        from fipstop.bans import BanEvent  # noqa: F401  (the wire type of what was collected)

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


def _dashboard(demo: Demo, interval: float) -> int:
    from fipstop.probes.bans import BansProbe
    from fipstop.probes.ring import RingProbe
    from fipstop.sources import LiveSource
    from fipstop.views.app import FipsTopApp

    probes = [RingProbe(shm_dir=demo.shm_dir, domains=[demo.domain, demo.bans_domain]),
              BansProbe(demo.shm_dir, demo.bans_domain)]
    app = FipsTopApp(LiveSource(probes, interval))
    app.run()
    return int(app.return_code or 0)


def run(args: argparse.Namespace) -> int:
    from fipstop.top import have_terminal

    headless = bool(args.headless)
    duration = args.duration
    if not headless and (not have_terminal() or os.environ.get("TERM") == "dumb"):
        print(f"fipstop demo: no terminal: running headless for {duration or NO_TTY_DURATION_S:g} s "
              "(open a terminal for the dashboard)", file=sys.stderr)
        headless = True
        duration = duration or NO_TTY_DURATION_S
    if headless and duration is None:
        duration = 20.0
    demo = Demo(args)
    old_int = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        demo.start(duration if headless else None)
        if not headless:
            return _dashboard(demo, args.interval or 1.0)
        t0 = time.monotonic()
        try:
            end = t0 + float(duration)
            while time.monotonic() < end:
                if demo.procs["producer"].poll() is not None:
                    break
                for name in ("ips", "slow"):
                    p = demo.procs.get(name)
                    if p is not None and p.poll() is not None:
                        raise FipsError(f"`fipstop {name}` exited ({p.returncode}): {demo.stderr_tail(name)}")
                time.sleep(0.1)
        except KeyboardInterrupt:
            pass
        demo.stop_producer()
        demo.wait_ips_caught_up()
        s = demo.summary(time.monotonic() - t0)
        print(json.dumps(s, indent=2) if args.json else format_summary(s))
        return 0
    finally:
        signal.signal(signal.SIGTERM, old_int)
        demo.cleanup()


if __name__ == "__main__":  # the slow consumer child
    if len(sys.argv) == 5 and sys.argv[1] == "--slow-child":
        raise SystemExit(slow_consumer_main(sys.argv[2], sys.argv[3], float(sys.argv[4])))
    raise SystemExit("usage: python -m fipstop.demo --slow-child DOMAIN SHM_DIR MS")
