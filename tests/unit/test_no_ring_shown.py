"""Records dropped with no ring (the ring table full: more threads than rings) are shown, not silent.

The oracle is the number of syslog() calls the test makes a program do through the drop-in: 64
threads on a 4-ring domain, all alive at once, so 60 of them find no ring. "Delivered" is what the
test's own consumer read. Every figure a user reads must then add up, exactly, to the calls:
``snapshot --json`` (ring records_dropped + the domain's records_no_ring), /metrics from
``fipstop serve`` (``fips_ring_dropped_records_total`` + ``fips_domain_no_ring_records_total``, and
promtool checks the page), ``fipstop check`` (perfdata ``dropped_total``, the drops check) and the
dashboard's header (its drops total and its ``no ring`` figure, read with the textual pilot).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from shimprog import shim_env
from test_shim_accounting import Reader, no_ring

import fipstop
from fipstop._fips import Domain
from fipstop.analysis.diagnose import diagnose
from fipstop.model.raw import RawFrame
from fipstop.model.snapshot import ModelStep
from fipstop.outputs.openmetrics import TEXT, render
from fipstop.outputs.serve import MetricsServer
from fipstop.probes.ring import RingProbe

PKG_PARENT = str(Path(fipstop.__file__).parent.parent)
PROMTOOL = shutil.which("promtool")
THREADS, CALLS = 64, 150  # 9 600 calls: the header prints counts below 10 000 exactly (no SI suffix)


def _fipstop(shm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-P", "-m", "fipstop", "--shm-dir", str(shm), *args], env=env,
                          capture_output=True, text=True, timeout=120)


class _Frames:
    """A Source over a list of frames, the last one repeated (as the /metrics tests' list source)."""

    interval_s = 1.0
    profiling = None

    def __init__(self, frames: list) -> None:
        self.frames, self.i = frames, 0

    def poll(self):
        f = self.frames[min(self.i, len(self.frames) - 1)]
        self.i += 1
        return f

    def tap(self, domain: str, ring: int, max_records: int = 32):
        raise NotImplementedError

    def close(self) -> None:
        pass


def _metric(text: str, name: str) -> int:
    return sum(int(float(v)) for v in re.findall(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M))


@pytest.mark.slow
def test_64_threads_on_4_rings_drops_add_up_everywhere(progs: dict[str, Path], shm_dir: Path) -> None:
    dom = Domain("syslog", shm_dir, create=2, max_rings=4, max_consumers=4, ring_capacity=1 << 16,
                 max_record=4096)
    reader = Reader(dom)
    probe = RingProbe(shm_dir=shm_dir)
    try:
        before = probe.sample()  # the baseline of the rates: nothing logged yet
        r = subprocess.run([str(progs["fortify"]), "waves", str(THREADS), str(CALLS), str(THREADS)],
                           env=shim_env(shm_dir), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        time.sleep(0.2)
        delivered = reader.stop()
        offered = THREADS * CALLS
        noring = no_ring(shm_dir)  # read from the file at its documented offset, not through the binding
        assert noring > 0  # the case is exercised
        assert r.stdout.strip().splitlines()[-1] == "dropped=0"  # nothing the shim alone counted

        # snapshot --json
        out = _fipstop(shm_dir, "snapshot", "--json")
        assert out.returncode == 0, out.stderr
        d = json.loads(out.stdout)["domains"][0]
        ring_drops = sum(x["records_dropped"] for x in d["rings"])
        assert d["records_no_ring"] == noring
        assert offered == delivered + ring_drops + d["records_no_ring"], (offered, delivered, ring_drops, d)

        # the model, then /metrics as `fipstop serve` serves it
        after = probe.sample()
        assert after.domains[0].records_no_ring == noring
        step = ModelStep()
        frames = [step(RawFrame(before)), step(RawFrame(after))]
        tot = frames[-1].snapshot.totals
        assert tot.records_no_ring == noring and tot.drops_total == ring_drops + noring
        assert tot.no_ring_per_s is not None and tot.no_ring_per_s > 0
        # diagnose names the cause (the ring table full), with the same rate
        found = [f for f in diagnose([f.snapshot for f in frames]) if f.id == "no-ring"]
        assert len(found) == 1 and found[0].evidence["records_no_ring"] == noring, found
        assert found[0].evidence["no_ring_per_s"] == round(tot.no_ring_per_s, 1)
        assert found[0].evidence["max_rings"] == 4 and "--max-rings" in found[0].remedy
        srv = MetricsServer(_Frames(frames[-1:]), "127.0.0.1", 0, interval_s=0.05)
        srv.start()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=10) as resp:
                page = resp.read().decode()
        finally:
            srv.close()
        assert "# HELP fips_domain_no_ring_records_total " in page
        assert "# TYPE fips_domain_no_ring_records_total counter" in page
        assert _metric(page, "fips_domain_no_ring_records_total") == noring
        assert offered == delivered + _metric(page, "fips_ring_dropped_records_total") + noring
        if PROMTOOL is not None:
            text = render(frames[-1].snapshot, fmt=TEXT, pid_alive=lambda pid: True)
            pt = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                                timeout=60)
            assert pt.returncode == 0 and pt.stdout == "" and pt.stderr == "", pt.stdout + pt.stderr

        # fipstop check: the drops total in the perfdata; the drops check says where they came from
        chk = _fipstop(shm_dir, "check", "--window", "0")
        perf = dict(re.findall(r"'(\w+)'=(\d+)", chk.stdout.split("|", 1)[1]))
        assert int(perf["dropped_total"]) == ring_drops + noring, chk.stdout
        from fipstop.analysis.check import evaluate
        from fipstop.analysis.levels import Thresholds

        rep = evaluate(frames[0], frames[1], Thresholds())
        drops = [x for x in rep.results if x.name == "drops"]
        assert drops and "no ring: syslog" in drops[0].message and "4 rings" in drops[0].message, rep.results

        # the dashboard's header (textual pilot)
        head = asyncio.run(_header(frames))
        m = re.search(r"drops \S+/s \((\d+) total, (\d+) no ring\)", head)
        assert m, head
        assert int(m.group(2)) == noring
        assert offered == delivered + int(m.group(1)), (offered, delivered, head)
    finally:
        probe.close()
        dom.close()


async def _header(frames: list) -> str:
    from fipstop.views.app import FipsTopApp
    from fipstop.views.widgets.header import StatusHeader

    app = FipsTopApp(_Frames(frames), paced=False, autopoll=False)
    async with app.run_test(size=(200, 50)) as pilot:
        app.preload(frames)
        app.exhausted = True
        await pilot.pause()
        await pilot.pause()
        return app.screen.query_one(StatusHeader).render().plain


def test_unknown_no_ring_is_not_zero() -> None:
    """A domain whose no-ring count is unknown (a recording made before it was kept) gives None totals, a
    header that says so, no /metrics sample and a U in check's dropped_total; never a silent 0."""
    from dataclasses import replace

    from fipstop import fixtures
    from fipstop.analysis.check import evaluate
    from fipstop.analysis.levels import Thresholds

    samples = fixtures.demo_samples(3)
    old = [replace(s, domains=tuple(replace(d, records_no_ring=None) for d in s.domains)) for s in samples]
    step = ModelStep()
    frames = [step(RawFrame(s)) for s in old]
    tot = frames[-1].snapshot.totals
    assert tot.records_no_ring is None and tot.drops_total is None and tot.no_ring_per_s is None
    assert "fips_domain_no_ring_records_total{" not in render(frames[-1].snapshot, fmt=TEXT)
    perf = {p.label: p.value for p in evaluate(frames[-2], frames[-1], Thresholds()).perf}
    assert perf["dropped_total"] is None
    head = asyncio.run(_header(frames))
    assert f"({tot.records_dropped}+? total, no ring unknown)" in head, head


def _as_old_frame(blob: bytes) -> bytes:
    """The same frame as a recorder from before records_no_ring was kept wrote it (no ``no_ring``, no ``nr``)."""
    import lzma

    from fipstop.recording import rawcodec

    raw = lzma.decompress(blob, format=lzma.FORMAT_RAW, filters=rawcodec._LZMA_FILTERS)
    magic, kind, mlen = rawcodec._HDR.unpack_from(raw)
    meta = json.loads(raw[rawcodec._HDR.size:rawcodec._HDR.size + mlen])
    for m in meta.get("domains", []):
        m.pop("no_ring")
    meta.pop("nr", None)
    mb = json.dumps(meta, separators=(",", ":")).encode()
    out = rawcodec._HDR.pack(magic, kind, len(mb)) + mb + raw[rawcodec._HDR.size + mlen:]
    return lzma.compress(out, format=lzma.FORMAT_RAW, filters=rawcodec._LZMA_FILTERS)


def test_recordings_keep_it_and_old_ones_load_it_as_unknown() -> None:
    from dataclasses import replace

    from fipstop import fixtures
    from fipstop.recording.rawcodec import FrameCodec

    samples = fixtures.demo_samples(6)
    counts = [0, 0, 7, 7, 9000, 2**64 - 2]  # unchanged, grown, up to the largest counter (+1 on the 2nd domain)
    samples = [replace(s, domains=tuple(replace(d, records_no_ring=n + i) for i, d in enumerate(s.domains)))
               for s, n in zip(samples, counts)]
    enc, dec, dec_old = FrameCodec(key_every=3), FrameCodec(), FrameCodec()
    for s in samples:
        blob, _ = enc.encode(s)
        got = dec.decode(blob)
        assert [d.records_no_ring for d in got.domains] == [d.records_no_ring for d in s.domains]
        old = dec_old.decode(_as_old_frame(blob))
        assert [d.records_no_ring for d in old.domains] == [None] * len(s.domains)


def test_a_hostile_no_ring_count_is_a_one_line_error() -> None:
    import lzma

    from fipstop import fixtures
    from fipstop.recording import rawcodec
    from fipstop.recording.rawcodec import FrameCodec

    blob, _ = FrameCodec().encode(fixtures.demo_samples(1)[0])
    raw = lzma.decompress(blob, format=lzma.FORMAT_RAW, filters=rawcodec._LZMA_FILTERS)
    magic, kind, mlen = rawcodec._HDR.unpack_from(raw)
    for bad in (-1, 2**64, "7", 1.5, [1]):
        meta = json.loads(raw[rawcodec._HDR.size:rawcodec._HDR.size + mlen])
        meta["domains"][0]["no_ring"] = bad
        mb = json.dumps(meta).encode()
        out = rawcodec._HDR.pack(magic, kind, len(mb)) + mb + raw[rawcodec._HDR.size + mlen:]
        with pytest.raises(ValueError, match="no-ring count"):
            FrameCodec().decode(lzma.compress(out, format=lzma.FORMAT_RAW, filters=rawcodec._LZMA_FILTERS))
