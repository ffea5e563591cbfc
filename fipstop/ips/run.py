"""``fipstop ips`` at run time: reader threads, the ban engine, actions,
ban events and the stats file.

Threads:
  * N readers: ``consumer.read`` -> ``_ipsfast.feed`` (C, GIL released while
    matching) -> ``batch.release``; ban triggers go to the engine.  A dry-run
    ban completes right there, on the reader (lowest time-to-ban).
  * action workers (--action-concurrency) for nft/command: nft takes every
    queued ban into one ``nft -f -`` transaction.
  * one scheduler: retries with backoff, unbans after bantime, table sweeps,
    the stats file once per second.
"""

from __future__ import annotations

import gc
import heapq
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fipstop.bans import BANS_DOMAIN, MAX_EVENT_BYTES, IpsTally, encode_tally, event_parts, wire_str
from fipstop.bindq import record_text
from fipstop.errors import FipsError
from fipstop.ips.actions import OK, ActionOptions, BanJob, Command, DryRun, Nft, make_action
from fipstop.ips.control import ControlServer, default_path
from fipstop.ips.jails import JailOptions, JailSpec, compile_jail, protected_nets, select_jails
from fipstop.ips.ranges import RangeCounter, RangeOptions
from fipstop.ips.stats import IpsStats, JailStats, LatencyWindow, write_atomic
from fipstop.ring import pick_domain
from fipstop.sigflag import SignalFlag
from fipstop.textsafe import escape_text

# An idle reader sleeps 0.2 ms, doubling up to 2 ms while nothing arrives: a
# burst is seen within 2 ms, and an idle IPS does not burn a core polling.
IDLE_SLEEP_MIN_S = 0.0002
IDLE_SLEEP_MAX_S = 0.002
# Reader 0 alone follows a stream it keeps up with; the others wake every
# 5 ms and stay only while there is a backlog (full batches).  Several
# readers polling a light stream cost 3x the CPU in GIL hand-offs and
# context switches, and on a 2-CPU machine that CPU is what the rest lacks.
SECONDARY_SLEEP_S = 0.005
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
#: bans per action call (one nft transaction): ~5-10 ms through libnftables on this machine
BATCH_MAX = 512
#: how often the IPS publishes its tally (:class:`fipstop.bans.IpsTally`) when a counter changed
TALLY_EVERY_S = 0.25


class Publisher:
    """Ban events into their own FIPS domain (created if absent)."""

    def __init__(self, name: str | None, shm_dir: str | None) -> None:
        self.published = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._prod = self._dom = None
        if not name:
            return
        from fipstop import _fips

        try:
            # 4 MiB a ring holds ~20 k events: most of a 2^16-attacker burst reaches a
            # consumer that keeps up; what does not fit is counted (events_dropped).
            self._dom = _fips.Domain(name, shm_dir, create=True, max_rings=16, max_consumers=16,
                                     ring_capacity=1 << 22, max_record=max(MAX_EVENT_BYTES, 4096))
            self._prod = _fips.Producer(self._dom)
        except _fips.FipsError as exc:
            raise FipsError(f"ips: bans domain {name}: {exc}") from None

    def publish_many(self, records: list[bytes]) -> None:
        if self._prod is None or not records:
            return
        try:
            ok = self._prod.log_batch(records)
        except Exception:  # a full or closed domain must never stop banning
            ok = 0
        with self._lock:
            self.published += ok
            self.dropped += len(records) - ok

    def publish_tally(self, record: bytes) -> None:
        """The IPS's own counters (:class:`fipstop.bans.IpsTally`); not counted as a ban event."""
        if self._prod is None:
            return
        try:
            self._prod.log_batch([record])
        except Exception:  # never stops banning
            pass

    def close(self) -> None:
        for o in (self._prod, self._dom):
            if o is not None:
                try:
                    o.close()
                except Exception:
                    pass


class JobQueue:
    """The action workers' queue: a burst goes in under one lock and a worker takes
    its whole batch under one lock.  ``queue.Queue`` took a lock per job on both
    sides, and with 10 000 bans at once the reader's puts, contending with four
    workers' gets, cost more than the nft transactions (``fipstop bench nft``).
    ``None`` is a worker's stop, left in place for the worker after it."""

    def __init__(self) -> None:
        self._d: deque[BanJob | None] = deque()
        self._cv = threading.Condition(threading.Lock())

    def put(self, item: BanJob | None) -> None:
        with self._cv:
            self._d.append(item)
            self._cv.notify()

    def put_many(self, items: list[BanJob]) -> None:
        if items:
            with self._cv:
                self._d.extend(items)
                self._cv.notify(len(items))

    def qsize(self) -> int:
        return len(self._d)

    def get_batch(self, limit: int) -> list[BanJob] | None:
        """Up to ``limit`` jobs (waiting for the first), or None: stop."""
        with self._cv:
            d = self._d
            while not d:
                self._cv.wait()
            if d[0] is None:
                d.popleft()
                return None
            out: list[BanJob] = []
            while d and len(out) < limit and d[0] is not None:
                out.append(d.popleft())  # type: ignore[arg-type]  # not None: checked
            return out


class Engine:
    """Ban bookkeeping shared by every thread (one lock).

    Bans come in bursts (2^16 attackers crossing maxretry within a fraction
    of a second), so everything per ban is batched: one lock, one C call that
    formats every ban event, one ``log_batch`` into the bans domain.  Unbans
    are due in ban order within a jail (bantime is per jail), so each jail
    keeps a FIFO of expiries instead of a heap.
    """

    def __init__(self, specs: list[JailSpec], jails: list[Any], action: DryRun | Nft | Command, publisher: Publisher,
                 retries: int, concurrency: int, log: Callable[[str], None]) -> None:
        from fipstop import _ipsfast

        self._fmt = _ipsfast.format_events
        self._parts = event_parts
        self.specs = {s.name: s for s in specs}
        self.jails = {j.name: j for j in jails}
        self.jail_json = {s.name: wire_str(s.name) for s in specs}
        self.bantime = {s.name: s.bantime_s for s in specs}
        self.action = action
        self.pub = publisher
        self.retries = max(0, retries)
        self.log = log
        self.verbose = log is not _quiet
        self.lock = threading.Lock()
        # (jail, ip) -> (first_ns, trigger_ns, hits, ban_ns)
        self.active: dict[tuple[str, str], tuple[int, int, int, int]] = {}
        self.pending: set[tuple[str, str]] = set()
        # per jail, in ban order: (due on the monotonic clock, ip, ban_ns of the ban it ends)
        self.expiry: dict[str, deque[tuple[float, str, int]]] = {s.name: deque() for s in specs}
        self.retry_heap: list[tuple[float, int, BanJob]] = []
        self._seq = 0
        self.q = JobQueue()
        self.ttb = LatencyWindow()
        self.reaction = LatencyWindow()
        # the reaction in two parts, to tell a reader that falls behind from an action that is slow
        self.reaction_read = LatencyWindow()
        self.reaction_action = LatencyWindow()
        self.bans = self.unbans = self.bans_failed = self.duplicates = 0
        # per jail: [bans, in force, failed], for the tally the bans probe reads
        self.per_jail: dict[str, list[int]] = {s.name: [0, 0, 0] for s in specs}
        self.failures = self.retried = 0
        self.last_error = ""
        self._ok_parts = {k: event_parts(k, action.name) for k in ("ban", "unban")}
        # a ban event carries its jail's bantime (the dashboard shows when it ends): one tail per jail
        self._ban_tail = {s.name: event_parts("ban", action.name, bantime_ms=int(round(s.bantime_s * 1000)))[1]
                          for s in specs}
        self._logged_s = 0
        self._logged_n = 0
        self._unlogged = 0
        self.unban_hooks: list[Callable[[str, str], None]] = []  # (jail, ip) when a ban ends or fails
        self.inline = action.name == "dry-run"
        self.inline_unban = not isinstance(action, Command) or action.unban_argv is None
        self.workers = [] if self.inline else [
            threading.Thread(target=self._worker, name=f"ips-action-{i}", daemon=True) for i in range(concurrency)]
        if not self.inline:
            r = action.setup()
            if r != OK:
                self._note_failure(r)
        for w in self.workers:
            w.start()

    # -- from reader threads -----------------------------------------------------------------
    def triggers(self, trig: list[tuple[str, str, int, int, int, tuple | None]]) -> None:
        """Ban triggers (jail, ip, first_ns, trigger_ns, hits, data) from a reader thread."""
        if self.inline:
            now_ns = time.time_ns()
            self._banned(trig, now_ns, [now_ns] * len(trig))
            return
        # in slices of one batch: the workers start on the first while the rest are made
        for k in range(0, len(trig), BATCH_MAX):
            jobs = []
            with self.lock:
                # the hand-off: after the lock (a wait for it is the reader's, not the action's)
                now_ns = time.time_ns()
                for jail, ip, first_ns, trigger_ns, hits, data in trig[k:k + BATCH_MAX]:
                    key = (jail, ip)
                    if key in self.active or key in self.pending:
                        self.duplicates += 1
                        continue
                    self.pending.add(key)
                    jobs.append(BanJob(jail, ip, first_ns, trigger_ns, hits, self.bantime[jail], data=data,
                                       queued_ns=now_ns))
            self.q.put_many(jobs)

    def _banned(self, trig: list[tuple[str, str, int, int, int, tuple | None]], now_ns: int,
                queued: list[int]) -> None:
        """Bans that took effect at now_ns: bookkeeping, events, log (batched; ~2 µs a ban).
        ``queued[i]``: when trig[i] was handed to the engine (0: not known, left out of the split)."""
        mono = time.monotonic()
        with self.lock:
            active, pending = self.active, self.pending
            if pending:
                for t in trig:
                    pending.discard((t[0], t[1]))
            keep = [(t, q) for t, q in zip(trig, queued, strict=True) if (t[0], t[1]) not in active]
            fresh = [t for t, _q in keep]
            self.duplicates += len(trig) - len(fresh)
            if not fresh:
                return
            for t in fresh:
                active[(t[0], t[1])] = (t[2], t[3], t[4], now_ns)
            if len(self.expiry) == 1:
                (jail, dq), = self.expiry.items()
                due = mono + self.bantime[jail]
                dq.extend([(due, t[1], now_ns) for t in fresh])
            else:
                for t in fresh:
                    self.expiry[t[0]].append((mono + self.bantime[t[0]], t[1], now_ns))
            # a latency that comes out negative (the wall clock stepped back) is unknown: left out of its
            # histogram (whose count then says fewer than bans), never counted as ~0 ms.  Not first <=
            # trigger: the first hit is the first *read*, and rings of several threads are read in turn,
            # so a first hit may be stamped after the crossing one with no clock step at all
            self.ttb.add_many([(now_ns - t[2]) * 1e-6 for t in fresh if t[2] <= now_ns])
            self.reaction.add_many([(now_ns - t[3]) * 1e-6 for t in fresh if t[3] <= now_ns])
            split = [(q - t[3], now_ns - q) for t, q in keep if q and t[3] <= q <= now_ns]
            self.reaction_read.add_many([a * 1e-6 for a, _b in split])
            self.reaction_action.add_many([b * 1e-6 for _a, b in split])
            self.bans += len(fresh)
            if len(self.per_jail) == 1:
                (c,) = self.per_jail.values()
                c[0] += len(fresh)
                c[1] += len(fresh)
            else:
                for t in fresh:
                    c = self.per_jail[t[0]]
                    c[0] += 1
                    c[1] += 1
        head = self._ok_parts["ban"][0]
        tails = self._ban_tail
        if len(tails) == 1:
            self.pub.publish_many(self._fmt(fresh, head, self.jail_json, now_ns, next(iter(tails.values()))))
        else:
            by_jail: dict[str, list] = {}
            for t in fresh:
                by_jail.setdefault(t[0], []).append(t)
            for jail, group in by_jail.items():
                self.pub.publish_many(self._fmt(group, head, self.jail_json, now_ns, tails[jail]))
        if self.verbose:
            self._log_bans(fresh, now_ns)

    def _log_bans(self, fresh, now_ns: int) -> None:
        """At most 20 ban lines a second on stderr, then a count: a flood must not flood the terminal."""
        sec = now_ns // 1_000_000_000
        if sec != self._logged_s:
            if self._unlogged:
                self.log(f"... and {self._unlogged} more bans")
            self._logged_s, self._logged_n, self._unlogged = sec, 0, 0
        for jail, ip, first_ns, _trigger_ns, hits, data in fresh:
            if self._logged_n >= 20:
                self._unlogged += 1
                continue
            self._logged_n += 1
            extra = "".join(f" {escape_text(k)}={escape_text(v[:64])}" for k, v in (data or ())[:4])
            self.log(f"ban {ip} jail={escape_text(jail)} hits={hits} "
                     f"time-to-ban={(now_ns - first_ns) / 1e6:.1f}ms action={self.action.name}{extra}")

    # -- action workers -----------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            batch = self.q.get_batch(BATCH_MAX if self.action.batches else 1)
            if batch is None:
                return
            for kind in ("ban", "unban"):
                group = [j for j in batch if j.kind == kind]
                if group:
                    self._execute(group)

    def _execute(self, group: list[BanJob]) -> None:
        kind = group[0].kind
        try:
            res = self.action.ban(group) if kind == "ban" else self.action.unban(group)
        except Exception as exc:  # an action bug must not kill the worker
            res = [f"{type(exc).__name__}: {exc}"] * len(group)
        self._finish(group, res)

    def _note_failure(self, err: str) -> None:
        with self.lock:
            self.failures += 1
            self.last_error = err

    def _finish(self, jobs: list[BanJob], results: list[str]) -> None:
        now_ns = time.time_ns()
        mono = time.monotonic()
        ok_bans: list[BanJob] = []
        ok_unbans: list[BanJob] = []
        for job, res in zip(jobs, results):
            if res == OK:
                (ok_bans if job.kind == "ban" else ok_unbans).append(job)
                continue
            job.attempts += 1
            job.errors.append(res)
            with self.lock:
                self.failures += 1
                self.last_error = res
                if job.attempts <= self.retries:
                    self.retried += 1
                    self._seq += 1
                    due = mono + BACKOFF_S[min(job.attempts - 1, len(BACKOFF_S) - 1)]
                    heapq.heappush(self.retry_heap, (due, self._seq, job))
                    continue
            # retries exhausted
            if job.kind == "ban":
                with self.lock:
                    self.bans_failed += 1
                    self.per_jail[job.jail][2] += 1
                    self.pending.discard((job.jail, job.ip))
                self._forget(job.jail, job.ip)
                self._publish_one(job, now_ns, res)
                self.log(f"ban {job.ip} jail={escape_text(job.jail)} FAILED after {job.attempts} attempts: "
                         f"{escape_text(res)}")
            else:
                self._unbanned([(job.jail, job.ip)], now_ns, res)
        if ok_bans:
            self._banned([(j.jail, j.ip, j.first_ns, j.trigger_ns, j.hits, j.data) for j in ok_bans], now_ns,
                         [j.queued_ns for j in ok_bans])
        if ok_unbans:
            self._unbanned([(j.jail, j.ip) for j in ok_unbans], now_ns, OK)

    def _unbanned(self, keys: list[tuple[str, str]], now_ns: int, res: str,
                  expect: tuple[int, int, int, int] | None = None) -> int:
        """The bans of ``keys`` ended (``expect``: only if it is still that ban); how many did."""
        trig = []
        with self.lock:
            for key in keys:
                if expect is not None and self.active.get(key) != expect:
                    continue
                a = self.active.pop(key, None)
                if a is not None:
                    trig.append((key[0], key[1], a[0], a[1], a[2]))
                    self.per_jail[key[0]][1] -= 1
            self.unbans += len(trig)
        for jail, ip, *_ in trig:
            self._forget(jail, ip)
        if trig:
            head, tail = self._ok_parts["unban"] if res == OK else self._parts("unban", self.action.name, res)
            self.pub.publish_many(self._fmt(trig, head, self.jail_json, now_ns, tail))
        return len(trig)

    def _forget(self, jail: str, ip: str) -> None:
        try:
            self.jails[jail].unban(ip)
        except (KeyError, ValueError):
            pass  # a network ("10.0.0.0/24") is not in the address table
        for hook in self.unban_hooks:
            hook(jail, ip)

    def _publish_one(self, job: BanJob, now_ns: int, res: str) -> None:
        head, tail = self._parts(job.kind, self.action.name, res)
        self.pub.publish_many(self._fmt([(job.jail, job.ip, job.first_ns, job.trigger_ns, job.hits, job.data)], head,
                                        self.jail_json, now_ns, tail))

    # -- scheduler ----------------------------------------------------------------------------
    def tick(self) -> None:
        mono = time.monotonic()
        retries: list[BanJob] = []
        due_unbans: list[tuple[str, str]] = []
        with self.lock:
            while self.retry_heap and self.retry_heap[0][0] <= mono:
                retries.append(heapq.heappop(self.retry_heap)[2])
            active = self.active
            for jail, dq in self.expiry.items():
                while dq and dq[0][0] <= mono:
                    _due, ip, ban_ns = dq.popleft()
                    a = active.get((jail, ip))
                    # lifted by hand (fipstop ips-client unban), maybe banned again since: not this expiry's ban
                    if a is not None and a[3] == ban_ns:
                        due_unbans.append((jail, ip))
        for job in retries:
            if self.inline:
                self._execute([job])
            else:
                self.q.put(job)
        if due_unbans:
            if self.inline_unban:
                self._unbanned(due_unbans, time.time_ns(), OK)
            else:
                with self.lock:
                    jobs = [BanJob(j, ip, a[0], a[1], a[2], self.bantime[j], kind="unban")
                            for j, ip in due_unbans if (a := self.active.get((j, ip))) is not None]
                self.q.put_many(jobs)
        now_ns = time.time_ns()
        for j in self.jails.values():
            j.expire(now_ns, 8192)

    # -- the control socket (fipstop.ips.control) -----------------------------------------------
    def unban_now(self, jail: str, ip: str, who: str = "") -> tuple[bool, str]:
        """Lift one ban before its bantime: the action's unban (nft: the element is deleted), then what
        an expiry does (the address forgotten, so new failures ban it again; an unban event)."""
        key = (jail, ip)
        with self.lock:
            if jail not in self.specs:
                return False, f"no jail {jail!r} in this fipstop ips (jails: {', '.join(sorted(self.specs))})"
            a = self.active.get(key)
            if a is None:
                if key in self.pending:
                    return False, f"{ip} is being banned in {jail} right now (the action is running): try again"
                return False, f"{ip} is not banned in {jail}"
        if isinstance(self.action, Command) and self.action.unban_argv is None:
            return False, ("--action command without --unban-command: nothing here can undo what the ban command "
                           "did, so the ban stays")
        job = BanJob(jail, ip, a[0], a[1], a[2], self.bantime[jail], kind="unban")
        try:
            res = self.action.unban([job])[0]
        except Exception as exc:  # an action bug: said, the ban stays
            res = f"{type(exc).__name__}: {exc}"
        if res != OK:
            self._note_failure(res)
            return False, f"unban of {ip} in {jail} failed ({self.action.name}): {res}; the ban stays in force"
        still = self._unbanned([key], time.time_ns(), OK, expect=a) == 1  # else its bantime ended meanwhile
        self.log(f"unban {ip} jail={escape_text(jail)} action={self.action.name} (control socket{who})")
        return True, f"unbanned {ip} in {jail}" + ("" if still else " (its bantime had just ended)")

    def stop(self) -> None:
        for _ in self.workers:
            self.q.put(None)
        for w in self.workers:
            w.join(timeout=5)


@dataclass(frozen=True)
class IpsOptions:
    """Everything ``fipstop ips`` runs with (its options, see fipstop/commands/ips.py)."""

    jails: JailOptions = field(default_factory=JailOptions)
    action: ActionOptions = field(default_factory=ActionOptions)
    domain: str | None = None  # None: the only domain in the shm dir
    shm_dir: str | None = None
    consumer: str | None = None  # None: ips-PID
    readers: int = 2
    batch: int = 1024
    action_concurrency: int = 4
    action_retries: int = 3
    bans_domain: str | None = BANS_DOMAIN  # None: publish no ban events
    stats_json: str | None = None  # "-": JSON lines on stdout
    duration: float = 0.0  # 0: until stopped
    quiet: bool = False
    keep: bool = False
    ranges: RangeOptions = field(default_factory=RangeOptions)
    control: str | None = None  # the control socket (fipstop.ips.control); None: its default path
    no_control: bool = False


class Ips:
    def __init__(self, args: IpsOptions) -> None:
        from fipstop import _fips

        self.args = args
        self.specs = select_jails(args.jails)
        compiled = [s.filter.compiled() for s in self.specs]
        self.jails = [compile_jail(s, cf) for s, cf in zip(self.specs, compiled)]
        self.filter_warnings = [f"jail {escape_text(s.name)}: {escape_text(w)}"
                                for s, cf in zip(self.specs, compiled) for w in cf.warnings]
        self.action = make_action(args.action)
        # per jail: network counting once its address table overflows (None: a stateful jail, whose lines
        # cannot be matched one by one, or --no-ranges)
        self.ranges: list[RangeCounter | None] = [
            RangeCounter(s.name, s.maxretry, s.findtime_s, s.mode, s.max_tracked,
                         s.ignoreip + protected_nets(s.ignoreself), args.ranges)
            if args.ranges.enabled and not cf.stateful else None for s, cf in zip(self.specs, compiled)]
        self._evictions = [0] * len(self.jails)
        self._pressure_until = [0.0] * len(self.jails)
        self._next_range_check = 0.0
        self.domain_name = pick_domain(args.domain, args.shm_dir)
        self.consumer_name = args.consumer or f"ips-{os.getpid()}"
        if args.bans_domain is not None and args.bans_domain == self.domain_name:
            raise FipsError(f"ips: --bans-domain {args.bans_domain} is the domain being consumed")
        try:
            self.domain = _fips.Domain(self.domain_name, args.shm_dir, create=False)
        except _fips.FipsError as exc:
            raise FipsError(f"ips: {exc}") from None
        # everything that can fail comes before registering: a failed start leaves no consumer behind
        self.pub = Publisher(args.bans_domain, args.shm_dir)
        self.log = _quiet if args.quiet else _say
        self.engine = Engine(self.specs, self.jails, self.action, self.pub, args.action_retries,
                             args.action_concurrency, self.log)
        by_jail = {s.name: r for s, r in zip(self.specs, self.ranges) if r is not None}
        if by_jail:
            self.engine.unban_hooks.append(lambda jail, ip: by_jail[jail].forget(ip) if jail in by_jail else None)
        self.control_note = ""
        try:
            self.control = self._open_control()
        except FipsError:
            self.engine.stop()
            self.pub.close()
            raise
        try:
            self.consumer = _fips.Consumer(self.domain, self.consumer_name)
        except _fips.FipsError as exc:
            self.engine.stop()
            self.pub.close()
            if self.control is not None:
                self.control.close()
            raise FipsError(f"ips: {exc}") from None
        self.stop = threading.Event()  # the readers' and the main loop's stop
        self.term = SignalFlag()  # SIGTERM/SIGINT: a signal handler may not set an Event
        self.error: str | None = None
        self.lock = threading.Lock()
        self.records = self.bytes = self.lost = 0
        self.torn = 0  # records of batches overwritten while matched after an eviction (not acted on)
        self.rejoins = 0
        # the domain shrank under the mapping (libfips: zero pages and ETRUNC, never SIGBUS):
        # readers park, the main loop reopens the domain when a valid one is back under the name
        self.cut = threading.Event()
        self.parked = self.running = 0
        self.truncations = self.reopens = 0
        self.findings: list[str] = []
        self._reopen_note = ""
        self._cut_ident: tuple[int, int, int] | None = None
        self.started_ns = time.time_ns()
        self._tally_key: tuple[int, ...] = ()
        self._tally_at = 0.0
        self._prev = (time.monotonic(), 0)
        self.rate = 0.0

    def _open_control(self) -> ControlServer | None:
        """The control socket: --control PATH must open (else the IPS does not start); the default
        path is given up with one warning line (banning matters more than unbanning by hand)."""
        args = self.args
        if args.no_control:
            return None
        path = args.control or default_path(args.bans_domain, args.shm_dir)
        if path is None:
            self.control_note = ("no control socket: $XDG_RUNTIME_DIR is not set (give --control PATH); "
                                 "`fipstop ips-client` cannot reach this IPS")
            return None
        try:
            return ControlServer(path, self, self.log)
        except FipsError as exc:
            if args.control:
                raise FipsError(f"ips: {exc.message}") from None
            self.control_note = f"no control socket: {exc.message}"
            return None

    @property
    def control_path(self) -> str:
        return self.control.path if self.control is not None else ""

    def control_status(self) -> dict[str, Any]:
        e = self.engine
        with e.lock:
            active = len(e.active)
            jails = {name: {"bans": c[0], "active": c[1], "failed": c[2]} for name, c in e.per_jail.items()}
        return {"pid": os.getpid(), "action": self.action.name, "domain": self.domain_name,
                "bans_domain": self.args.bans_domain or "", "active": active, "jails": jails}

    def control_unban(self, jail: str, ip: str) -> tuple[bool, str]:
        # the tally follows from the main loop within TALLY_EVERY_S (its counters changed)
        return self.engine.unban_now(jail, ip)

    def reader(self, index: int = 0) -> None:
        with self.lock:
            self.running += 1
        try:
            self._read_loop(index)
        finally:
            with self.lock:
                self.running -= 1

    def _read_loop(self, index: int) -> None:
        from fipstop import _fips, _ipsfast

        jails = tuple(self.jails)
        n = self.args.batch
        feed = _ipsfast.feed
        trig_fn = self.engine.triggers
        idle = IDLE_SLEEP_MIN_S
        while not self.stop.is_set():
            if self.cut.is_set():
                self._park()
                continue
            cons = self.consumer
            try:
                b = cons.read(n)
            except _fips.FipsError as exc:
                if exc.code == _fips.ETRUNC:
                    self._truncated()
                    continue
                if exc.code in (_fips.EEVICTED, _fips.ECLOSED) and self._rejoin(cons):
                    continue
                self.error = f"ips: consumer {self.consumer_name}: {exc}"
                self.stop.set()
                return
            if b is None:
                time.sleep(idle if index == 0 else SECONDARY_SLEEP_S)
                idle = min(idle * 2, IDLE_SLEEP_MAX_S)
                continue
            idle = IDLE_SLEEP_MIN_S
            backlog = b.count >= n
            try:
                trig = feed(b, jails)
                cnt, lost = b.count, b.lost
                rtrig = self._range_triggers(b) if self.ranges_on else []
            except Exception as exc:  # a bug, not bad input: stop loudly rather than stall
                self.error = f"ips: reader failed: {type(exc).__name__}: {exc}"
                self.stop.set()
                b.release()
                return
            try:
                b.release()
            except _fips.FipsError as exc:
                if exc.code == _fips.ETRUNC:  # read while the file shrank: zeros, act on none of it
                    self._truncated()
                    continue
                # Evicted while matching (stalled past the domain's grace).  ETORN: the producer
                # may have overwritten the batch under the matcher, so its lines may be spliced
                # from other records: ban on none of them.  EEVICTED: they were intact.
                if exc.code == _fips.ETORN:
                    trig = rtrig = []
                    with self.lock:
                        self.torn += cnt
                    cnt = lost = 0
                if not self._rejoin(cons):
                    return
            with self.lock:
                self.records += cnt
                self.lost += lost
            if rtrig:
                trig = trig + rtrig
            if trig:
                try:
                    trig_fn(trig)
                except Exception as exc:  # banning must go on for the next batch
                    self.engine._note_failure(f"{type(exc).__name__}: {exc}")
                    self.log(f"ban bookkeeping failed: {type(exc).__name__}: {exc}")
            if index and not backlog:
                time.sleep(SECONDARY_SLEEP_S)

    def _rejoin(self, stale) -> bool:
        """After an eviction, open the consumer again by name: it resumes after what it released
        (what was overwritten meanwhile is counted as lost in the domain).  One reader does it;
        the others pick up the new handle.  False (and stop) if that fails."""
        from fipstop import _fips

        with self.lock:
            if self.consumer is not stale:
                return True
            try:
                stale.close()  # frees the entry for this process: a rejoin needs the old handle gone
            except _fips.FipsError:
                pass
            try:
                self.consumer = _fips.Consumer(self.domain, self.consumer_name)
            except _fips.FipsError as exc:
                self.error = f"ips: consumer {self.consumer_name}: evicted, and rejoining failed: {exc}"
                self.stop.set()
                return False
            self.rejoins += 1
        self.log(f"consumer {self.consumer_name} was evicted (stalled past the domain's grace period); "
                 "rejoined, records overwritten meanwhile are counted as lost")
        return True

    @property
    def ranges_on(self) -> bool:
        return any(r is not None for r in self.ranges)

    def _range_triggers(self, b) -> list:
        """A jail whose table evicted in the last findtime counts this batch per network too.
        Its eviction counter is looked at every 50 ms (a stats() call is ~5 us: per batch it
        would cost ~1 % of a busy reader), so counting per network starts within 50 ms."""
        now = time.monotonic()
        if now >= self._next_range_check:
            self._next_range_check = now + 0.05
            for i, (jail, rc) in enumerate(zip(self.jails, self.ranges)):
                if rc is None:
                    continue
                ev = jail.stats()["evictions"]
                if ev <= self._evictions[i]:
                    continue
                with self.lock:
                    first = self._pressure_until[i] == 0.0
                    self._evictions[i] = max(self._evictions[i], ev)
                    self._pressure_until[i] = now + max(10.0, self.specs[i].findtime_s)
                if first:
                    self._finding(
                        f"jail {escape_text(jail.name)}: more addresses than --max-tracked {self.specs[i].max_tracked} "
                        f"(evicted before reaching maxretry): counting per /{rc.opt.v4_prefix} and "
                        f"/{rc.opt.v6_prefix} networks too, a network banned at {rc.need_hits} hits from "
                        f"{rc.need_addrs} addresses")
        out: list = []
        for i, (jail, rc) in enumerate(zip(self.jails, self.ranges)):
            if rc is None or now >= self._pressure_until[i]:
                continue
            match = jail.match
            hits = []
            for rec in b:
                res, ip = match(record_text(rec.data, rec.flags))  # a native named's binary record: its line
                if res == "hit" and ip is not None:
                    hits.append((ip, rec.ts_ns))
            for net, first_ns, trigger_ns, n in rc.count(hits):
                out.append((jail.name, net, first_ns, trigger_ns, n, None))
        return out

    def _range_totals(self) -> dict[str, int]:
        tot = {"range_bans": 0, "range_tracked": 0, "range_evictions": 0, "range_refused": 0}
        for rc in self.ranges:
            if rc is not None:
                for k, v in rc.stats().items():
                    if k in tot:
                        tot[k] += v
        return tot

    def _finding(self, line: str) -> None:
        with self.lock:
            self.findings.append(line)
            del self.findings[:-8]
        _say(line)  # a finding: said even with --quiet

    def _truncated(self) -> None:
        """The domain shrank under the mapping: say so once, park the readers
        (the main loop reopens it); bans in force and unbans go on."""
        from fipstop.ring import domain_path, truncated_line

        with self.lock:
            if self.cut.is_set():
                return
            self.cut.set()
            self.truncations += 1
            self._cut_ident = _ident(domain_path(self.domain_name, self.args.shm_dir))
            line = escape_text(truncated_line(self.domain_name, domain_path(self.domain_name, self.args.shm_dir)))
            line += "; bans in force stay, consuming again once a valid domain is back under the name"
        self._finding(line)

    def _park(self) -> None:
        with self.lock:
            self.parked += 1
        try:
            while self.cut.is_set() and not self.stop.is_set():
                time.sleep(0.05)
        finally:
            with self.lock:
                self.parked -= 1

    def _reopen(self) -> None:
        """Once every reader is parked: drop the truncated domain and open the
        one now under the name, if it is valid (else say why, once per reason)."""
        from fipstop import _fips
        from fipstop.ring import domain_path

        with self.lock:
            if self.parked < self.running:
                return
        ident = _ident(domain_path(self.domain_name, self.args.shm_dir))
        if ident is None or ident == self._cut_ident:
            return  # still the file that shrank (or none yet): nothing new to open
        for o in (self.consumer, self.domain):
            try:
                o.close()
            except Exception:
                pass
        try:
            dom = _fips.Domain(self.domain_name, self.args.shm_dir, create=False)
        except _fips.FipsError as exc:
            note = escape_text(str(exc))
            if note != self._reopen_note:
                self._reopen_note = note
                _say(f"domain {escape_text(self.domain_name)} not reopened yet: {note}")
            return
        try:
            cons = _fips.Consumer(dom, self.consumer_name)
        except _fips.FipsError as exc:
            dom.close()
            note = escape_text(str(exc))
            if note != self._reopen_note:
                self._reopen_note = note
                _say(f"domain {escape_text(self.domain_name)} reopened, consumer not: {note}")
            return
        with self.lock:
            self.domain, self.consumer = dom, cons
            self.reopens += 1
            self._reopen_note = ""
            self.cut.clear()
        _say(f"domain {escape_text(self.domain_name)} reopened: consuming again as {escape_text(self.consumer_name)}")

    def snapshot(self) -> IpsStats:
        e = self.engine
        mono = time.monotonic()
        with self.lock:
            records, lost = self.records, self.lost
        t0, r0 = self._prev
        if mono - t0 >= 0.5:
            self.rate = (records - r0) / (mono - t0)
            self._prev = (mono, records)
        js = {j.name: j.stats() for j in self.jails}
        first = next(iter(js.values()))
        tot = lambda k: sum(s[k] for s in js.values())  # noqa: E731
        with e.lock:
            active, pending = len(e.active), len(e.pending)
            counters = (e.bans, e.unbans, e.bans_failed, e.duplicates, e.failures, e.retried, e.last_error)
            ttb, reaction = e.ttb.percentiles(), e.reaction.percentiles()
            read_part, action_part = e.reaction_read.percentiles(), e.reaction_action.percentiles()
        bans, unbans, failed, dups, failures, retried, last_error = counters
        now_ns = time.time_ns()
        return IpsStats(
            pid=os.getpid(), domain=self.domain_name, consumer=self.consumer_name, action=self.action.name,
            started_ns=self.started_ns, updated_ns=now_ns, uptime_s=round((now_ns - self.started_ns) / 1e9, 3),
            records=records, bytes=first["bytes"], records_per_s=round(self.rate, 1), lost=lost,
            truncated=first["truncated"], matched=tot("matched"), ignored=tot("ignored"), not_ip=tot("not_ip"),
            dns=tot("dns"), nofail=tot("nofail"), pending=tot("pending"), dated=tot("dated"), nomatch=tot("nomatch"),
            bans=bans, unbans=unbans, active_bans=active, bans_failed=failed,
            duplicate_triggers=dups, tracked=tot("tracked"), evictions=tot("evictions"), expired=tot("expired"),
            max_tracked=self.args.jails.max_tracked, action_failures=failures, action_retries=retried,
            action_pending=pending + e.q.qsize(), last_action_error=last_error,
            events_published=self.pub.published, events_dropped=self.pub.dropped,
            **self._range_totals(), domain_truncations=self.truncations, domain_reopens=self.reopens,
            findings=tuple(self.findings), control=self.control_path,
            time_to_ban_ms=ttb,
            reaction_ms=reaction, reaction_read_ms=read_part, reaction_action_ms=action_part,
            jails={s.name: JailStats(matched=js[s.name]["matched"], ignored=js[s.name]["ignored"],
                                     not_ip=js[s.name]["not_ip"], dns=js[s.name]["dns"], nofail=js[s.name]["nofail"],
                                     pending=js[s.name]["pending"], bans=js[s.name]["bans"],
                                     tracked=js[s.name]["tracked"], evictions=js[s.name]["evictions"],
                                     sessions=js[s.name]["sessions"], maxretry=s.maxretry, findtime_s=s.findtime_s,
                                     bantime_s=s.bantime_s, mode=s.mode,
                                     failregex_hits=tuple(js[s.name]["failregex_hits"])) for s in self.specs})

    def tally(self) -> IpsTally:
        """The counters the bans probe shows exactly, even when it misses ban events."""
        e = self.engine
        with e.lock:
            counts = (e.bans, e.unbans, len(e.active), e.bans_failed)
            jails = tuple((name, c[0], c[1], c[2]) for name, c in e.per_jail.items())
            ttb = e.ttb.percentiles()
        ms = lambda v: int(round(v * 1e6)) if ttb.count else None  # noqa: E731
        return IpsTally(source="fipstop-ips", pid=os.getpid(), started_ns=self.started_ns, taken_ns=time.time_ns(),
                        bans=counts[0], unbans=counts[1], active=counts[2], failed=counts[3],
                        published=self.pub.published, dropped=self.pub.dropped, ttb_count=ttb.count,
                        ttb_p50_ns=ms(ttb.p50), ttb_p90_ns=ms(ttb.p90), ttb_p99_ns=ms(ttb.p99),
                        ttb_max_ns=ms(ttb.max), jails=jails, control=self.control_path)

    def publish_tally(self, force: bool = False) -> None:
        """Into the bans domain when a counter changed (and every 5 s anyway), from the main
        thread: its ring holds only these, so a burst of ban events never laps them."""
        t = self.tally()
        key = (t.bans, t.unbans, t.active, t.failed, t.published, t.dropped)
        now = time.monotonic()
        if force or key != self._tally_key or now - self._tally_at >= 5.0:
            self.pub.publish_tally(encode_tally(t))
            self._tally_key, self._tally_at = key, now

    def write_stats(self) -> None:
        path = self.args.stats_json
        if not path:
            return
        text = self.snapshot().to_json()
        if path == "-":
            print(text, flush=True)
        else:
            try:
                write_atomic(path, text + "\n")
            except OSError as exc:
                self.log(f"cannot write {path}: {exc.strerror}")

    def run(self) -> int:
        readers = [threading.Thread(target=self.reader, args=(i,), name=f"ips-reader-{i}", daemon=True)
                   for i in range(self.args.readers)]
        for t in readers:
            t.start()
        deadline = time.monotonic() + self.args.duration if self.args.duration > 0 else None
        next_stats = time.monotonic() + 1.0
        next_reopen = 0.0
        next_tally = 0.0
        self.log(f"consuming {escape_text(self.domain_name)} as {escape_text(self.consumer_name)}: jails "
                 f"{', '.join(escape_text(s.name) for s in self.specs)}; action {self.action.name}"
                 f"{f' via {self.action.backend}' if isinstance(self.action, Nft) else ''}; "
                 f"{self.args.readers} readers")
        if isinstance(self.action, Nft) and self.action.fallback:
            self.log(f"warning: nft: {self.action.fallback}")
        for w in self.filter_warnings:
            self.log(f"warning: {w}")
        if self.control is not None:
            self.control.start()
            self.log(f"control socket {escape_text(self.control.path)} (fipstop ips-client)")
        elif self.control_note:
            self.log(f"warning: {escape_text(self.control_note)}")
        from fipstop.ring import domain_path, others_may_write

        if (warning := others_may_write(domain_path(self.domain_name, self.args.shm_dir))) is not None:
            self._finding(escape_text(warning))
        try:
            while not self.stop.is_set() and not self.term.is_set():
                time.sleep(0.02)
                self.engine.tick()
                now = time.monotonic()
                if self.cut.is_set() and now >= next_reopen:
                    next_reopen = now + 0.5
                    self._reopen()
                if now >= next_tally:
                    next_tally = now + TALLY_EVERY_S
                    self.publish_tally()
                if now >= next_stats:
                    next_stats = now + 1.0
                    self.write_stats()
                if deadline is not None and now >= deadline:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            self.stop.set()
            for t in readers:
                t.join(timeout=5)
            if self.control is not None:
                self.control.close()
            self.engine.stop()
            self.publish_tally(force=True)
            self.write_stats()
            try:
                if self.args.keep:
                    self.consumer.detach()
                else:
                    self.consumer.close()
                self.domain.close()
            except Exception:
                pass
            self.pub.close()
        if self.error:
            raise FipsError(self.error)
        return 0


def _ident(path: str) -> tuple[int, int, int] | None:
    """(st_dev, st_ino, st_size): what tells a domain file that shrank from one put back."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size


def _quiet(_msg: str) -> None:
    pass


def _say(msg: str) -> None:
    print(f"fipstop ips: {msg}", file=sys.stderr, flush=True)


def run_ips(args: IpsOptions) -> int:
    # Readers release the GIL while matching; a short switch interval keeps a
    # reader that has bans to hand over from waiting 5 ms for the GIL.
    sys.setswitchinterval(0.0002)
    ips = Ips(args)
    # Never scan again what setup built (compiled filters, modules): the
    # collections during a burst of bans then stay short (measured <= 3 ms
    # with 2^16 bans; a 50 000-object young generation took 7 ms).
    gc.collect()
    gc.freeze()

    # never ips.stop.set() here: see fipstop.sigflag
    signal.signal(signal.SIGTERM, ips.term.set)
    signal.signal(signal.SIGINT, ips.term.set)
    return ips.run()
