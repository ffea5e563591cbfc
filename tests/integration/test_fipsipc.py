"""fipstop against the FIPS paper's own prototype: its real producer and consumer.

The prototype (FIPS-IPC, built from its source by the test set-up into
build/fipsipc; skipped with the reason when its source or libconfig-dev is
missing) runs its own test programs, 16 threads each, on a segment of 16
rings of 4096 slots.  The oracles are the programs' own reports
(tests/integration/fipsipc_run.py): the producer says how many batches
each thread had committed when its ring was full, the consumer prints one
line per batch it released.  The probe must agree with them:

- fill and lag: exact where the reports are exact (a blocked producer's
  counts), within one batch per consumer thread where they are not (the
  consumer prints after it releases);
- a killed reader (the ring fills and the writer waits for ever) and a
  killed writer (nothing more is committed) are diagnosed as such.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fipsipc_run import BATCH, THREADS, Run
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from fipstop.analysis.diagnose import diagnose
from fipstop.bench.fipsipc_proto import build_program, prototype_src, write_config
from fipstop.config import FipsIpcConfig, ProbeConfig
from fipstop.model.fipsipc import IpcSegmentView, derive_fipsipc
from fipstop.model.snapshot import Snapshot
from fipstop.outputs.openmetrics import render
from fipstop.probes import fipsipc_layout as L
from fipstop.probes.fipsipc import FipsIpcProbe
from fipstop.sources.live import LiveSource
from fipstop.sources.probeset import build_probes

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    for prog in ("producer", "consumer"):
        binary, why = build_program(prog)
        if binary is None:
            pytest.skip(why)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    r = Run(tmp_path)
    yield r
    r.close()


def view(run: Run) -> IpcSegmentView:
    s = FipsIpcProbe([run.shm_name], discover=False).sample()
    assert not s.rejected, s.rejected
    v = derive_fipsipc(None, s)
    assert len(v.segments) == 1
    return v.segments[0]


def test_struct_offsets_match_the_prototype_header(tmp_path: Path) -> None:
    """The parser's offsets and sizes, against the prototype's own fips_buf.h (gcc, this machine)."""
    root, why = prototype_src()
    assert root is not None, why
    src = tmp_path / "off.c"
    src.write_text(
        "#include <fips_buf.h>\n#include <stdio.h>\n#define O(T,f) printf(\"%zu \", offsetof(T,f))\n"
        "int main(void){O(fips_buf_header_t,checksum);O(fips_buf_header_t,segment_count);"
        "O(fips_buf_header_t,line_size);O(fips_buf_header_t,line_MASK);O(fips_buf_header_t,first_segment_offset);"
        "O(fips_buf_header_t,reader_assignments_offset);O(fips_buf_segment_header_t,index);"
        "O(fips_buf_segment_header_t,writer);O(fips_buf_segment_header_t,readers_offset);"
        "printf(\"%zu %zu %zu %zu %zu %zu\\n\", sizeof(fips_buf_header_t), sizeof(fips_buf_segment_header_t),"
        "sizeof(fips_buf_pointer_t), sizeof(fips_buf_list_t), sizeof(fips_buf_sqe_t),"
        "sizeof(fips_buf_assignment_t));}\n")
    exe = tmp_path / "off"
    subprocess.run(["cc", "-I", str(root / "src/lib/include"), str(src), "-o", str(exe)], check=True)
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    assert got == [56, 64, 72, 80, 88, 112, 16, 20, 32, L.HEADER_SIZE, L.SEGMENT_HEADER_SIZE, L.POINTER_SIZE,
                   L.LIST_SIZE, L.SQE_SIZE, L.ASSIGNMENT_SIZE]


def test_fill_and_lag_agree_with_the_programs_reports(run: Run) -> None:
    n = run.slots
    run.start("consumer")
    run.wait_attached("consumer")
    run.stop("consumer")  # it has released nothing
    run.start("producer")
    written = run.wait_producer_blocked()
    run.stop("producer")
    seg = view(run)
    assert (seg.writers_registered, seg.readers_registered, seg.attached, seg.gone) == (1, 1, 2, 0)
    assert seg.slots == n and seg.overwrite is False
    assert seg.readers[0].threads == THREADS
    for ring in seg.rings:
        w = written[ring.ring] * BATCH
        assert w < n  # nothing released: the producer stopped before lapping
        assert ring.committed_pos == w and ring.lag_slots == w
        assert ring.fill_pct == pytest.approx(100.0 * w / n)
        assert n - BATCH <= w <= n - 1  # full within one batch: where the writer must wait
        assert ring.writer == "in use"

    # the consumer drains everything while the producer is stopped
    cons = run.reports["consumer"]
    run.signal("consumer", signal.SIGCONT)
    total = sum(written.values()) * BATCH
    run.wait_for(lambda: cons.reads * BATCH == total, "the consumer reporting every record read")
    time.sleep(0.2)
    seg = view(run)
    assert [r.lag_slots for r in seg.rings] == [0] * THREADS
    assert [r.committed_pos for r in seg.rings] == [written[i] * BATCH % n for i in range(THREADS)]

    # both run, then the consumer stops: the producer fills every ring again and reports its counts
    run.signal("producer", signal.SIGCONT)
    time.sleep(1.0)
    run.stop("consumer")
    with run.reports["producer"].lock:
        run.reports["producer"].tries.clear()
    written = run.wait_producer_blocked()
    run.stop("producer")
    seg = view(run)
    released_reported = run.settled_reads() * BATCH
    lag_reported = sum(written.values()) * BATCH - released_reported
    lag_probe = sum(r.lag_slots or 0 for r in seg.rings)
    # the consumer prints after it releases: its report trails by at most one batch per thread
    assert 0 <= lag_reported - lag_probe <= BATCH * THREADS, (lag_reported, lag_probe)
    for ring in seg.rings:
        assert ring.committed_pos == written[ring.ring] * BATCH % n
        assert n - BATCH <= (ring.fill_pct or 0) * n / 100 <= n - 1


def live(run: Run, shm_dir: Path) -> LiveSource:
    cfg = ProbeConfig(shm_dir=str(shm_dir), domains=(), backends=None, bans_domain=None, cpu=False,
                      fipsipc=FipsIpcConfig((run.shm_name,), discover=False))
    return LiveSource(build_probes(cfg), 0.3)


def window(src: LiveSource, frames: int = 4, gap_s: float = 0.3) -> list[Snapshot]:
    out = []
    for _ in range(frames):
        out.append(src.poll().snapshot)
        time.sleep(gap_s)
    return out


def test_killed_reader_is_diagnosed(run: Run, shm_dir: Path) -> None:
    run.start("consumer")
    run.wait_attached("consumer")
    run.start("producer")
    time.sleep(0.5)
    run.kill("consumer")
    run.wait_producer_blocked()
    src = live(run, shm_dir)
    try:
        snaps = window(src)
    finally:
        src.close()
    seg = snaps[-1].fipsipc.segments[0]  # type: ignore[union-attr]
    assert seg.gone == 1 and seg.attached == 1
    found = diagnose(snaps)
    ids = [f.id for f in found]
    assert ids[0] == "fipsipc-reader-gone", found
    assert "writer" in found[0].title and "wait" in found[0].title
    assert "fipsipc-writer-gone" not in ids


def test_killed_writer_is_diagnosed(tmp_path: Path, shm_dir: Path) -> None:
    # Up to three fresh segments: the prototype's own release race (Run.release_race) can leave a reader that
    # never drains, whatever fipstop does; a try is repeated only when that is what happened.
    races = []
    for attempt in range(3):
        d = tmp_path / f"try{attempt}"
        d.mkdir()
        run = Run(d)
        try:
            run.start("consumer")
            run.wait_attached("consumer")
            run.start("producer")
            run.wait_writers_running()  # not during an attach (see there)
            time.sleep(0.2)
            run.kill("producer")
            src = live(run, shm_dir)
            try:
                def drained(r: Run = run) -> bool:
                    return all(x.lag_slots == 0 for x in view(r).rings) or bool(r.release_race())
                run.wait_for(drained, "the consumer catching up")
                if why := run.release_race():
                    races.append(why)
                    continue
                snaps = window(src)
            finally:
                src.close()
        finally:
            run.close()
        seg = snaps[-1].fipsipc.segments[0]  # type: ignore[union-attr]
        assert seg.gone == 1 and seg.attached == 1 and seg.writer_moved is False
        found = diagnose(snaps)
        ids = [f.id for f in found]
        assert "fipsipc-writer-gone" in ids, found
        assert "fipsipc-reader-gone" not in ids
        return
    raise AssertionError(f"the prototype's release race in every try: {races}")


def test_a_lock_left_held_by_a_dead_thread_is_diagnosed(run: Run, shm_dir: Path) -> None:
    """The prototype's assignment_lock is a plain process-shared mutex: a process killed while it holds it
    (inside fips_buf_attach) leaves it locked for ever. fipstop reads the holder's tid from the mutex, sees it
    gone, says so; the oracle is the prototype itself: a consumer started after that never gets attached."""
    binary, why = build_program("lock-holder", (Path(__file__).with_name("fipsipc_lock_holder.c"),))
    assert binary is not None, why
    env = {**os.environ, "FIPS_BUF_CONF": str(run.conf)}
    holder = subprocess.Popen([str(binary)], env=env, cwd=run.dir, stdout=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        seg = view(run)
        assert (seg.lock_owner, seg.lock_owner_alive) == (holder.pid, True)  # a live holder: nothing wrong
        holder.kill()
        holder.wait(10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
    seg = view(run)
    assert (seg.lock_owner, seg.lock_owner_alive) == (holder.pid, False)
    src = live(run, shm_dir)
    try:
        snaps = window(src)
    finally:
        src.close()
    found = diagnose(snaps)
    assert found and found[0].id == "fipsipc-lock-orphaned", found
    assert str(holder.pid) in found[0].title and f"ipcrm -m {seg.shmid}" in found[0].remedy
    r = fipstop("--shm-dir", str(shm_dir), "snapshot", "--fipsipc", run.shm_name)
    assert f"assignment lock held by thread {holder.pid}, which is gone" in r.stdout, r.stdout + r.stderr
    # the prototype agrees: its consumer's threads block in fips_buf_attach and never report "attach"
    run.start("consumer")
    time.sleep(2.0)
    assert run.reports["consumer"].attached == 0


def fipstop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fipstop", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_snapshot_check_record_metrics_show_the_prototype(run: Run, shm_dir: Path, tmp_path: Path) -> None:
    """Every output, against the producer's own counts (a blocked producer: exact)."""
    n = run.slots
    run.start("consumer")
    run.wait_attached("consumer")
    run.stop("consumer")
    run.start("producer")
    written = {t: b * BATCH for t, b in run.wait_producer_blocked().items()}
    run.stop("producer")

    r = fipstop("--shm-dir", str(shm_dir), "snapshot", "--fipsipc", run.shm_name, "--json")
    assert r.returncode == 0, r.stderr
    (seg,) = json.loads(r.stdout)["fipsipc"]["segments"]
    assert seg["label"] == run.shm_name and seg["gone"] == 0
    assert [x["lag_slots"] for x in seg["rings"]] == [written[i] for i in range(THREADS)]
    assert [x["fill_pct"] for x in seg["rings"]] == [round(100 * written[i] / n, 3) for i in range(THREADS)]
    assert all(x["commit_per_s_est"] == 0 for x in seg["rings"])  # stopped: nothing moved in the window

    r = fipstop("--shm-dir", str(shm_dir), "snapshot", "--fipsipc", run.shm_name)
    assert r.returncode == 0 and f"{100 * written[0] / n:.1f}%" in r.stdout and "no FIPS domain" not in r.stdout

    r = fipstop("--shm-dir", str(shm_dir), "check", "--fipsipc", run.shm_name, "--window", "0.2", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 2 and doc["status_text"] == "CRITICAL", doc
    perf = {p["label"]: p["value"] for p in doc["perfdata"]}
    assert perf["fipsipc_fill_max"] == round(100 * max(written.values()) / n, 2)
    assert perf["fipsipc_lag_max_records"] == max(written.values())

    rec = tmp_path / "rec.fipsrec"
    r = fipstop("--shm-dir", str(shm_dir), "record", "-o", str(rec), "--fipsipc", run.shm_name, "--interval", "0.2",
                "--duration", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    r = fipstop("export", str(rec), "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    frames = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(frames) >= 3
    for f in frames:
        (s,) = f["fipsipc"]["segments"]
        assert [x["lag_slots"] for x in s["rings"]] == [written[i] for i in range(THREADS)]

    src = live(run, shm_dir)  # what `fipstop serve --fipsipc NAME` answers on /metrics
    try:
        text = render(src.poll().snapshot)
    finally:
        src.close()
    got = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "fips_ipc_ring_slowest_lag_records":
                got[int(smp.labels["ring"])] = int(smp.value)
    assert got == {i: written[i] for i in range(THREADS)}


class SeqProc:
    """One of fipsipc_seq.c's two programs, driven line by line."""

    def __init__(self, binary: Path, role: str, conf: Path, cwd: Path) -> None:
        self.p = subprocess.Popen([str(binary), role], env={**os.environ, "FIPS_BUF_CONF": str(conf)}, cwd=cwd,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        assert self.ask(None) == "ready"

    def ask(self, cmd: str | None) -> str:
        assert self.p.stdin is not None and self.p.stdout is not None
        if cmd is not None:
            self.p.stdin.write(cmd + "\n")
            self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)


def test_lap_estimates_match_the_readers_sequence_gaps(tmp_path: Path) -> None:
    """OVERWRITE: what the probe estimates as lapped is what a reader of the
    prototype's ring finds missing in the sequence numbers it reads - as long
    as the writer writes less than one ring between two samples (beyond that
    the estimate is a lower bound, as documented)."""
    binary, why = build_program("fipsipc_seq", (Path(__file__).with_name("fipsipc_seq.c"),))
    assert binary is not None, why
    run = Run(tmp_path, exp=12, line_size=32, overwrite=True)
    n = run.slots
    write_config(run.conf, run.shm_name, line_size=32, line_count_exp=12, segments=1, readers=2,
                 reader_threads=1, overwrite=True)
    procs: list[SeqProc] = []
    try:
        cons = SeqProc(binary, "consumer", run.conf, tmp_path)
        procs.append(cons)
        prod = SeqProc(binary, "producer", run.conf, tmp_path)
        procs.append(prod)
        probe = FipsIpcProbe([run.shm_name], discover=False)
        prev = probe.sample()
        lapped_est = 0
        skipped_before = 0

        def step(cmd: tuple[SeqProc, str] | None = None) -> int:
            """Run a command, sample; the lap estimate of that interval."""
            nonlocal prev
            if cmd is not None:
                cmd[0].ask(cmd[1])
            cur = probe.sample()
            (seg,) = derive_fipsipc(prev, cur).segments
            prev = cur
            assert seg.overwrite and seg.positions[0].lapped_slots_est is not None
            return seg.positions[0].lapped_slots_est

        assert step((prod, "w 3000")) == 0
        assert step((cons, "r")) == 0
        lapped_est += step((prod, "w 3000"))
        lapped_est += step((prod, "w 2000"))  # 5000 unread > 4096 slots: lapped once
        assert lapped_est == n
        out = cons.ask("r").split()
        lapped_est += step()
        skipped = int(out[3])
        assert skipped == lapped_est == n, out
        skipped_before = skipped

        # more than a ring between two samples: the estimate cannot see whole laps, it stays a lower bound
        est = step((prod, f"w {3 * n - 100}"))
        skipped = int(cons.ask("r").split()[3]) - skipped_before
        step()
        assert skipped == 2 * n and 0 <= est <= skipped
    finally:
        for p in procs:
            p.close()
        run.close()


def test_tap_copies_the_newest_records(tmp_path: Path, shm_dir: Path) -> None:
    """The tap against what a sequence-numbered producer wrote on the prototype's library."""
    binary, why = build_program("fipsipc_seq", (Path(__file__).with_name("fipsipc_seq.c"),))
    assert binary is not None, why
    run = Run(tmp_path, exp=8, line_size=32)
    write_config(run.conf, run.shm_name, line_size=32, line_count_exp=8, segments=1, readers=2, reader_threads=1)
    procs: list[SeqProc] = []
    try:
        procs.append(SeqProc(binary, "consumer", run.conf, tmp_path))
        prod = SeqProc(binary, "producer", run.conf, tmp_path)
        procs.append(prod)
        assert prod.ask("w 100") == "wrote 100"
        r = fipstop("--shm-dir", str(shm_dir), "snapshot", "--fipsipc", run.shm_name, "--fipsipc-tap", "3",
                    "--json")
        assert r.returncode == 0, r.stderr
        (tap,) = json.loads(r.stdout)["fipsipc"]["taps"]
        assert [x["payload"] for x in tap["records"]] == ["seq 97\\x00", "seq 98\\x00", "seq 99\\x00"]
        assert [x["slot"] for x in tap["records"]] == [97, 98, 99] and tap["maybe_rewritten"] is False
        r = fipstop("--shm-dir", str(shm_dir), "snapshot", "--fipsipc", run.shm_name, "--fipsipc-tap", "2")
        assert "slot 99: seq 99\\x00" in r.stdout and "2 newest record(s)" in r.stdout
    finally:
        for p in procs:
            p.close()
        run.close()


@pytest.mark.parametrize("interval_s", [0.1, 1.0])
def test_rate_estimates_add_up_to_what_the_producer_wrote(run: Run, shm_dir: Path, interval_s: float) -> None:
    """At 10 Hz and 1 Hz: the commit-rate estimates times each interval add up to the records the producer
    says it committed, per ring (it fills its rings once and waits: less than a lap per interval)."""
    run.start("consumer")
    run.wait_attached("consumer")
    run.stop("consumer")
    cfg = ProbeConfig(shm_dir=str(shm_dir), domains=(), backends=None, bans_domain=None, cpu=False,
                      fipsipc=FipsIpcConfig((run.shm_name,), discover=False))
    src = LiveSource(build_probes(cfg), interval_s)
    try:
        src.poll()
        run.start("producer")
        written = run.wait_producer_blocked()
        sums = [0.0] * THREADS
        for _ in range(2):
            time.sleep(interval_s)
            seg = src.poll().snapshot.fipsipc.segments[0]  # type: ignore[union-attr]
            assert seg.dt_s > 0
            for r in seg.rings:
                assert r.commit_per_s_est is not None
                sums[r.ring] += r.commit_per_s_est * seg.dt_s
    finally:
        src.close()
    assert [round(x) for x in sums] == [written[i] * BATCH for i in range(THREADS)]


def test_dashboard_shows_the_producer_counts(run: Run, shm_dir: Path) -> None:
    """The live dashboard (key 6) on the real prototype: its row says what the producer reported."""
    import asyncio

    from fipstop.views.app import FipsTopApp
    from fipstop.views.backends import BackendsScreen
    from fipstop.views.widgets.table import VirtualTable

    n = run.slots
    run.start("consumer")
    run.wait_attached("consumer")
    run.stop("consumer")
    run.start("producer")
    written = {t: b * BATCH for t, b in run.wait_producer_blocked().items()}
    run.stop("producer")
    app = FipsTopApp(live(run, shm_dir))

    async def go() -> str:
        async with app.run_test(size=(200, 50)) as pilot:
            for _ in range(400):
                await pilot.pause(0.02)
                if app.frames_received >= 2:
                    break
            await pilot.press("6")
            await pilot.pause(0.3)
            assert isinstance(app.screen, BackendsScreen)
            table = app.screen.query_one("#bk-queues", VirtualTable)
            lines = [table.render_line(y).text for y in range(min(table.row_count + 1, table.size.height))]
            return next(ln for ln in lines if ln.startswith("fipsipc"))

    try:
        row = asyncio.run(go())
    finally:
        app.source.close()
    worst = max(written.values())
    assert f"{worst} rec" in row and f"fill max {100 * worst / n:.1f}%" in row, row
    assert "~0" in row and "1w/1r registered, 2 attached" in row and "gone" not in row
