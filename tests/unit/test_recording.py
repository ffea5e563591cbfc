"""Recordings: the frame codec, the SQLite file, seek, bad files, kill -9,
export (csv / jsonl / OpenMetrics) and the /metrics endpoint."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from fipstop._fips import Consumer, Domain, Producer
from fipstop.errors import FipsError
from fipstop.fixtures import demo_samples, many_rings_samples
from fipstop.model import snapshot
from fipstop.model.raw import RawFrame
from fipstop.probes.ring import RawSample
from fipstop.recording.marks import MARK_DROPS
from fipstop.recording.rawcodec import FrameCodec
from fipstop.recording.replay import ReplaySource, parse_time
from fipstop.recording.store import RecordingReader, RecordingWriter

FIPSTOP = [sys.executable, "-m", "fipstop"]


def derive(prev: RawSample | None, cur: RawSample, dt: float) -> snapshot.Snapshot:
    return snapshot.derive(RawFrame(prev) if prev is not None else None, RawFrame(cur), interval_s=dt)


def _same_snapshot(a, b) -> None:
    for f in ("rings", "consumers", "positions"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.shape == y.shape, f
        for n in x.dtype.names:
            if n in ("last_commit_age_ns", "heartbeat_age_ns"):  # stored to the microsecond
                assert (np.abs(x[n].astype(np.int64) - y[n].astype(np.int64)) < 1000).all(), f"{f}.{n}"
            elif x[n].dtype.kind == "f":
                np.testing.assert_array_equal(x[n], y[n], err_msg=f"{f}.{n}")
            else:
                assert (x[n] == y[n]).all(), f"{f}.{n}"
    assert a.totals == b.totals


def _write(path: Path, samples, **kw) -> None:
    w = RecordingWriter(str(path), interval_s=1.0, host="h", **kw)
    for s in samples:
        w.append(RawFrame(s), MARK_DROPS if s is samples[len(samples) // 2] else 0)
    w.close()


# -- codec ----------------------------------------------------------------------------


@pytest.mark.parametrize("samples", [demo_samples(40), demo_samples(20, hostile=True), many_rings_samples(300, 4)])
def test_codec_round_trip_derives_the_same(samples) -> None:
    enc, dec = FrameCodec(key_every=7), FrameCodec()
    prev = prev_d = None
    keys = 0
    for s in samples:
        blob, key = enc.encode(s)
        keys += key
        d = dec.decode(blob)
        _same_snapshot(derive(prev, s, 1.0), derive(prev_d, d, 1.0))
        prev, prev_d = s, d
    assert keys >= len(samples) // 8  # key frames come back every key_every


def test_codec_refuses_garbage_with_one_line() -> None:
    dec = FrameCodec()
    for bad in (b"", b"x" * 50, __import__("zlib").compress(b"FSR1\x01\x00\x00\x00\x00")):
        with pytest.raises(ValueError) as e:
            dec.decode(bad)
        assert "\n" not in str(e.value)
    # a delta without its key frame
    enc = FrameCodec()
    s = demo_samples(3)
    enc.encode(s[0])
    blob, key = enc.encode(s[1])
    assert not key
    with pytest.raises(ValueError, match="delta frame without"):
        FrameCodec().decode(blob)


def test_codec_bounds_slot_counts() -> None:
    meta = {"host": "h", "shm_dir": "/", "taken_mono_ns": 1, "taken_realtime_ns": 1, "domains": [
        {"name": "x", "path": "", "version": 1, "max_rings": 1 << 40, "max_consumers": 1, "ring_capacity_bytes": 1,
         "max_record_bytes": 1, "file_size_bytes": 1, "grace_ns": 1, "creator_pid": 1, "created_realtime_ns": 1,
         "created_mono_ns": 1, "taken_realtime_ns": 1, "taken_mono_ns": 1, "ri": [0], "ci": []}]}
    mb = json.dumps(meta).encode()
    import lzma

    from fipstop.recording import rawcodec

    blob = lzma.compress(b"FSR1\x00" + len(mb).to_bytes(4, "little") + mb, format=lzma.FORMAT_RAW,
                         filters=rawcodec._LZMA_FILTERS)
    with pytest.raises(ValueError, match="out of range"):
        FrameCodec().decode(blob)


# -- the file -----------------------------------------------------------------------------


def test_write_read_seek(tmp_path: Path) -> None:
    samples = demo_samples(150)
    path = tmp_path / "r.fsr"
    _write(path, samples)
    r = RecordingReader(str(path))
    assert r.count == 150 and r.host == "h"
    assert r.marks() == [(samples[75].taken_realtime_ns, MARK_DROPS)]
    # seek lands on the last frame at or before the time, whatever frame the codec stood on
    for i in (149, 3, 77, 0, 61, 60, 59, 120):
        seq = r.seq_at(samples[i].taken_realtime_ns + 1)
        rec = r.read(seq)  # type: ignore[arg-type]  # None would fail the test
        assert rec.t_ns == samples[i].taken_realtime_ns
        idx = samples[i].domains[0].active_ring_indices()
        got = rec.raw.ring.domains[0].rings[idx]
        want = samples[i].domains[0].rings[idx]
        for name in want.dtype.names:  # every field (padding bytes are not data)
            if name == "last_commit_ns":  # stored to the microsecond
                assert (want[name] - got[name] < 1000).all(), (i, name)
            else:
                assert (got[name] == want[name]).all(), (i, name)
    assert r.seq_at(0) == r.first_seq  # before the start: the first frame
    r.close()


def test_append_to_existing_recording(tmp_path: Path) -> None:
    s = demo_samples(30)
    path = tmp_path / "r.fsr"
    _write(path, s[:10])
    _write(path, s[10:])  # a second recorder session appends (starts with a key frame)
    r = RecordingReader(str(path))
    assert r.count == 30
    src = ReplaySource(str(path), follow=False)
    frames = []
    while (f := src.poll()) is not None:
        frames.append(f)
    assert len(frames) == 30
    _same_snapshot(frames[20].snapshot, derive(s[19], s[20], 1.0))


def test_replay_source_seek_and_speed(tmp_path: Path) -> None:
    s = demo_samples(120)
    path = tmp_path / "r.fsr"
    _write(path, s)
    src = ReplaySource(str(path), follow=False, speed=2)
    assert src.interval_s == pytest.approx(0.5)
    frames = src.seek(s[90].taken_realtime_ns, history=30)
    assert len(frames) == 30 and frames[-1].raw.ring.taken_realtime_ns == s[90].taken_realtime_ns
    _same_snapshot(frames[-1].snapshot, derive(s[89], s[90], 1.0))  # rates as live
    nxt = src.poll()
    assert nxt is not None and nxt.raw.ring.taken_realtime_ns == s[91].taken_realtime_ns
    frames = src.seek_relative(-10, history=5)
    assert frames[-1].raw.ring.taken_realtime_ns == s[81].taken_realtime_ns
    assert src.faster(1) == 4.0 and src.faster(10) == 16.0 and src.faster(-20) == 0.25
    with pytest.raises(FipsError):
        src.set_speed(100)
    tl = src.timeline()
    assert tl.first_t_ns == s[0].taken_realtime_ns and tl.last_t_ns == s[-1].taken_realtime_ns


def test_parse_time() -> None:
    t0 = 1_700_000_000 * 10**9
    assert parse_time("+90", t0) == t0 + 90 * 10**9
    assert parse_time("2023-11-14T22:13:20+00:00", t0) == t0
    with pytest.raises(FipsError, match="ISO 8601"):
        parse_time("yesterday", t0)


@pytest.mark.parametrize("content,why", [
    (b"", "empty file"),
    (b"hello, this is a text file\n" * 10, "not an SQLite file"),
    (None, "without fipstop's tables"),
    ("newer", "newer fipstop"),
    ("foreign", "not a fipstop recording"),
])
def test_bad_files_one_line(tmp_path: Path, content, why) -> None:
    path = tmp_path / "bad.fsr"
    if content is None:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE t(x)")
        db.commit()
        db.close()
    elif content in ("newer", "foreign"):
        _write(path, demo_samples(3))
        db = sqlite3.connect(path)
        if content == "newer":
            db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
        else:
            db.execute("UPDATE meta SET value='something-else' WHERE key='format'")
        db.commit()
        db.close()
    else:
        path.write_bytes(content)
    r = subprocess.run([*FIPSTOP, "export", str(path), "--format", "jsonl"], capture_output=True, text=True)
    assert r.returncode == 2
    assert why in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_corrupted_frame_one_line(tmp_path: Path) -> None:
    path = tmp_path / "r.fsr"
    _write(path, demo_samples(10))
    db = sqlite3.connect(path)
    db.execute("UPDATE frames SET ring = x'00112233' WHERE seq = 5")
    db.commit()
    db.close()
    r = subprocess.run([*FIPSTOP, "export", str(path), "--format", "csv"], capture_output=True, text=True)
    assert r.returncode == 2 and "frame 5" in r.stderr and "Traceback" not in r.stderr


def test_truncated_file_one_line(tmp_path: Path) -> None:
    path = tmp_path / "r.fsr"
    _write(path, demo_samples(200))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    r = subprocess.run([*FIPSTOP, "export", str(path), "--format", "csv"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_full_disk_keeps_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "r.fsr"
    w = RecordingWriter(str(path), interval_s=1.0, host="h")
    w.db.execute("PRAGMA max_page_count = 8")  # the disk is "full" after a few frames (64 KiB pages)
    samples = many_rings_samples(256, 80)
    with pytest.raises(FipsError, match="disk full after") as e:
        for s in samples:
            w.append(RawFrame(s))
    written = w.frames_written
    assert written > 0 and "\n" not in e.value.message
    w.close()
    r = RecordingReader(str(path))
    assert r.count == written
    list(r.iter_frames())  # every kept frame decodes


# -- with a real domain ------------------------------------------------------------------


@pytest.fixture
def live_domain(shm_dir: Path):
    dom = Domain("rec", shm_dir, max_rings=8, max_consumers=2, ring_capacity=1 << 14, max_record=256)
    p = Producer(dom)
    c = Consumer(dom, "ips")
    for i in range(100):
        p.log(b"query %d" % i)
    b = c.read()
    c.release(b)  # type: ignore[arg-type]  # None would fail the test
    for i in range(50):
        p.log(b"later %d" % i)
    yield dom, shm_dir
    c.close()
    dom.close()


def test_record_then_export_equals_live_snapshot(live_domain, tmp_path: Path) -> None:
    dom, shm = live_domain
    rec = tmp_path / "r.fsr"
    r = subprocess.run([*FIPSTOP, "--shm-dir", str(shm), "record", "-o", str(rec), "--interval", "0.1",
                        "--duration", "1.0", "--quiet"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    live = json.loads(subprocess.run([*FIPSTOP, "--shm-dir", str(shm), "snapshot", "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    out = subprocess.run([*FIPSTOP, "export", str(rec), "--format", "jsonl"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert len(out) >= 3
    exported = json.loads(out[-1])["domains"][0]
    live_dom = live["domains"][0] if "domains" in live else live
    skip = {"taken_realtime_ns", "taken_mono_ns", "heartbeat_age_ns"}

    def strip(x):
        if isinstance(x, dict):
            return {k: (v // 1000 if k == "last_commit_ns" else strip(v)) for k, v in x.items() if k not in skip}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    assert strip(exported) == strip(live_dom)
    csv_rows = subprocess.run([*FIPSTOP, "export", str(rec), "--format", "csv"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
    assert csv_rows[0].startswith("time,t_ns,domain,ring") and ",150," in csv_rows[-1]
    # the first frame has no rates: unknown (null / empty), as the dashboard's -, never a false 0.0
    first, second = json.loads(out[0]), json.loads(out[1])
    assert first["totals"]["records_per_second"] is None and all(r["records_per_second"] is None for r in first["ring_rates"])
    assert second["totals"]["records_per_second"] is not None
    head = csv_rows[0].split(",")
    row1 = csv_rows[1].split(",")
    assert row1[head.index("records_per_second")] == "" and csv_rows[-1].split(",")[head.index("records_per_second")] != ""


def test_openmetrics_export_parses(live_domain, tmp_path: Path) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from fipstop.outputs.openmetrics import render
    from fipstop.probes.ring import RingProbe

    _, shm = live_domain
    probe = RingProbe(shm_dir=str(shm))
    snap = derive(None, probe.sample(), 1.0)
    text = render(snap)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    recs = fams["fips_ring_records"]
    assert recs.type == "counter" and recs.samples[0].name == "fips_ring_records_total"
    assert recs.samples[0].value == 150 and recs.samples[0].labels["domain"] == "rec"
    assert fams["fips_consumer_up"].samples[0].value == 1
    assert fams["fips_consumer_health"].type == "stateset"
    probe.close()


def test_openmetrics_escapes_hostile_names() -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from fipstop.outputs.openmetrics import render

    samples = demo_samples(2, hostile=True)
    text = render(derive(samples[0], samples[1], 1.0))
    assert "\x1b" not in text
    names = [s.labels.get("thread") for f in text_string_to_metric_families(text) for s in f.samples
             if f.name == "fips_ring"]  # the thread name is on the info metric
    assert names and all(n is not None for n in names)


def test_serve_metrics_endpoint(live_domain) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from fipstop.outputs.serve import MetricsServer
    from fipstop.probes.ring import RingProbe
    from fipstop.sources.live import LiveSource
    from fipstop.sources.probeset import ProbeSet

    _, shm = live_domain
    src = LiveSource(ProbeSet(RingProbe(shm_dir=str(shm))), 1.0)
    srv = MetricsServer(src, "127.0.0.1", 0)
    srv.start()
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{srv.port}/metrics",
                                     headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
            body = resp.read().decode()
        fams = {f.name for f in text_string_to_metric_families(body)}
        assert {"fips_ring_records", "fips_consumer_lag_records"} <= fams
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/nope", timeout=10)
    finally:
        srv.close()
        src.close()


def test_kill_9_recorder_then_replay(live_domain, tmp_path: Path) -> None:
    _, shm = live_domain
    rec = tmp_path / "r.fsr"
    proc = subprocess.Popen([*FIPSTOP, "--shm-dir", str(shm), "record", "-o", str(rec), "--interval", "0.05",
                             "--quiet"], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if rec.exists():
            try:
                if RecordingReader(str(rec)).count >= 8:
                    break
            except FipsError:
                pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    r = RecordingReader(str(rec))
    n = r.count
    assert n >= 8
    src = ReplaySource(str(rec), follow=False)
    got = 0
    while src.poll() is not None:
        got += 1
    assert got == n
    out = subprocess.run([*FIPSTOP, "export", str(rec), "--format", "openmetrics"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.endswith("# EOF\n")


def test_follow_a_growing_recording(tmp_path: Path) -> None:
    s = demo_samples(20)
    path = tmp_path / "r.fsr"
    w = RecordingWriter(str(path), interval_s=1.0, host="h")
    for x in s[:5]:
        w.append(RawFrame(x))
    src = ReplaySource(str(path), follow=True)
    for _ in range(5):
        assert src.poll() is not None
    assert src.poll() is None and src.following
    for x in s[5:8]:
        w.append(RawFrame(x))
    assert (f := src.poll()) is not None and f.raw.ring.taken_realtime_ns == s[5].taken_realtime_ns
    w.close()


def test_aux_samples_round_trip_with_delta_dictionary(tmp_path: Path) -> None:
    from fipstop.model.raw import ProbeFailure

    s = demo_samples(130)
    path = tmp_path / "r.fsr"
    w = RecordingWriter(str(path), interval_s=1.0, host="h")
    sizes = []
    for i, x in enumerate(s):
        aux = {"other": ProbeFailure("other", f"reason that repeats itself a lot, frame {i % 3}", i),
               "arr": np.arange(50, dtype=np.int64) + i // 10}
        sizes.append(w.append(RawFrame(x, aux)))
    w.close()
    r = RecordingReader(str(path))
    for i in (129, 0, 61, 59, 60, 5, 128):  # out of order: each read rebuilds the dictionary chain
        rec = r.read(r.seq_at(s[i].taken_realtime_ns))  # type: ignore[arg-type]
        assert rec.raw.aux["other"] == ProbeFailure("other", f"reason that repeats itself a lot, frame {i % 3}", i)
        assert (rec.raw.aux["arr"] == np.arange(50) + i // 10).all()


def test_recording_tee_records_what_the_dashboard_polls(tmp_path: Path) -> None:
    from fipstop.recording.tee import RecordingTee
    from fipstop.sources.samples import SampleListSource

    s = demo_samples(60)
    tee = RecordingTee(SampleListSource(s, 1.0), str(tmp_path / "w.fsr"))
    n = 0
    while tee.poll() is not None:
        n += 1
    tee.close()
    r = RecordingReader(str(tmp_path / "w.fsr"))
    assert n == 60 and r.count == 60
    assert any(m & MARK_DROPS for _, m in r.marks())  # the demo has drops: the timeline marks them


@pytest.mark.root
def test_full_disk_for_real_on_a_tiny_tmpfs(tmp_path: Path) -> None:
    """A real ENOSPC: record into a 1 MiB tmpfs until it is full."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        w = RecordingWriter(str(mnt / "r.fsr"), interval_s=1.0, host="h")
        samples = many_rings_samples(1024, 400, seed=3)
        with pytest.raises(FipsError, match="disk full after"):
            for s in samples:
                w.append(RawFrame(s))
        kept = w.frames_written
        w.close()
        assert kept > 0
        rd = RecordingReader(str(mnt / "r.fsr"))
        assert rd.count == kept
        assert sum(1 for _ in rd.iter_frames()) == kept
        rd.close()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_marks_for_findings_on_the_timeline(tmp_path: Path) -> None:
    from fipstop.recording.marks import MARK_FINDINGS, Marker
    from fipstop.sources.samples import SampleListSource

    src = SampleListSource(demo_samples(60), 1.0)
    marker = Marker()
    marks = []
    while (f := src.poll()) is not None:
        marks.append(marker(f))
    assert marks[-1] & MARK_FINDINGS and marks[-1] & MARK_DROPS


def test_next_and_previous_mark_mirror_each_other() -> None:
    """} goes to the nearest run start ahead, { to the nearest behind (issue 18: they did not mirror)."""
    from fipstop.views.widgets.timeline import next_mark

    s = 10**9
    gap = int(1.5 * s)
    marks = [40 * s, 41 * s, 42 * s, 90 * s, 91 * s]
    assert next_mark(marks, 10 * s, 1, gap) == 40 * s
    assert next_mark(marks, 40 * s, 1, gap) == 90 * s  # past the run 40-42
    assert next_mark(marks, 39 * s, 1, gap) == 40 * s  # just before a run: that run (it was skipped)
    assert next_mark(marks, 91 * s, 1, gap) is None
    assert next_mark(marks, 91 * s, -1, gap) == 90 * s  # inside a run: its start, as } went past it
    assert next_mark(marks, 90 * s, -1, gap) == 40 * s  # from a run's start: the run before
    assert next_mark(marks, 41 * s, -1, gap) == 40 * s
    assert next_mark(marks, 40 * s, -1, gap) is None
    # from every start, } then { comes back
    for t in (40 * s, 90 * s):
        ahead = next_mark(marks, t, 1, gap)
        if ahead is not None:
            assert next_mark(marks, ahead, -1, gap) == t


def test_a_moved_class_keeps_its_name_in_the_file() -> None:
    """Classes that moved module are written under the name recordings always
    gave them (so an older fipstop still replays a new file) and read back
    from both names."""
    from fipstop.model.raw import ProbeFailure
    from fipstop.recording import auxcodec

    failure = ProbeFailure("backends", "boom")
    encoded = auxcodec.to_jsonable(failure)
    assert encoded["__dc"][:2] == ["fipstop.sources", "ProbeFailure"]
    assert auxcodec.from_jsonable(encoded) == failure
    now = {"__dc": ["fipstop.model.raw", "ProbeFailure", encoded["__dc"][2]]}
    assert auxcodec.from_jsonable(now) == failure
    for before, current in auxcodec.MOVED.items():
        assert auxcodec._class(*before) is auxcodec._class(*current)
