"""Ban actions and the ban engine: failures are counted, retried with backoff,
published, never raised; unban after bantime."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fipstop.bans import decode
from fipstop.errors import FipsError
from fipstop.ips import run as ips_run
from fipstop.ips.actions import OK, BanJob, Command, DryRun, Nft
from fipstop.ips.jails import BUILTIN_JAILS, compile_jail
from fipstop.ips.stats import IpsStats, LatencyWindow, read_stats, write_atomic

NOW = time.time_ns()


class FakePublisher:
    def __init__(self) -> None:
        self.events = []
        self.published = self.dropped = 0

    def publish_many(self, records) -> None:
        self.events += [decode(r) for r in records]
        self.published += len(records)


class Flaky:
    """Fails the first `fail` calls, then succeeds; may raise instead of returning an error."""

    name = "flaky"
    batches = True

    def __init__(self, fail: int, raise_: bool = False) -> None:
        self.fail, self.raise_, self.calls = fail, raise_, []
        self.unban_argv = None

    def setup(self) -> str:
        return OK

    def ban(self, jobs):
        self.calls.append([j.ip for j in jobs])
        if len(self.calls) <= self.fail:
            if self.raise_:
                raise RuntimeError("boom")
            return ["nft exit 1: Error: Could not process rule"] * len(jobs)
        return [OK] * len(jobs)

    def unban(self, jobs):
        return [OK] * len(jobs)


def engine(action, retries=3, bantime=600.0):
    spec = replace(BUILTIN_JAILS["named-refused"], bantime_s=bantime)
    pub = FakePublisher()
    logs: list[str] = []
    e = ips_run.Engine([spec], [compile_jail(spec)], action, pub, retries, 2, logs.append)
    return e, pub, logs


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def trig(ip="10.0.0.1"):
    return ("named-refused", ip, NOW - 5_000_000, NOW - 1_000_000, 5, None)


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ips_run, "BACKOFF_S", (0.01, 0.02, 0.04))


def test_dry_run_bans_inline_and_publishes() -> None:
    e, pub, logs = engine(DryRun())
    e.triggers([trig("10.0.0.1"), trig("2001:db8::1")])
    assert e.bans == 2 and len(e.active) == 2
    assert [(ev.kind, ev.ip, ev.action, ev.result, ev.hits) for ev in pub.events] == [
        ("ban", "10.0.0.1", "dry-run", "ok", 5), ("ban", "2001:db8::1", "dry-run", "ok", 5)]
    assert pub.events[0].first_ns == NOW - 5_000_000 and pub.events[0].ban_ns >= NOW
    assert e.ttb.count == 2 and e.reaction.percentiles().p50 >= 1.0
    e.triggers([trig("10.0.0.1")])  # already banned
    assert e.duplicates == 1 and e.bans == 2
    assert "ban 10.0.0.1 jail=named-refused" in logs[0]


def test_failing_action_is_retried_then_succeeds() -> None:
    act = Flaky(fail=2)
    e, pub, _ = engine(act)
    e.triggers([trig()])
    assert wait_for(lambda: (e.tick(), e.bans == 1)[1])
    assert e.failures == 2 and e.retried == 2 and e.bans_failed == 0
    assert len(act.calls) == 3
    assert [ev.result for ev in pub.events] == ["ok"]
    assert "Could not process rule" in e.last_error
    e.stop()


@pytest.mark.parametrize("raise_", [False, True])
def test_action_that_always_fails_is_counted_never_fatal(raise_: bool) -> None:
    act = Flaky(fail=10**9, raise_=raise_)
    e, pub, logs = engine(act, retries=2)
    e.triggers([trig("10.0.0.9")])
    assert wait_for(lambda: (e.tick(), e.bans_failed == 1)[1])
    assert e.failures == 3 and e.bans == 0 and not e.active and not e.pending
    (ev,) = pub.events
    assert ev.kind == "ban" and ev.result != "ok" and ("boom" in ev.result) == raise_
    assert any("FAILED after 3 attempts" in m for m in logs)
    # the address was forgotten by the jail: it can trigger again
    assert e.jails["named-refused"].unban("10.0.0.9") is False
    e.stop()


def test_unban_after_bantime() -> None:
    e, pub, _ = engine(DryRun(), bantime=0.05)
    e.triggers([trig("10.0.0.1")])
    assert wait_for(lambda: (e.tick(), e.unbans == 1)[1])
    assert not e.active
    assert [ev.kind for ev in pub.events] == ["ban", "unban"]
    e.triggers([trig("10.0.0.1")])  # banned again after the unban
    assert e.bans == 2


def test_burst_of_bans_is_batched() -> None:
    e, pub, logs = engine(DryRun())
    e.triggers([trig(f"10.{i >> 8}.{i & 255}.1") for i in range(5000)])
    assert e.bans == 5000 and len(pub.events) == 5000
    assert len(logs) == 20  # at most 20 ban lines a second on stderr


# --- actions -------------------------------------------------------------------------------------


def job(ip="10.0.0.1", kind="ban") -> BanJob:
    return BanJob("named-refused", ip, 1, 2, 5, 600.0, kind=kind)


def test_command_tags_no_shell(tmp_path: Path) -> None:
    out = tmp_path / "out"
    c = Command(f"sh -c 'echo \"$0 $1 $2 $3 $4\" >> {out}' <ip> <jail> <bantime> <hits> <family>",
                f"sh -c 'echo unban $0 >> {out}' <ip>")
    assert c.ban([job("10.0.0.1"), job("2001:db8::1")]) == [OK, OK]
    assert c.unban([job("10.0.0.1", "unban")]) == [OK]
    assert out.read_text().splitlines() == ["10.0.0.1 named-refused 600 5 inet", "2001:db8::1 named-refused 600 5 inet6",
                                            "unban 10.0.0.1"]
    # an IP is one argument whatever it contains: no shell ever parses it
    assert Command.expand(["echo", "<ip>;rm"], job("1.2.3.4")) == ["echo", "1.2.3.4;rm"]


def test_command_failures_are_results(tmp_path: Path) -> None:
    assert Command("false", None).ban([job()]) == ["command exit 1"]
    (r,) = Command("/nonexistent/ban-it <ip>", None).ban([job()])
    assert r.startswith("command: ") and "/nonexistent/ban-it" in r
    (r,) = Command("sh -c 'echo nope >&2; exit 3'", None).ban([job()])
    assert r == "command exit 3: nope"
    (r,) = Command("sleep 5", None, timeout_s=0.2).ban([job()])
    assert "timed out" in r
    with pytest.raises(FipsError):
        Command(None, None)
    with pytest.raises(FipsError):
        Command("unbalanced 'quote", None)


def fake_nft(tmp_path: Path, rc: int = 0) -> tuple[str, Path]:
    log = tmp_path / "nft.log"
    script = tmp_path / "nft"
    script.write_text(f"#!/bin/sh\necho \"ARGS $*\" >> {log}\ncat >> {log}\n"
                      f"[ {rc} -ne 0 ] && echo 'Error: No such file or directory' >&2\nexit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


def test_nft_batches_elements(tmp_path: Path) -> None:
    nft, log = fake_nft(tmp_path)
    n = Nft("inet:fipstop:banned", nft=nft)
    assert n.ban([job("10.0.0.1"), job("2001:db8::1"), job("10.0.0.2")]) == [OK] * 3
    text = log.read_text()
    assert "add set inet fipstop banned { type ipv4_addr; flags timeout; }" in text
    assert "add set inet fipstop banned6 { type ipv6_addr; flags timeout; }" in text
    assert "add element inet fipstop banned { 10.0.0.1 timeout 600000ms, 10.0.0.2 timeout 600000ms }" in text
    assert "add element inet fipstop banned6 { 2001:db8::1 timeout 600000ms }" in text
    assert n.unban([job(kind="unban")]) == [OK]


def test_nft_failure_is_a_result(tmp_path: Path) -> None:
    nft, _ = fake_nft(tmp_path, rc=1)
    (r,) = Nft("inet:fipstop:banned", nft=nft).ban([job()])
    assert r.startswith("nft exit 1") and "No such file" in r
    (r,) = Nft("inet:fipstop:banned", nft=str(tmp_path / "missing")).ban([job()])
    assert r.startswith("nft: ")
    for bad in ("inet:fipstop", "bridge:t:s", "inet:t;drop:s"):
        with pytest.raises(FipsError):
            Nft(bad)


# --- stats -----------------------------------------------------------------------------------------


def test_stats_file_roundtrip(tmp_path: Path) -> None:
    w = LatencyWindow()
    for v in (1.0, 2.0, 3.0, 100.0):
        w.add(v)
    p = w.percentiles()
    assert p.count == 4 and p.max == 100.0 and 1.9 <= p.p50 <= 2.05 and p.p99 == 100.0
    s = IpsStats(pid=1, records=10, time_to_ban_ms=p, reaction_read_ms=p, reaction_action_ms=w.percentiles())
    path = tmp_path / "s.json"
    write_atomic(path, s.to_json())
    assert read_stats(path) == s
    assert [f for f in os.listdir(tmp_path)] == ["s.json"]  # no temp file left behind
    path.write_text('{"v": 99}')
    with pytest.raises(ValueError):
        read_stats(path)


def test_nft_falls_back_to_the_binary_with_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No libnftables: auto forks nft -f and says why (the IPS logs it once); lib refuses to start."""
    from fipstop.ips import actions

    def missing() -> None:
        raise OSError("libnftables.so.1: cannot open shared object file")

    monkeypatch.setattr(actions, "LibNft", missing)
    n = Nft("inet:fipstop:banned")
    assert n.backend == "nft -f" and "libnftables not usable" in n.fallback and "cannot open" in n.fallback
    with pytest.raises(FipsError, match="libnftables"):
        Nft("inet:fipstop:banned", backend="lib")
    nft, log = fake_nft(tmp_path)
    explicit = Nft("inet:fipstop:banned", nft=nft)  # an explicit binary is exec, and no fallback to explain
    assert explicit.backend == "nft -f" and explicit.fallback == ""
    assert explicit.ban([job("10.0.0.9")]) == [OK] and "10.0.0.9 timeout" in log.read_text()
    with pytest.raises(FipsError):
        Nft("inet:fipstop:banned", backend="bogus")


def test_nft_refuses_a_hostile_address(tmp_path: Path) -> None:
    """An address goes into an nft script: anything inet_pton rejects raises (the engine turns it into the
    batch's error result, as ipaddress did), never script text."""
    nft, log = fake_nft(tmp_path)
    n = Nft("inet:fipstop:banned", nft=nft)
    for bad in ("10.0.0.1 } ; flush ruleset ; add element inet t s {", "010.0.0.1", "2001:db8::1%eth0", ""):
        with pytest.raises(ValueError, match="not an IP address"):
            n.ban([job(bad)])
    assert "flush" not in (log.read_text() if log.exists() else "")


def test_job_queue_batches_and_stops() -> None:
    q = ips_run.JobQueue()
    jobs = [job(f"10.0.0.{i}") for i in range(10)]
    q.put_many(jobs)
    q.put(None)
    q.put(None)
    assert q.get_batch(4) == jobs[:4] and q.qsize() == 8
    assert q.get_batch(100) == jobs[4:]  # stops at a stop, leaves it
    assert q.get_batch(100) is None and q.get_batch(1) is None and q.qsize() == 0


class Slow(Flaky):
    """Succeeds after `delay` seconds: an action (an nft transaction, a firewall API) that takes its time."""

    name = "slow"

    def __init__(self, delay: float) -> None:
        super().__init__(fail=0)
        self.delay = delay

    def ban(self, jobs):
        time.sleep(self.delay)
        return super().ban(jobs)


def test_reaction_is_split_into_reading_and_acting() -> None:
    """The oracle: the trigger's record is 40 ms old when the reader hands it over and the action takes 250 ms,
    so the read part is >= 40 ms, the action part >= 250 ms, and the whole reaction both (histograms within 2 %)."""
    e, _pub, _ = engine(Slow(0.25))
    try:
        now = time.time_ns()
        e.triggers([("named-refused", "10.0.0.7", now - 90_000_000, now - 40_000_000, 5, None)])
        assert wait_for(lambda: e.bans == 1)
        read, act, whole = e.reaction_read.percentiles(), e.reaction_action.percentiles(), e.reaction.percentiles()
        assert read.count == act.count == whole.count == 1
        assert read.p50 >= 40 * 0.98 and act.p50 >= 250 * 0.98 and whole.p50 >= 290 * 0.98
        # one ban: the maxima are its exact values (rounded to µs), and the two parts make the whole
        assert abs(read.max + act.max - whole.max) <= 0.002
    finally:
        e.stop()


def test_a_retried_ban_keeps_its_hand_off_time() -> None:
    """The back-off between attempts belongs to the action part: a ban that failed twice (10 + 20 ms of
    back-off here) has an action part of at least 30 ms."""
    e, _pub, _ = engine(Flaky(fail=2))
    try:
        now = time.time_ns()
        e.triggers([("named-refused", "10.0.0.6", now - 9_000_000, now - 1_000_000, 5, None)])
        assert wait_for(lambda: (e.tick(), e.bans == 1)[1])
        act, whole = e.reaction_action.percentiles(), e.reaction.percentiles()
        assert act.count == 1 and act.max >= 30 * 0.98 and whole.max >= act.max
    finally:
        e.stop()


def test_a_wall_clock_step_leaves_the_latencies_unknown_not_zero() -> None:
    """A trigger stamped after the ban (the clock stepped back): no histogram gets a sample (no 0 ms in any:
    whole reaction, time to ban, either part); the ban itself is made and counted, and bans stamped before
    it still are measured (the counts say which), a first hit read after the crossing one included."""
    e, _pub, _ = engine(DryRun())
    now = time.time_ns()
    future = now + 10_000_000_000
    e.triggers([("named-refused", "10.0.0.5", future, future, 5, None),
                # the first hit stamped after the crossing one (two threads' rings read in turn): no clock
                # step, both latencies are true and measured
                ("named-refused", "10.0.0.4", now - 10_000_000, now - 40_000_000, 5, None),
                ("named-refused", "10.0.0.9", now - 90_000_000, now - 40_000_000, 5, None)])
    assert e.bans == 3
    for h in (e.reaction, e.ttb, e.reaction_read, e.reaction_action):
        assert h.percentiles().count == 2, h
    assert e.reaction.percentiles().p50 >= 40 * 0.98 and e.reaction_read.percentiles().p50 >= 40 * 0.98
    assert e.ttb.percentiles().p50 >= 10 * 0.98 and e.ttb.percentiles().max >= 90


def test_inline_dry_run_has_no_action_part() -> None:
    """Dry-run bans where the reader hands them over: the whole reaction is the read part, the action part is 0."""
    e, _pub, _ = engine(DryRun())
    now = time.time_ns()
    e.triggers([("named-refused", "10.0.0.8", now - 90_000_000, now - 40_000_000, 5, None)])
    read, act = e.reaction_read.percentiles(), e.reaction_action.percentiles()
    assert read.count == act.count == 1 and read.p50 >= 40 * 0.98 and act.max == 0.0
    assert read.max == e.reaction.percentiles().max
