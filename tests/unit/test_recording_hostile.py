"""Hostile recordings (issue 17 items 6 and 13): a recording comes from anywhere.

Each crafted file makes `fipstop export` (and the replay source) say one line naming the file,
exit 2, no traceback, no hang: deeply nested aux JSON, TEXT in the ring or t_ns columns, a FIFO
named as the recording, a NaN interval, an undecodable first frame, an LZMA bomb.  And what the
recorder writes: recordings are 0640 like the domains, and a first frame that cannot be written
leaves no stub file.
"""

from __future__ import annotations

import lzma
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

from fipstop.errors import FipsError
from fipstop.fixtures import demo_samples
from fipstop.model.raw import RawFrame
from fipstop.recording.replay import ReplaySource
from fipstop.recording.store import RecordingReader, RecordingWriter


def good(path: Path, n: int = 5) -> Path:
    w = RecordingWriter(str(path), interval_s=1.0, host="h")
    for s in demo_samples(n):
        w.append(RawFrame(s))
    w.close()
    return path


def export(path: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fipstop", "export", str(path), "--format", "jsonl"],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line_error(r: subprocess.CompletedProcess, path: Path, *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr[-2000:]
    assert r.stderr.startswith(f"fipstop: {path}"), r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def sql(path: Path, statement: str, args: tuple = ()) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(statement, args)
    db.close()


def test_deeply_nested_aux_json(tmp_path: Path) -> None:
    p = good(tmp_path / "r.fsr")
    deep = b"[" * 200_000 + b"]" * 200_000
    sql(p, "UPDATE frames SET aux = ? WHERE seq = (SELECT MIN(seq) FROM frames)", (b"\x00" + zlib.compress(deep),))
    one_line_error(export(p), p, "frame", "aux")


@pytest.mark.parametrize("column", ["ring", "t_ns", "mono_ns", "aux", "marks", "key"])
def test_text_in_a_column(tmp_path: Path, column: str) -> None:
    p = good(tmp_path / "r.fsr")
    sql(p, f"UPDATE frames SET {column} = 'not a number or a blob' WHERE seq = (SELECT MAX(seq) FROM frames)")
    one_line_error(export(p), p, "corrupted")


def test_a_fifo_named_as_the_recording(tmp_path: Path) -> None:
    p = tmp_path / "fifo.fsr"
    os.mkfifo(p)
    one_line_error(export(p, timeout=20), p, "not a regular file")


def test_a_nan_interval(tmp_path: Path) -> None:
    p = good(tmp_path / "r.fsr")
    for bad in ("nan", "inf", "-1", "0", "x"):
        sql(p, "UPDATE meta SET value = ? WHERE key = 'interval_s'", (bad,))
        one_line_error(export(p), p, "interval")
        with pytest.raises(FipsError, match="interval"):
            ReplaySource(str(p))


def test_an_undecodable_first_frame(tmp_path: Path) -> None:
    p = good(tmp_path / "r.fsr")
    sql(p, "UPDATE frames SET ring = ? WHERE seq = (SELECT MIN(seq) FROM frames)", (b"\x00garbage" * 10,))
    one_line_error(export(p), p, "frame")
    # the replay says so before the dashboard starts, instead of waiting for ever
    with pytest.raises(FipsError, match="frame"):
        ReplaySource(str(p))


def test_an_lzma_bomb_is_bounded_by_the_frame_declared_size(tmp_path: Path) -> None:
    """A small blob that decompresses to 256 MiB: the decoder stops at what the frame's header says."""
    p = good(tmp_path / "r.fsr")
    filters = [{"id": lzma.FILTER_LZMA2, "preset": 9, "dict_size": 1 << 16, "lc": 0, "lp": 0, "pb": 0}]
    first = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=filters)
    db = sqlite3.connect(p)
    (blob,), = db.execute("SELECT ring FROM frames WHERE seq = (SELECT MIN(seq) FROM frames)").fetchall()
    db.close()
    raw = first.decompress(blob)
    bomb = lzma.compress(raw + b"\0" * (255 << 20), format=lzma.FORMAT_RAW, filters=filters)
    assert len(bomb) < 200_000
    sql(p, "UPDATE frames SET ring = ? WHERE seq = (SELECT MIN(seq) FROM frames)", (bomb,))
    r = subprocess.run([sys.executable, "-c", "import resource, subprocess, sys; "
                        "r = subprocess.run([sys.executable, '-m', 'fipstop', 'export', sys.argv[1], '--format', 'jsonl'], "
                        "capture_output=True, text=True); "
                        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
                        "sys.stderr.write(r.stderr); sys.exit(r.returncode)", str(p)],
                       capture_output=True, text=True, timeout=120)
    one_line_error(r, p, "frame")
    assert int(r.stdout) < 120_000, f"export peaked at {int(r.stdout) // 1024} MiB"  # KiB
    print(f"export of the bomb peaked at {int(r.stdout) // 1024} MiB")


def test_recordings_are_0640_like_the_domains(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        p = good(tmp_path / "r.fsr")
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    w = RecordingWriter(str(p), interval_s=1.0, host="h")  # appending keeps it, the WAL gets it
    w.append(RawFrame(demo_samples(1)[0]))
    assert stat.S_IMODE(Path(str(p) + "-wal").stat().st_mode) == 0o640
    w.close()


def test_a_failed_first_frame_leaves_no_stub(tmp_path: Path) -> None:
    p = tmp_path / "r.fsr"
    w = RecordingWriter(str(p), interval_s=1.0, host="h")
    w.db.execute("DROP TABLE frames")  # the first frame cannot be written
    with pytest.raises(FipsError, match="cannot write"):
        w.append(RawFrame(demo_samples(1)[0]))
    w.close()
    assert not p.exists() and not Path(str(p) + "-wal").exists()
    # an existing recording is never removed
    good(p)
    w = RecordingWriter(str(p), interval_s=1.0, host="h")
    w.db.execute("DROP TABLE frames")
    with pytest.raises(FipsError):
        w.append(RawFrame(demo_samples(1)[0]))
    w.close()
    assert p.exists()


def test_export_of_a_fifo_does_not_block_a_thread(tmp_path: Path) -> None:
    p = tmp_path / "fifo.fsr"
    os.mkfifo(p)
    done = threading.Event()

    def go() -> None:
        with pytest.raises(FipsError):
            RecordingReader(str(p))
        done.set()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(10)
    assert done.is_set()


@pytest.mark.root
def test_a_small_filesystem_holds_the_recording_not_the_wal(tmp_path: Path) -> None:
    """Issue 17 item 7: with 64 KiB pages and a 64 MiB WAL, a 3 MB filesystem filled after 18 frames.
    4 KiB pages and a WAL checkpointed every 256 pages (cut back to 1 MiB) leave the room to frames."""
    from fipstop.fixtures import many_rings_samples

    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        w = RecordingWriter(str(mnt / "r.fsr"), interval_s=1.0, host="h")
        samples = many_rings_samples(64, 3000, seed=5)
        with pytest.raises(FipsError, match="disk full after"):
            for s in samples:
                w.append(RawFrame(s))
        kept = w.frames_written
        w.close()
        print(f"\n3 MiB tmpfs: {kept} frames of {w.bytes_written // max(kept, 1)} bytes before it was full")
        assert kept >= 500
        rd = RecordingReader(str(mnt / "r.fsr"))
        assert rd.count == kept
        rd.close()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
