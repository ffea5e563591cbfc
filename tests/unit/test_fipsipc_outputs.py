"""FIPS-IPC segments through the one model step into check, diagnose, text, JSON and OpenMetrics.

Frames are built from segments laid out as fips_buf.c does (fipsipc_build),
with positions the test knows; the prototype's own programs are exercised
by tests/integration/test_fipsipc.py.
"""

from __future__ import annotations

from fipsipc_build import Seg
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from fipstop import fixtures
from fipstop.analysis.check import evaluate
from fipstop.analysis.diagnose import diagnose
from fipstop.analysis.levels import CRITICAL, OK, WARNING, Thresholds
from fipstop.model.fipsipc import FipsIpcView
from fipstop.model.raw import RawFrame
from fipstop.model.snapshot import Frame, ModelStep
from fipstop.outputs.fipsipc import fipsipc_json, format_fipsipc
from fipstop.outputs.openmetrics import render
from fipstop.probes.fipsipc import FipsIpcSample, FipsIpcSegment, Rejected, SysvShm
from fipstop.probes.fipsipc_layout import parse_header, read_positions


def sample(seg: Seg, t_s: float, *, nattch: int, name: str = "/run/app.key",
           rejected: tuple[Rejected, ...] = ()) -> FipsIpcSample:
    lay = parse_header(seg.read, seg.size)
    pos = read_positions(seg.read, lay)
    shm = SysvShm(0x0100_0042, 42, 0o644, seg.size, 7, 8, nattch, 0, 0, 0, 0)
    t = fixtures.EPOCH_MONO_NS + int(t_s * 1e9)
    return FipsIpcSample(t, t, (FipsIpcSegment(shm, lay, pos, (name,)),), rejected)


def frames(samples: list[FipsIpcSample]) -> list[Frame]:
    step = ModelStep(1.0)
    return [step(RawFrame(fixtures.raw_sample(float(i), []), {"fipsipc": s})) for i, s in enumerate(samples)]


def full_ring_with_dead_reader() -> list[Frame]:
    s = Seg(exp=6, segments=2, readers=1, flags=0)
    s.counts(1, 1)
    s.reader_thread(0, 0)
    for i in range(2):
        s.writer(i, 63, 63)  # 63 of 64 slots unread: the writer must wait
    return frames([sample(s, t, nattch=1) for t in range(3)])


def test_check_reader_gone_is_critical_with_perfdata() -> None:
    fs = full_ring_with_dead_reader()
    rep = evaluate(fs[-2], fs[-1], Thresholds())
    assert rep.status == CRITICAL
    msgs = [r.message for r in rep.results if r.name == "fipsipc"]
    assert any("1 registered process(es) gone, the writer waits on a full ring" in m for m in msgs)
    assert any("2 of 2 rings outside the fill threshold 80% (ring 0 98.4%)" in m for m in msgs)
    perf = {p.label: p.value for p in rep.perf}
    assert perf["fipsipc_fill_max"] == round(100 * 63 / 64, 2) and perf["fipsipc_lag_max_records"] == 63


def test_check_healthy_segment_ok_without_domains() -> None:
    s = Seg(exp=6, segments=1, readers=1)
    s.counts(1, 1)
    s.writer(0, 10, 10)
    s.reader(0, 0, 8, 8)
    fs = frames([sample(s, 0, nattch=2), sample(s, 1, nattch=2)])
    rep = evaluate(fs[0], fs[1], Thresholds())
    assert rep.status == OK and "1 FIPS-IPC segment(s)" in rep.summary()


def test_check_named_segment_refused_is_critical() -> None:
    s = Seg(exp=6, segments=1, readers=1)
    rej = (Rejected(9, 0x01000009, "size 4096 bytes, but its header describes 5000 bytes", "/run/other.key"),)
    fs = frames([sample(s, 0, nattch=0, rejected=rej)])
    rep = evaluate(None, fs[0], Thresholds())
    assert rep.status == CRITICAL and "FIPS-IPC /run/other.key: size 4096 bytes" in rep.summary()


def test_diagnose_reader_gone_and_full() -> None:
    found = diagnose([f.snapshot for f in full_ring_with_dead_reader()])
    assert [f.id for f in found] == ["fipsipc-reader-gone"]
    assert found[0].evidence["rings_full"] == 2 and found[0].evidence["gone"] == 1


def test_diagnose_full_with_everyone_attached() -> None:
    s = Seg(exp=6, segments=1, readers=1)
    s.counts(1, 1)
    s.writer(0, 63, 63)
    found = diagnose([f.snapshot for f in frames([sample(s, t, nattch=2) for t in range(3)])])
    assert [f.id for f in found] == ["fipsipc-full"]


def test_diagnose_lapped_estimate() -> None:
    s = Seg(exp=6, segments=1, readers=1, flags=1)
    s.counts(1, 1)
    samples = []
    for t in range(3):  # the writer 40 a second, the reader 2: lapped from the second interval on
        s.writer(0, (40 * t) % 64, (40 * t) % 64)
        s.reader(0, 0, (2 * t) % 64, (2 * t) % 64)
        samples.append(sample(s, t, nattch=2))
    found = diagnose([f.snapshot for f in frames(samples)])
    lap = [f for f in found if f.id == "fipsipc-lapped"]
    assert lap and lap[0].evidence["lapped_slots_est"] == 64 and lap[0].severity == WARNING
    assert "(estimate)" in lap[0].title


def test_text_json_and_metrics() -> None:
    fs = full_ring_with_dead_reader()
    view = fs[-1].snapshot.fipsipc
    assert isinstance(view, FipsIpcView)
    text = format_fipsipc(view)
    assert "1 gone (killed without fips_buf_destroy)" in text and "98.4%" in text
    assert "~0" in text  # commit/s: an estimate
    doc = fipsipc_json(view)
    seg = doc["segments"][0]
    assert seg["label"] == "/run/app.key" and [r["lag_slots"] for r in seg["rings"]] == [63, 63]
    assert seg["rings"][0]["commit_per_s_est"] == 0.0
    first = fipsipc_json(fs[0].snapshot.fipsipc)  # type: ignore[arg-type]
    assert first["segments"][0]["rings"][0]["commit_per_s_est"] is None  # no baseline: unknown, not 0
    got = {}
    for fam in text_string_to_metric_families(render(fs[-1].snapshot)):
        for smp in fam.samples:
            if smp.name.startswith("fips_ipc_"):
                got[(smp.name, smp.labels.get("ring"))] = smp.value
    assert got[("fips_ipc_ring_slowest_lag_records", "0")] == 63
    assert got[("fips_ipc_segment_gone_processes", None)] == 1
    assert got[("fips_ipc_ring_fill_ratio", "1")] == 63 / 64


def test_hostile_name_escaped_in_text() -> None:
    s = Seg(exp=6, segments=1, readers=1)
    fs = frames([sample(s, 0, nattch=0, name="/tmp/\x1b[31mred\n")])
    text = format_fipsipc(fs[0].snapshot.fipsipc)  # type: ignore[arg-type]
    assert "\x1b" not in text and "\\x1b[31mred\\x0a" in text


def test_fipsipc_option() -> None:
    from fipstop.cli import build_parser
    from fipstop.commands.options import fipsipc_config

    p = build_parser()
    assert fipsipc_config(p.parse_args(["snapshot"])) is None
    c = fipsipc_config(p.parse_args(["snapshot", "--fipsipc"]))
    assert c is not None and c.shm_names == () and c.discover
    c = fipsipc_config(p.parse_args(["check", "--fipsipc", "a", "--fipsipc", "b", "--fipsipc", "a"]))
    assert c is not None and c.shm_names == ("a", "b") and not c.discover
    c = fipsipc_config(p.parse_args(["record", "-o", "x", "--fipsipc", "--fipsipc", "a"]))
    assert c is not None and c.shm_names == ("a",) and c.discover


def test_diagnose_stale_segment() -> None:
    s = Seg(exp=6, segments=1, readers=1)
    s.counts(1, 1)
    s.writer(0, 5, 5)
    found = diagnose([f.snapshot for f in frames([sample(s, t, nattch=0) for t in range(3)])])
    assert [f.id for f in found] == ["fipsipc-stale"] and "ipcrm -m 42" in found[0].remedy


def test_fipsipc_from_the_config_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from fipstop.cli import build_parser
    from fipstop.commands.options import backends_config, fipsipc_config
    from fipstop.config import ConfigError, parse_config
    from fipstop.errors import FipsError

    conf = tmp_path / "fipstop.toml"
    conf.write_text('[fipsipc]\nshm_names = ["/run/a.key"]\n')
    args = build_parser().parse_args(["snapshot", "--config", str(conf)])
    c = fipsipc_config(args, backends_config(args))
    assert c is not None and c.shm_names == ("/run/a.key",) and not c.discover
    args = build_parser().parse_args(["snapshot", "--config", str(conf), "--fipsipc", "/run/b.key"])
    c = fipsipc_config(args, backends_config(args))
    assert c is not None and c.shm_names == ("/run/b.key", "/run/a.key")
    with pytest.raises(ConfigError, match="fipsipc.shm_names must be a list"):
        parse_config('[fipsipc]\nshm_names = "x"\n', "f.toml")
    with pytest.raises(ConfigError, match="unknown key fipsipc.names"):
        parse_config('[fipsipc]\nnames = []\n', "f.toml")
    conf.write_text('[fipsipc]\nshm_names = [1]\n')
    with pytest.raises(FipsError, match="fipsipc.shm_names"):
        backends_config(build_parser().parse_args(["snapshot", "--config", str(conf)]))


def test_check_probe_failure_is_unknown() -> None:
    from fipstop.analysis.levels import UNKNOWN
    from fipstop.model.raw import ProbeFailure

    step = ModelStep(1.0)
    f = step(RawFrame(fixtures.raw_sample(0.0, []), {"fipsipc": ProbeFailure("fipsipc", "OSError: boom")}))
    rep = evaluate(None, f, Thresholds())
    assert any(r.status == UNKNOWN and "FIPS-IPC probe failed: OSError: boom" in r.message for r in rep.results)
