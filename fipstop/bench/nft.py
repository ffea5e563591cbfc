"""``fipstop bench nft``: the nft action's reaction time, per way of reaching the kernel.

The real ban engine (:class:`fipstop.ips.run.Engine`, 4 action workers taking
every queued ban into one transaction) with the real nft action, in a network
namespace of the bench's own (``unshare(CLONE_NEWNET)``: nothing touches the
host's ruleset).  Ban decisions arrive as the IPS's readers make them: bursts
every few milliseconds (``paced``), and all at once (``burst``: 2^k attackers
crossing maxretry together).  Back-ends side by side, interleaved per round:

* ``old``: the engine and action as they were: ``nft -f -`` forked per batch and
  a ``queue.Queue`` taking one lock per job on each side;
* ``exec``: ``nft -f -`` forked per batch, with today's engine (:class:`JobQueue`);
* ``lib``: libnftables in-process (the action's default now);
* ``interactive``: one persistent ``nft -i`` fed a line per set and a sentinel.

Reaction = the moment ``Engine.triggers`` is called with the decision -> the
action returned (the transaction committed, so the element is in the set).
Oracles: every ban applied exactly once (elements handed to nft == bans ==
N, no duplicates, no failures) and the set lists exactly N elements at the end.
"""

from __future__ import annotations

import ctypes
import os
import queue
import shutil
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from fipstop.bench.results import Output, machine_info, publish
from fipstop.errors import FipsError
from fipstop.ips.actions import OK, BanJob, Nft
from fipstop.ips.nftlib import InteractiveNft, LibNft

CLONE_NEWNET = 0x40000000
BACKENDS = ("old", "exec", "lib", "interactive")
SPEC = "inet:fipstopbench:banned"


@dataclass(frozen=True)
class NftBenchConfig:
    output: Output
    bans: int = 10_000
    rate: float = 2000.0  # paced: ban decisions per second
    every_ms: float = 5.0  # paced: one reader burst this often
    rounds: int = 2
    backends: tuple[str, ...] = BACKENDS
    concurrency: int = 4


class _Counting:
    """The Nft action, counting the jobs handed to nft (the exactly-once oracle)."""

    def __init__(self, inner: Nft) -> None:
        self.inner, self.name, self.batches = inner, inner.name, True
        self.unban_argv = None
        self.jobs = self.calls = 0

    def setup(self) -> str:
        return OK

    def ban(self, jobs: list[BanJob]) -> list[str]:
        self.calls += 1
        self.jobs += len(jobs)
        return self.inner.ban(jobs)

    def unban(self, jobs: list[BanJob]) -> list[str]:
        return self.inner.unban(jobs)


class _OldQueue:
    """The engine's queue before :class:`fipstop.ips.run.JobQueue`: a ``queue.Queue`` of single
    jobs, a put per job, and the worker's get + get_nowait loop up to a batch."""

    def __init__(self) -> None:
        self.q: queue.Queue[BanJob | None] = queue.Queue()

    def put(self, item: BanJob | None) -> None:
        self.q.put(item)

    def put_many(self, items: list[BanJob]) -> None:
        for j in items:
            self.q.put(j)

    def qsize(self) -> int:
        return self.q.qsize()

    def get_batch(self, limit: int) -> list[BanJob] | None:
        job = self.q.get()
        if job is None:
            return None
        batch = [job]
        while len(batch) < limit:
            try:
                nxt = self.q.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                self.q.put(None)
                break
            batch.append(nxt)
        return batch


class _Pub:
    published = dropped = 0

    def publish_many(self, records: list[bytes]) -> None:
        self.published += len(records)


def _enter_netns() -> None:
    if os.geteuid() != 0:
        raise FipsError("bench nft: needs root (it makes a network namespace of its own)")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise FipsError(f"bench nft: unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}")


def _pcts(v: list[float]) -> dict[str, float | int]:
    s = sorted(v)
    n = len(s)
    if not n:
        return {"count": 0}
    return {"count": n, "p50": s[n // 2], "p99": s[min(n - 1, int(n * 0.99))], "max": s[-1],
            "mean": sum(s) / n}


def _set_count(lib: LibNft, set_: str) -> int:
    fam, table, _ = SPEC.split(":")
    r, out = lib.query(f"list set {fam} {table} {set_}")
    if r != OK:
        raise FipsError(f"bench nft: cannot list the set: {r}")
    body = out.split("elements = {", 1)
    if len(body) < 2:
        return 0
    return body[1].split("}", 1)[0].count("timeout")


def one_run(backend: str, pattern: str, cfg: NftBenchConfig, lib: LibNft) -> dict[str, Any]:
    from fipstop.ips import run as ips_run
    from fipstop.ips.jails import BUILTIN_JAILS, compile_jail

    fam, table, _ = SPEC.split(":")
    lib.run(f"add table {fam} {table}\ndelete table {fam} {table}\n")  # a fresh, empty set per run
    nft = shutil.which("nft") or "nft"
    action = Nft(SPEC, backend="exec" if backend in ("exec", "old") else "lib")
    if action.setup() != OK:
        raise FipsError(f"bench nft: setup failed: {action.setup()}")
    interactive = None
    if backend == "interactive":
        interactive = InteractiveNft(nft)
        action.runner = interactive  # type: ignore[assignment]  # run() only: setup is done
    counting = _Counting(action)
    spec = replace(BUILTIN_JAILS["named-refused"], bantime_s=3600.0)
    pub = _Pub()
    t_cpu = os.times()
    # no workers yet (concurrency 0): "old" swaps in the old queue before they start
    e = ips_run.Engine([spec], [compile_jail(spec)], counting, pub, 3, 0,  # type: ignore[arg-type]
                       lambda _s: None)
    if backend == "old":
        e.q = _OldQueue()  # type: ignore[assignment]
    e.workers = [threading.Thread(target=e._worker, name=f"ips-action-{i}", daemon=True)
                 for i in range(cfg.concurrency)]
    for w in e.workers:
        w.start()
    n = cfg.bans
    ips = [f"10.{96 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}" for i in range(n)]
    t0 = time.monotonic()
    if pattern == "burst":
        now = time.time_ns()
        e.triggers([("named-refused", ip, now, now, 5, None) for ip in ips])
    else:
        per = max(1, round(cfg.rate * cfg.every_ms / 1000))
        for k in range(0, n, per):
            due = t0 + (k / cfg.rate)
            while (d := due - time.monotonic()) > 0:
                time.sleep(d)
            now = time.time_ns()
            e.triggers([("named-refused", ip, now, now, 5, None) for ip in ips[k:k + per]])
    deadline = time.monotonic() + 120
    while (e.bans + e.bans_failed < n or e.q.qsize()) and time.monotonic() < deadline:
        time.sleep(0.005)
    wall = time.monotonic() - t0
    for _ in e.workers:
        e.q.put(None)
    for w in e.workers:
        w.join(timeout=10)
    if interactive is not None:
        interactive.close()
    t_end = os.times()
    react = [(a[3] - a[1]) / 1e6 for a in e.active.values()]
    in_set = _set_count(lib, "banned")
    cpu = (t_end.user + t_end.system + t_end.children_user + t_end.children_system
           - t_cpu.user - t_cpu.system - t_cpu.children_user - t_cpu.children_system)
    exactly_once = counting.jobs == n and e.bans == n and e.duplicates == 0 and e.failures == 0 and in_set == n
    return {"backend": backend, "via": interactive.name if interactive else action.backend, "pattern": pattern,
            "bans": e.bans, "failed": e.bans_failed, "failures": e.failures, "last_error": e.last_error,
            "duplicates": e.duplicates, "jobs_to_nft": counting.jobs, "transactions": counting.calls,
            "in_set": in_set, "exactly_once": exactly_once, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "reaction_ms": _pcts(react), "load": list(os.getloadavg()), "_raw": react}


def _row(r: dict[str, Any]) -> str:
    p = r["reaction_ms"]
    return (f"{r['pattern']:6} {r['backend']:11} p50 {p.get('p50', float('nan')):8.2f}  "
            f"p99 {p.get('p99', float('nan')):8.2f}  max {p.get('max', float('nan')):8.2f} ms  "
            f"{r['transactions']:5} tx  cpu {r['cpu_s']:.2f} s  in set {r['in_set']}/{r['bans']}  "
            f"{'ok' if r['exactly_once'] else 'NOT EXACTLY ONCE: ' + r['last_error']}")


def render(doc: dict[str, Any]) -> str:
    lines = [f"fipstop bench nft: {doc['config']['bans']} bans per run, load {doc['load_before']} -> "
             f"{doc['machine']['loadavg_at_end']}"]
    lines += [_row(r) for r in doc["runs"]]
    lines.append("summary (all rounds pooled, ms):")
    lines += [f"  {k:18} p50 {v['p50']:8.2f}  p99 {v['p99']:8.2f}  max {v['max']:8.2f}   "
              f"cpu {doc['cpu_us_per_ban'][k]:6.1f} us/ban" for k, v in doc["summary"].items()]
    return "\n".join(lines)


def main(cfg: NftBenchConfig, log=print) -> int:
    bad = [b for b in cfg.backends if b not in BACKENDS]
    if bad:
        raise FipsError(f"--backends {bad[0]!r}: not a back-end (one of {', '.join(BACKENDS)})")
    if cfg.bans < 1 or cfg.rate <= 0 or cfg.rounds < 1:
        raise FipsError("bench nft: --bans, --rate and --rounds must be positive")
    if shutil.which("nft") is None:
        raise FipsError("bench nft: the nft binary is not installed (Debian package nftables)")
    _enter_netns()
    try:
        lib = LibNft()
    except OSError as exc:
        raise FipsError(f"bench nft: libnftables does not load: {exc}") from None
    load_before = list(os.getloadavg())
    started = datetime.now(UTC).isoformat(timespec="seconds")
    runs = []
    for rnd in range(cfg.rounds):
        order = cfg.backends if rnd % 2 == 0 else tuple(reversed(cfg.backends))  # ABBA
        for pattern in ("paced", "burst"):
            for b in order:
                r = one_run(b, pattern, cfg, lib)
                r["round"] = rnd
                runs.append(r)
                log(_row(r))
    cpu: dict[str, float] = {}
    for r in runs:
        k = f"{r['pattern']}/{r['backend']}"
        cpu[k] = cpu.get(k, 0.0) + r["cpu_s"]
    pooled: dict[str, list[float]] = {}
    for r in runs:
        pooled.setdefault(f"{r['pattern']}/{r['backend']}", []).extend(r.pop("_raw"))
    summary = {k: _pcts(v) for k, v in pooled.items()}
    doc = {"kind": "nft", "command": cfg.output.command,
           "started": started,
           "config": {"bans": cfg.bans, "rate_per_s": cfg.rate, "burst_every_ms": cfg.every_ms,
                      "rounds": cfg.rounds, "action_workers": cfg.concurrency, "backends": list(cfg.backends)},
           "definition": "reaction = Engine.triggers() called with the decision -> the nft action returned "
                         "(transaction committed); summary = every round's bans pooled, per pattern/back-end",
           "load_before": load_before,
           "cpu_us_per_ban": {k: round(v * 1e6 / (cfg.bans * cfg.rounds), 1) for k, v in cpu.items()},
           "machine": machine_info(), "runs": runs, "summary": summary,
           "all_exactly_once": all(r["exactly_once"] for r in runs)}
    lib.close()
    publish("nft", doc, cfg.output, datetime.now(UTC), render, log)
    return 0 if doc["all_exactly_once"] else 1
