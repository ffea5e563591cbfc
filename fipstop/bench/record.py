"""``fipstop bench record``: how big recordings are, and what recording costs.

The issue's budget: <= 5 MB per hour for 64 rings and 4 consumers at a 1 s
interval.  A real domain is set up (64 producer threads logging at uneven,
drifting rates through the binding; 4 consumers reading and releasing), the
real ``RingProbe`` samples it every ``--interval`` (with the host's
``BackendsProbe``, as ``fipstop record`` does), and each sample is stored by
the real recorder (``RecordingWriter``: SQLite WAL, one
transaction per frame) - the file's growth is what we report.  Side by side,
on the very same samples: the raw snapshot bytes (what a recorder storing the
binding's arrays would write) and those bytes zlib-compressed without our
delta coding, so the ratio shows what the codec buys.  Also measured: the
encode time per frame and the time to seek to a random time and decode the
frame there.
"""

from __future__ import annotations

import datetime as _dt
import os
import random
import sys
import tempfile
import threading
import time
import zlib
from typing import Any

from fipstop.bench.results import Output, machine_info, publish
from fipstop.config import BackendsConfig
from fipstop.model.raw import RawFrame
from fipstop.probes.backends import BackendsProbe
from fipstop.probes.ring import RingProbe
from fipstop.recording.store import RecordingReader, RecordingWriter

SCHEMA = 1
BUDGET_MB_PER_HOUR = 5.0


def _log(msg: str) -> None:
    print(f"bench record: {msg}", file=sys.stderr, flush=True)


def _workload(shm: str, rings: int, consumers: int, stop: threading.Event) -> tuple[Any, list[threading.Thread]]:
    """The bench's producers and consumers running on threads, and their domain (which the caller closes)."""
    from fipstop._fips import Consumer, Domain, Producer

    dom = Domain("benchrec", shm, max_rings=rings + 8, max_consumers=consumers + 2, ring_capacity=1 << 16,
                 max_record=512)
    threads = []

    def produce(i: int) -> None:
        p = Producer(dom)
        rng = random.Random(i)
        rate = rng.uniform(50, 2000)  # records/s, drifting
        msg = b"client @0x7f00 10.%d.%d.%d#53 (example.com): query: example.com IN A +E(0) (127.0.0.1)"
        while not stop.is_set():
            rate = min(max(rate * rng.uniform(0.9, 1.1), 20), 4000)
            n = max(1, int(rate / 20))
            for k in range(n):
                p.log(msg % (i, k & 255, rng.randrange(256)))
            stop.wait(0.05)

    def consume(j: int) -> None:
        c = Consumer(dom, f"bench-consumer-{j}")
        try:
            while not stop.is_set():
                b = c.read()
                if b is not None:
                    c.release(b)
                else:
                    stop.wait(0.01 * (j + 1))  # consumers of different speeds: lags differ
        finally:
            c.close()

    for i in range(rings):
        threads.append(threading.Thread(target=produce, args=(i,), daemon=True))
    for j in range(consumers):
        threads.append(threading.Thread(target=consume, args=(j,), daemon=True))
    for t in threads:
        t.start()
    return dom, threads


def _thread_io() -> tuple[int, int]:
    """(wchar, write_bytes) of the calling thread so far (/proc/thread-self/io): what the recorder
    itself wrote - the producer and consumer threads of the workload share the process."""
    vals = {}
    with open("/proc/thread-self/io") as f:
        for line in f:
            k, _, v = line.partition(":")
            vals[k.strip()] = int(v)
    return vals.get("wchar", 0), vals.get("write_bytes", 0)


def _measure(rings: int, consumers: int, seconds: float, interval: float) -> dict[str, Any]:
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="fipstop-bench-rec-") as tmp:
        shm = os.path.join(tmp, "shm")
        os.mkdir(shm)
        stop = threading.Event()
        dom, parts = _workload(shm, rings, consumers, stop)
        time.sleep(1.0)  # every ring created, consumers joined
        probe = RingProbe(shm_dir=shm)
        # the recorder records the other probes too: the host's backends, as `fipstop record` does
        backends = BackendsProbe(BackendsConfig())
        path = os.path.join(tmp, "r.fsr")
        io0 = _thread_io()
        w = RecordingWriter(path, interval_s=interval, host="bench")
        raw_b = zlib_b = 0
        enc_ns = []
        n = 0
        next_t = time.monotonic()
        end = next_t + seconds
        in_use = (0, 0)
        while time.monotonic() < end:
            s = probe.sample()
            for d in s.domains:
                raw_b += d.rings.nbytes + d.consumers.nbytes + d.pos.nbytes
                zlib_b += len(zlib.compress(d.rings.tobytes() + d.consumers.tobytes() + d.pos.tobytes(), 6))
                in_use = (int(d.active_ring_indices().size), int(d.active_consumer_indices().size))
            aux = {"backends": backends.sample()}
            t0 = time.perf_counter_ns()
            w.append(RawFrame(s, aux))
            enc_ns.append(time.perf_counter_ns() - t0)
            n += 1
            next_t += interval
            time.sleep(max(0.0, next_t - time.monotonic()))
        stop.set()
        for part in parts:
            part.join(timeout=5)
        probe.close()
        w.close()  # its last checkpoint is part of what recording writes
        io1 = _thread_io()
        dom.close()
        file_b = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp) if f.startswith("r.fsr"))
        # what each frame adds to the file: the bytes its rows and index entries take in their pages
        # (a short run's file size is mostly the fixed first pages, which an hour amortises)
        import sqlite3

        db = sqlite3.connect(path)
        try:
            (used,), = db.execute("SELECT SUM(pgsize - unused) FROM dbstat WHERE name IN ('frames', 'frames_t')")
            (fixed,), = db.execute("SELECT SUM(pgsize) FROM dbstat WHERE name NOT IN ('frames', 'frames_t')")
        except sqlite3.Error:
            used = fixed = None
        db.close()
        # seek cost: random times, each decoded from the nearest key frame
        r = RecordingReader(path)
        first, last = r.first_t_ns, r.last_t_ns
        rng = random.Random(1)
        seek_ms = []
        for _ in range(20):
            at = rng.randrange(first, last + 1)
            t0 = time.perf_counter_ns()
            seq = r.seq_at(at)
            assert seq is not None, "a time inside the recording has a frame"
            r.read(seq)
            seek_ms.append((time.perf_counter_ns() - t0) / 1e6)
        r.close()
    per_hour = 3600.0 / interval
    ours = w.bytes_written / n
    wchar, wbytes = (io1[0] - io0[0]) / n, (io1[1] - io0[1]) / n
    on_disk = used / n if used else file_b / n
    return {
        "frames": n,
        "interval_s": interval,
        "rings_in_use": in_use[0],
        "consumers_in_use": in_use[1],
        "bytes_per_frame": {"raw_snapshot": round(raw_b / n, 1), "zlib_only": round(zlib_b / n, 1),
                            "fipstop_codec": round(ours, 1), "fipstop_file_on_disk": round(on_disk, 1),
                            "fipstop_written": round(wbytes, 1), "fipstop_written_wchar": round(wchar, 1)},
        "written_method": "/proc/thread-self/io of the recording thread from opening the file to closing it: "
                          "write_bytes (sent to the storage layer) and wchar (passed to write calls), per frame",
        "file_bytes_at_end": file_b,
        "file_fixed_bytes": fixed,
        "on_disk_method": "SQLite dbstat: bytes used in the pages of the frames table and its index, per frame; "
                          "MB/hour adds the file's fixed pages once",
        "ratio_vs_zlib_only": round((zlib_b / n) / ours, 2) if ours else None,
        "mb_per_hour": {"raw_snapshot": round(raw_b / n * per_hour / 1e6, 2),
                        "zlib_only": round(zlib_b / n * per_hour / 1e6, 2),
                        "fipstop_file_on_disk": round((on_disk * per_hour + (fixed or 0)) / 1e6, 2),
                        "fipstop_written": round(wbytes * per_hour / 1e6, 2)},
        "encode_and_commit_ms": {"p50": round(float(np.percentile(enc_ns, 50)) / 1e6, 3),
                                 "p95": round(float(np.percentile(enc_ns, 95)) / 1e6, 3)},
        "seek_ms": {"p50": round(float(np.percentile(seek_ms, 50)), 2),
                    "p95": round(float(np.percentile(seek_ms, 95)), 2)},
    }


def render_table(doc: dict[str, Any]) -> str:
    m = doc["result"]
    b, h = m["bytes_per_frame"], m["mb_per_hour"]
    lines = [f"recording size: {m['rings_in_use']} rings, {m['consumers_in_use']} consumers, "
             f"{m['frames']} frames every {m['interval_s']:g} s",
             f"  {'':24}{'bytes/frame':>12}{'MB/hour':>10}",
             f"  {'raw snapshot':24}{b['raw_snapshot']:>12.0f}{h['raw_snapshot']:>10.2f}",
             f"  {'zlib only (baseline)':24}{b['zlib_only']:>12.0f}{h['zlib_only']:>10.2f}",
             f"  {'fipstop file on disk':24}{b['fipstop_file_on_disk']:>12.0f}{h['fipstop_file_on_disk']:>10.2f}",
             f"  {'fipstop writes (I/O)':24}{b['fipstop_written']:>12.0f}{h['fipstop_written']:>10.2f}",
             f"  codec alone {b['fipstop_codec']:.0f} B/frame, {m['ratio_vs_zlib_only']}x smaller than zlib only",
             f"  write p50 {m['encode_and_commit_ms']['p50']} ms, seek+decode p95 {m['seek_ms']['p95']} ms"]
    for t in doc["targets"]:
        lines.append(f"  target {t['name']} {t['target']}: {t['measured']} -> {t['verdict']}")
    return "\n".join(lines)


def main(output: Output, *, quick: bool = False, seconds: float | None = None) -> int:
    """Run ``fipstop bench record``, publish the result."""
    seconds = seconds or (4.0 if quick else 120.0)
    interval = 0.5 if quick else 1.0
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    _log(f"64 producer threads, 4 consumers, a frame every {interval:g} s for {seconds:g} s ...")
    res = _measure(64, 4, seconds, interval)
    mbh = res["mb_per_hour"]["fipstop_file_on_disk"]
    doc = {
        "bench": "record",
        "schema": SCHEMA,
        "command": output.command,
        "date": now.isoformat().replace("+00:00", "Z"),
        "machine": machine_info(),
        "quick": quick,
        "result": res,
        "targets": [{"name": "mb_per_hour_64_rings_4_consumers_1s", "target": f"<= {BUDGET_MB_PER_HOUR:g}",
                     "measured": mbh,
                     "verdict": ("pass" if mbh <= BUDGET_MB_PER_HOUR else "fail") if not quick else "quick run"}],
    }
    publish("record", doc, output, now, render_table, _log)
    return 0
