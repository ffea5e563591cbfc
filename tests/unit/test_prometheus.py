"""/metrics and the other Prometheus outputs against Prometheus' own tools:
``promtool check metrics`` (text format), prometheus_client's parsers and its
content negotiation, ``promtool tsdb create-blocks-from openmetrics`` for
the export; and the server's behaviour under slow, idle and vanishing
clients (node_exporter as the reference)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fipstop import fixtures
from fipstop.banfixtures import demo_ban_aux
from fipstop.model.raw import RawFrame
from fipstop.model.snapshot import Frame, ModelStep
from fipstop.outputs.openmetrics import CONTENT_TYPES, OPENMETRICS, TEXT, choose_format, render
from fipstop.outputs.serve import MetricsServer, ServeLimits, parse_listen

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian prometheus) is not installed")


def _frames(n: int = 58, *, hostile: bool = True) -> list[Frame]:
    samples = fixtures.demo_samples(n, hostile=hostile)
    aux = [{"backends": b, **bans} for b, bans in zip(fixtures.backend_samples(n), demo_ban_aux(n, hostile=hostile),
                                                      strict=True)]
    step = ModelStep()
    return [step(RawFrame(s, a)) for s, a in zip(samples, aux, strict=True)]


@pytest.fixture(scope="module")
def frame() -> Frame:
    return _frames()[-1]


def _promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)


@needs_promtool
def test_promtool_check_metrics_is_clean_on_the_text_format(frame: Frame) -> None:
    text = render(frame.snapshot, fmt=TEXT, pid_alive=lambda pid: True)
    r = _promtool_check(text)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stdout + r.stderr
    for family in ("fips_bans_total", "fips_ban_time_to_ban_seconds", "fips_backend_udp_receive_buffer_errors_total",
                   "fips_ring_slowest_lag_seconds", "fips_ring_info", "fips_consumer_info"):
        assert f"# TYPE {family} " in text, family


def _parsed(frame: Frame) -> tuple[dict[str, Any], dict[str, Any]]:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    from prometheus_client.parser import text_string_to_metric_families as text_parse

    om = {f.name: f for f in om_parse(render(frame.snapshot, fmt=OPENMETRICS, pid_alive=lambda pid: True))}
    tx = {f.name: f for f in text_parse(render(frame.snapshot, fmt=TEXT, pid_alive=lambda pid: True))}
    return om, tx


def test_both_formats_carry_the_same_samples(frame: Frame) -> None:
    om, tx = _parsed(frame)

    def samples(fams: dict[str, Any]) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        return {(s.name, tuple(sorted(s.labels.items())), s.value) for f in fams.values() for s in f.samples
                if s.value == s.value}  # NaN != NaN

    assert samples(om) == samples(tx)
    assert om["fips_ring"].type == "info" and om["fips_consumer_health"].type == "stateset"
    assert tx["fips_ring_info"].type == "gauge" and tx["fips_consumer_health"].type == "gauge"  # no stateset in text
    assert om["fips_ban_time_to_ban_seconds"].type == "histogram"


def test_series_are_keyed_by_slot_and_name_and_the_pids_are_on_info(frame: Frame) -> None:
    om, _ = _parsed(frame)
    snap = frame.snapshot
    names = [d.name for d in snap.domains]
    recs = {(s.labels["domain"], s.labels["ring"]): s.value for s in om["fips_ring_records"].samples}
    truth = {(names[int(r["domain"])], str(int(r["ring"]))): int(r["records_committed"]) for r in snap.rings}
    assert recs == truth  # the oracle: the raw counters of the fixture
    for fam in om.values():
        for s in fam.samples:
            if fam.name not in ("fips_ring", "fips_consumer"):
                assert not {"pid", "tid", "thread"} & set(s.labels), (fam.name, s.labels)
    info = om["fips_ring"].samples
    assert {s.labels["pid"] for s in info} == {str(int(r["pid"])) for r in snap.rings}
    assert all(s.value == 1 for s in info)
    # every active consumer has its lag lines, and the slowest lag of every ring with a consumer
    lag = {s.labels["consumer"] for s in om["fips_consumer_lag_records"].samples}
    lag_s = {s.labels["consumer"] for s in om["fips_consumer_lag_seconds"].samples}
    assert lag and lag == lag_s
    assert om["fips_ring_slowest_lag_records"].samples and om["fips_ring_slowest_lag_seconds"].samples


def test_ban_metrics_match_the_ban_fold(frame: Frame) -> None:
    om, _ = _parsed(frame)
    bans = frame.snapshot.bans
    assert bans is not None
    for src in bans.sources:
        if src.unavailable:
            continue
        total = [s.value for s in om["fips_bans"].samples if s.labels["source"] == src.source]
        assert total == [src.bans_total] and src.bans_total > 0
        count = [s.value for s in om["fips_ban_time_to_ban_seconds"].samples
                 if s.labels.get("le") == "+Inf" and s.labels["source"] == src.source]
        assert count == [sum(src.ttb_hist)]
        active = [s.value for s in om["fips_bans_active"].samples if s.labels["source"] == src.source]
        assert active == [src.active]


@pytest.mark.parametrize("accept", [
    None, "", "*/*", "text/plain", "text/plain;version=0.0.4",
    "application/openmetrics-text", "application/openmetrics-text;version=1.0.0",
    # what Prometheus 2.42 sends
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "text/plain;version=0.0.4;q=0.5, application/openmetrics-text; version=0.0.1",
    "application/json", "application/openmetrics-textx", "application/openmetrics-text;version=0.0.1",
    "text/plain;version=1.0.0",
])
def test_format_negotiation_is_prometheus_clients(accept: str | None) -> None:
    from prometheus_client import exposition

    _, ctype = exposition.choose_encoder(accept)  # type: ignore[arg-type]  # it takes None too
    got = CONTENT_TYPES[choose_format(accept)]
    assert got.split(";")[0] == ctype.split(";")[0]


@needs_promtool
def test_promtool_check_metrics_is_clean_on_the_textfile(tmp_path: Path) -> None:
    from fipstop.analysis.check import Thresholds, evaluate
    from fipstop.outputs.textfile import textfile

    frames = _frames()
    rep = evaluate(frames[-2], frames[-1], Thresholds(), procfs_root=str(tmp_path))
    text = textfile(rep, 1700000000.0)
    r = _promtool_check(text)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stdout + r.stderr
    fill = next(p for p in rep.perf if p.label == "fill_max")
    assert fill.value is not None and f"fipstop_check_fill_max_ratio {round(fill.value / 100, 9)!r}" in text
    one = evaluate(None, ModelStep()(frames[-1].raw), Thresholds(), procfs_root=str(tmp_path))  # no rate: NaN
    one_text = textfile(one, 1700000000.0)
    assert "fipstop_check_drops_per_second NaN" in one_text

    def series(t: str) -> list[str]:
        return [line.rsplit(" ", 1)[0] for line in t.splitlines() if not line.startswith("#")]

    assert series(one_text) == series(text)  # the same series on every run, whatever the checks found


@needs_promtool
def test_export_is_read_by_promtool_and_prometheus_client(tmp_path: Path) -> None:
    """``fipstop export --format openmetrics``: each family once, each series' points together (prometheus_client's
    strict parser), and what ``promtool tsdb create-blocks-from openmetrics`` turns into blocks."""
    import sys

    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from fipstop.recording.store import RecordingWriter

    assert PROMTOOL is not None
    n = 20
    samples = fixtures.demo_samples(n, hostile=True)
    aux = [{"backends": b, **bans} for b, bans in zip(fixtures.backend_samples(n), demo_ban_aux(n), strict=True)]
    rec = tmp_path / "r.fsr"
    w = RecordingWriter(str(rec), interval_s=1.0, host="h")
    for s, a in zip(samples, aux, strict=True):
        w.append(RawFrame(s, a))
    w.close()
    r = subprocess.run([sys.executable, "-m", "fipstop", "export", str(rec), "--format", "openmetrics"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # prometheus_client's parser takes one point per histogram only (two timestamped points of a one-bucket
    # histogram already fail its +Inf check): the histogram is left to promtool below
    text = "".join(line for line in r.stdout.splitlines(keepends=True) if "fips_ban_time_to_ban_seconds" not in line)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["fips_ring_records"].type == "counter" and fams["fips_consumer_health"].type == "stateset"
    assert "# TYPE fips_ban_time_to_ban_seconds histogram" in r.stdout
    last = {(s.labels["domain"], s.labels["ring"]): s for s in fams["fips_ring_records"].samples}
    snap = _frames(n)[-1].snapshot
    names = [d.name for d in snap.domains]
    assert {k: v.value for k, v in last.items()} == {
        (names[int(x["domain"])], str(int(x["ring"]))): int(x["records_committed"]) for x in snap.rings}
    assert all(s.timestamp is not None for s in fams["fips_ring_records"].samples)
    src = tmp_path / "export.om"
    src.write_text(r.stdout)
    r = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(src), str(tmp_path / "tsdb")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert list((tmp_path / "tsdb").iterdir())


# -- the server ----------------------------------------------------------------------------------------------------

class _ListSource:
    """Frames from a list, the last one repeated; ``block`` makes every poll after the first hang."""

    interval_s = 1.0
    profiling = None

    def __init__(self, frames: list[Frame], block: threading.Event | None = None) -> None:
        self.frames, self.i, self.block, self.polls = frames, 0, block, 0

    def poll(self) -> Frame | None:
        self.polls += 1
        if self.block is not None and self.polls > 1:
            self.block.wait()
        f = self.frames[min(self.i, len(self.frames) - 1)]
        self.i += 1
        return f

    def tap(self, domain: str, ring: int, max_records: int = 32) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _get(url: str, accept: str | None = None, timeout: float = 10) -> tuple[int, str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.headers["Content-Type"], resp.read().decode()


def test_a_scrape_never_waits_behind_a_stuck_probe() -> None:
    stuck = threading.Event()
    srv = MetricsServer(_ListSource(_frames(3), block=stuck), "127.0.0.1", 0, interval_s=0.05)
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        first = _get(url)[2]
        for _ in range(5):  # the sampler hangs in its second poll: scrapes still get the last sample
            code, ctype, body = _get(url, timeout=5)
            assert code == 200 and body == first and ctype == CONTENT_TYPES[TEXT]
        assert srv.samples == 1
    finally:
        stuck.set()
        srv.close()


def test_slowloris_idle_and_vanishing_clients(capfd: pytest.CaptureFixture[str]) -> None:
    limits = ServeLimits(header_timeout_s=1.0, idle_timeout_s=1.0, max_connections=400, backlog=512)
    srv = MetricsServer(_ListSource(_frames(3)), "127.0.0.1", 0, interval_s=0.2, limits=limits)
    srv.start()
    url = f"http://127.0.0.1:{srv.port}/metrics"
    try:
        _get(url)
        slow = []
        for _ in range(150):  # slowloris: a partial request head, never finished
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        results: list[int] = []

        def scrape() -> None:
            try:
                results.append(_get(url, accept="application/openmetrics-text")[0])
            except Exception as e:  # noqa: BLE001 - counted as a failed scrape
                results.append(repr(e))  # type: ignore[arg-type]

        threads = [threading.Thread(target=scrape) for _ in range(200)]  # 200 at once: backlog and concurrency
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results.count(200) == 200, [r for r in results if r != 200][:3]
        for s in slow:  # the server hung up on every one of them after the header timeout
            s.settimeout(10)
            assert s.recv(100) == b""
            s.close()
        for _ in range(20):  # clients that go away early: mid-request, and before reading the answer
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()  # RST
        assert _get(url)[0] == 200
    finally:
        srv.close()
    out, err = capfd.readouterr()
    assert "Traceback" not in err and err == "", err


def test_gzip_for_a_scraper_that_asks() -> None:
    import gzip

    srv = MetricsServer(_ListSource(_frames(3)), "127.0.0.1", 0, interval_s=600)  # one sample: the same body
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        plain = _get(url)[2]
        req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            body = r.read()
        assert gzip.decompress(body).decode() == plain and len(body) < len(plain) / 3
        req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip;q=0, identity"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.headers["Content-Encoding"] is None and r.read().decode() == plain
    finally:
        srv.close()


def test_slow_sockets_beyond_the_cap_cannot_lock_a_scraper_out() -> None:
    limits = ServeLimits(header_timeout_s=30.0, max_connections=20)
    srv = MetricsServer(_ListSource(_frames(3)), "127.0.0.1", 0, interval_s=0.2, limits=limits)
    srv.start()
    try:
        slow = []
        for _ in range(60):
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            slow.append(s)
        for _ in range(10):
            assert _get(f"http://127.0.0.1:{srv.port}/metrics")[0] == 200
        assert srv.evicted >= 40 and srv.refused == 0
        for s in slow:
            s.close()
    finally:
        srv.close()


def test_hostile_requests_never_take_the_server_down(capfd: pytest.CaptureFixture[str]) -> None:
    """A bounded fuzz of the request parser: random, truncated and oversized heads; every one gets an answer or a
    close, nothing reaches stderr, and a normal scrape works after each batch."""
    import random

    rnd = random.Random(20)
    base = [b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text\r\n\r\n",
            b"HEAD / HTTP/1.0\r\n\r\n", b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"]
    srv = MetricsServer(_ListSource(_frames(3)), "127.0.0.1", 0, interval_s=0.5,
                        limits=ServeLimits(header_timeout_s=0.5, idle_timeout_s=0.5))
    srv.start()
    try:
        for batch in range(6):
            for _ in range(50):
                req = bytearray(rnd.choice(base))
                kind = rnd.randrange(5)
                if kind == 0:
                    req = bytearray(rnd.randbytes(rnd.randrange(1, 300)))
                elif kind == 1:
                    for _ in range(rnd.randrange(1, 8)):
                        req[rnd.randrange(len(req))] = rnd.randrange(256)
                elif kind == 2:
                    req = req[: rnd.randrange(len(req))]
                elif kind == 3:
                    req = bytearray(b"GET /" + b"a" * rnd.randrange(10_000, 40_000) + b" HTTP/1.1\r\n\r\n")
                else:
                    req = bytearray(b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * rnd.randrange(1, 3000) + b"\r\n")
                with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
                    try:
                        s.sendall(bytes(req))
                        s.shutdown(socket.SHUT_WR)
                        while s.recv(65536):
                            pass
                    except OSError:
                        pass  # the server closed on us: allowed
            assert _get(f"http://127.0.0.1:{srv.port}/metrics")[0] == 200, batch
    finally:
        srv.close()
    _, err = capfd.readouterr()
    assert err == "", err


def test_ipv6_and_listen_syntax() -> None:
    assert parse_listen("9464") == ("127.0.0.1", 9464)
    assert parse_listen(":9464") == (None, 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    assert parse_listen("0.0.0.0:1") == ("0.0.0.0", 1)
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    srv = MetricsServer(_ListSource(_frames(3)), "::1", 0, interval_s=0.2)
    srv.start()
    try:
        code, ctype, body = _get(f"http://[::1]:{srv.port}/metrics", accept="application/openmetrics-text")
        assert code == 200 and ctype == CONTENT_TYPES[OPENMETRICS] and body.endswith("# EOF\n")
    finally:
        srv.close()


def test_serve_shows_writable_domains_and_corrupt_ring_contents(shm_dir: Path) -> None:
    """What fipstop check sees beside the frames is on /metrics too: the ground truth is a consumer that cannot
    read past the torn record, and the file mode the test set."""
    import os

    from prometheus_client.parser import text_string_to_metric_families

    from fipstop._fips import ECORRUPT, Consumer, Domain, FipsError, Producer
    from fipstop.probes.ring import RingProbe
    from fipstop.sources.live import LiveSource
    from fipstop.sources.probeset import ProbeSet

    with Domain("torn", shm_dir, max_rings=2, max_consumers=2, ring_capacity=4096, max_record=256) as dom, \
            Domain("fine", shm_dir, max_rings=2, max_consumers=1, ring_capacity=4096, max_record=256) as ok:
        cons = Consumer(dom, "ips")
        prod, good = Producer(dom), Producer(ok)
        for _ in range(5):
            prod.log(b"r" * 40)
            good.log(b"g" * 40)
        with open(shm_dir / "fips.torn", "r+b") as f:
            f.seek(dom.header.data_off + prod.ring * dom.ring_capacity)
            f.write((4000).to_bytes(4, "little"))
        with pytest.raises(FipsError) as e:
            b = cons.read()
            if b is not None:
                list(b)
        assert e.value.code == ECORRUPT
        os.chmod(shm_dir / "fips.fine", 0o646)
        src = LiveSource(ProbeSet(RingProbe(shm_dir=str(shm_dir))), 1.0)
        srv = MetricsServer(src, "127.0.0.1", 0, interval_s=0.2)
        srv.start()
        try:
            body = _get(f"http://127.0.0.1:{srv.port}/metrics")[2]
            fams = {f.name: f for f in text_string_to_metric_families(body)}
        finally:
            srv.close()
            src.close()
        if PROMTOOL is not None:  # the live body, the exporter's and the inspection's families included
            r = _promtool_check(body)
            assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stdout + r.stderr
        valid = {(s.labels["domain"], s.labels["ring"]): s.value for s in fams["fips_ring_contents_valid"].samples}
        assert valid == {("torn", str(prod.ring)): 0, ("fine", str(good.ring)): 1}
        writable = {s.labels["domain"]: s.value for s in fams["fips_domain_writable_by_others"].samples}
        assert writable == {"torn": 0, "fine": 1}
        prod.close()
        good.close()
        cons.close()


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_serve_stops_cleanly_with_clients_connected(tmp_path: Path, sig: str) -> None:
    import signal
    import sys

    port = _free_port()
    p = subprocess.Popen([sys.executable, "-m", "fipstop", "--shm-dir", str(tmp_path), "serve", "--listen",
                          f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                idle = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                assert time.monotonic() < deadline and p.poll() is None
                time.sleep(0.1)
        idle.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")  # answered, then kept alive
        assert idle.recv(100).startswith(b"HTTP/1.1 ")
        half = socket.create_connection(("127.0.0.1", port))
        half.sendall(b"GET /met")  # a request head never finished
        time.sleep(0.2)
        p.send_signal(getattr(signal, sig))
        assert p.wait(20) == 0
        assert p.stderr is not None
        assert p.stderr.read() == f"fipstop: serving metrics on http://127.0.0.1:{port}/metrics\n"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
