"""A replayed recording shows what the live run showed, screen by screen.

Every screen reads one derived snapshot: rings, consumers and positions (the
overview and the details), the other backends (6), the CPU of the processes
on both ends (the diagnosis), the bans (5 and the header).  A live run is
recorded while it is polled (``fipstop --record``); its replay must give the
same snapshots, frame by frame, the ban fold included.  Once on fixed
fixtures (every probe, deterministic) and once on this host's real probes
and a real domain.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fipstop import fixtures
from fipstop._fips import Consumer, Domain, Producer
from fipstop.banfixtures import demo_ban_aux
from fipstop.bans import BANS_DOMAIN, BanEvent, encode
from fipstop.config import BackendsConfig, ProbeConfig
from fipstop.model.snapshot import Snapshot
from fipstop.probes.proccpu import ProcCpu, ProcCpuSample
from fipstop.recording.replay import ReplaySource
from fipstop.recording.tee import RecordingTee
from fipstop.sources.live import LiveSource
from fipstop.sources.probeset import build_probes
from fipstop.sources.protocol import Source
from fipstop.sources.samples import SampleListSource

#: stored to the microsecond in a recording (fipstop.recording.rawcodec.TIME_QUANTUM_NS)
_AGES = ("last_commit_age_ns", "heartbeat_age_ns")


def _plain(x: Any) -> Any:
    """A value to compare with ==: NaN equal to NaN, dataclasses and mappings as dicts."""
    if isinstance(x, float):
        return "nan" if math.isnan(x) else x
    if isinstance(x, enum.Enum):
        return x.value
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return _plain(x.item())
    return x


def _same_arrays(live: np.ndarray, replayed: np.ndarray, what: str) -> None:
    assert live.dtype == replayed.dtype and live.shape == replayed.shape, what
    for n in live.dtype.names:
        a, b = live[n], replayed[n]
        if n in _AGES:
            assert (np.abs(a.astype(np.int64) - b.astype(np.int64)) < 1000).all(), f"{what}.{n}"
        elif a.dtype.kind == "f":
            np.testing.assert_array_equal(a, b, err_msg=f"{what}.{n}")
        else:
            assert (a == b).all(), f"{what}.{n}"


def assert_same_screens(live: Snapshot, replayed: Snapshot) -> None:
    """Everything a screen reads from a snapshot."""
    for part in ("rings", "consumers", "positions"):
        _same_arrays(getattr(live, part), getattr(replayed, part), part)
    assert live.totals == replayed.totals
    assert live.domains == replayed.domains and live.errors == replayed.errors
    assert (live.host, live.dt_s, live.taken_realtime_ns) == (replayed.host, replayed.dt_s, replayed.taken_realtime_ns)
    assert _plain(live.backends) == _plain(replayed.backends), "backends"
    assert _plain(live.cpu) == _plain(replayed.cpu), "cpu"
    assert _plain(live.bans) == _plain(replayed.bans), "bans"


def _record_and_replay(source: Source, path: Path, polls: int | None = None,
                       pause_s: float = 0.0) -> tuple[list[Snapshot], list[Snapshot]]:
    tee = RecordingTee(source, str(path))
    live: list[Snapshot] = []
    while polls is None or len(live) < polls:
        frame = tee.poll()
        if frame is None:
            break
        live.append(frame.snapshot)
        time.sleep(pause_s)
    tee.close()
    replay = ReplaySource(str(path), follow=False)
    replayed = []
    while (frame := replay.poll()) is not None:
        replayed.append(frame.snapshot)
    replay.close()
    return live, replayed


def _cpu_samples(samples) -> list[ProcCpuSample]:
    out = []
    for k, s in enumerate(samples):
        pids = sorted({int(p) for d in s.domains for p in (*d.rings["pid"], *d.consumers["pid"]) if p})
        procs = tuple(ProcCpu(pid, f"proc{pid}", 10 * k * (1 + i % 3), 4, 1_000_000 * k * (i % 2))
                      for i, pid in enumerate(pids))
        out.append(ProcCpuSample(s.taken_mono_ns, 100, procs))
    return out


def test_replay_of_fixture_frames_matches_every_screen(tmp_path: Path) -> None:
    samples = fixtures.demo_samples(60)
    aux = [{"backends": b, "cpu": c, **bans} for b, c, bans in
           zip(fixtures.backend_samples(60), _cpu_samples(samples), demo_ban_aux(60))]
    live, replayed = _record_and_replay(SampleListSource(samples, 1.0, aux=aux), tmp_path / "f.fsr")
    assert len(live) == len(replayed) == 60
    assert live[-1].bans is not None and live[-1].bans.bans_total > 0  # the ban fold was exercised
    assert live[-1].cpu is not None and live[-1].backends is not None
    for a, b in zip(live, replayed):
        assert_same_screens(a, b)


def test_replay_of_a_real_live_run_matches_every_screen(shm_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("start\n")
    app = Domain("app", shm_dir, max_rings=4, max_consumers=2, ring_capacity=1 << 16, max_record=256)
    bans = Domain(BANS_DOMAIN, shm_dir, max_rings=2, max_consumers=1, ring_capacity=1 << 16, max_record=1024)
    producer, publisher = Producer(app), Producer(bans)
    consumer = Consumer(app, "ips")
    config = ProbeConfig(shm_dir=str(shm_dir), backends=BackendsConfig(files=(str(log),), discover=False,
                                                                       audit=False, journald=False))
    source = LiveSource(build_probes(config), 0.05)
    try:
        tee_polls = 8

        def work(i: int) -> None:
            for k in range(40):
                producer.log(f"client 10.0.{i}.{k} refused".encode())
            if (b := consumer.read(64)) is not None:
                b.release()
            now = time.time_ns()
            publisher.log(encode(BanEvent("ban", f"10.0.0.{i}", "named-refused", now - 10**7, now - 10**6, now,
                                          5, "dry-run", "ok")))
            with log.open("a") as f:
                f.write(f"line {i}\n")

        class Working:  # the live source, with records and bans arriving between polls
            interval_s = source.interval_s
            profiling = None

            def __init__(self) -> None:
                self.i = 0

            def poll(self):
                work(self.i)
                self.i += 1
                return source.poll()

            def tap(self, domain, ring, max_records=32):
                return source.tap(domain, ring, max_records)

            def close(self) -> None:
                source.close()

        live, replayed = _record_and_replay(Working(), tmp_path / "l.fsr", polls=tee_polls, pause_s=0.02)
    finally:
        consumer.close()
        app.close()
        bans.close()
    assert len(live) == len(replayed) == tee_polls
    last = live[-1]
    assert last.totals.records_committed == 41 * tee_polls  # the app's records and the ban events
    assert last.bans is not None and last.bans.bans_total == tee_polls
    assert live[-1].cpu is not None and live[-1].backends is not None
    for a, b in zip(live, replayed):
        assert_same_screens(a, b)
