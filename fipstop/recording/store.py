"""The recording file: raw frames in SQLite (WAL), seekable by time.

Why SQLite: it is crash-safe by construction (each frame is one committed
transaction in WAL mode, so ``kill -9`` of the recorder loses at most the
frame being written and the file still opens), appendable, readable while
being written (WAL readers never block the writer), and its B-tree index on
time gives an O(log n) seek.  Frames are compressed by
:mod:`fipstop.recording.rawcodec` (key frames every ``key_every`` frames, deltas in
between), so a seek decodes at most ``key_every`` frames after the lookup.

Schema (``SCHEMA_VERSION``)::

    meta(key TEXT PRIMARY KEY, value TEXT)      format, schema_version, host, interval_s,
                                                 created_ns, fipstop_version, dtypes, key_every
    frames(seq INTEGER PRIMARY KEY, t_ns, mono_ns, key, marks, ring BLOB, aux BLOB)
    INDEX frames_t ON frames(t_ns)

``t_ns`` is CLOCK_REALTIME of the ring sample, ``key`` 1 for key frames,
``marks`` a bit set for the replay timeline (:mod:`fipstop.recording.marks`), ``aux`` the other probes' raw
samples (:mod:`fipstop.recording.auxcodec` JSON, zlib) or NULL.  The aux JSON of one
poll to the next differs little, so in a delta frame it is compressed with
the previous frame's aux JSON as zlib's preset dictionary (first byte 1; 0:
no dictionary): 400 bytes of backends become ~60.

A file that is not a recording, is corrupted, or was written by a newer
schema raises :class:`fipstop.errors.FipsError` with one line naming the file
and what is wrong.
"""

from __future__ import annotations

import math
import os
import sqlite3
import stat
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fipstop import __version__
from fipstop.errors import FipsError, one_line
from fipstop.model.raw import RawFrame
from fipstop.probes.ring import RawSample
from fipstop.recording import auxcodec
from fipstop.recording.rawcodec import FrameCodec, current_dtypes, decode_dtypes, dtypes_json

__all__ = ["SCHEMA_VERSION", "RecordedFrame", "RecordingReader", "RecordingWriter"]

FORMAT = "fipstop-recording"
SCHEMA_VERSION = 1
_MAX_AUX_BYTES = 64 << 20
_COLS = "seq, t_ns, mono_ns, key, marks, ring, aux"
PAGE_SIZE = 4096
WAL_CHECKPOINT_PAGES = 256
WAL_LIMIT_BYTES = 1 << 20

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS frames(
    seq INTEGER PRIMARY KEY,
    t_ns INTEGER NOT NULL,
    mono_ns INTEGER NOT NULL,
    key INTEGER NOT NULL,
    marks INTEGER NOT NULL DEFAULT 0,
    ring BLOB NOT NULL,
    aux BLOB
);
CREATE INDEX IF NOT EXISTS frames_t ON frames(t_ns);
"""


@dataclass(frozen=True, eq=False)
class RecordedFrame:
    seq: int
    t_ns: int
    marks: int
    raw: RawFrame


def _is_full(e: sqlite3.Error) -> bool:
    return "full" in str(e).lower() or e.sqlite_errorcode == sqlite3.SQLITE_FULL


class RecordingWriter:
    """Appends frames to a recording (creating it, or appending to one of the
    same schema).  Not thread-safe: one recorder thread owns it."""

    def __init__(self, path: str, *, interval_s: float, host: str, key_every: int = 60) -> None:
        self.path = path
        self.frames_written = 0
        self.bytes_written = 0
        exists = os.path.exists(path)
        self.created = False  # this writer made the file: removed again if no frame gets into it
        if not exists:
            # 0640 like the domains (SQLite would make it 0666 & ~umask; its -wal and -shm take the file's mode)
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640))
            except OSError as e:
                raise FipsError(f"{path}: cannot record there ({e.strerror})") from None
            self.created = True
        self._open = True
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            if not exists:
                # Each frame is one transaction, and WAL writes every page it touches whole (the
                # frames table's last leaf, the time index's): the page size is the write per frame.
                # 64 KiB pages wrote ~136 KB per 1.5 KB frame, 4 KiB pages ~14 KB (/proc/thread-self/io,
                # `fipstop bench record`), for ~20 % slack in the file.  Set before the first table.
                self.db.execute(f"PRAGMA page_size={PAGE_SIZE}")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            # the WAL is copied back every 256 pages (1 MiB) and cut back to 1 MiB after: a small
            # filesystem holds the recording, not a 64 MiB WAL
            self.db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
            self.db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
            if exists:
                meta = _read_meta(self.db, path)
                if meta.get("dtypes") != dtypes_json(current_dtypes()):
                    raise FipsError(f"{path}: recorded with another libfips record layout; record into a new file")
                self.key_every = int(meta.get("key_every", key_every))
            else:
                self.key_every = key_every
                self.db.executescript(_SCHEMA)
                with self.db:
                    self.db.execute("BEGIN")
                    self.db.executemany("INSERT INTO meta VALUES (?, ?)", [
                        ("format", FORMAT), ("schema_version", str(SCHEMA_VERSION)), ("host", host),
                        ("interval_s", repr(float(interval_s))), ("created_ns", str(time.time_ns())),
                        ("fipstop_version", __version__), ("dtypes", dtypes_json(current_dtypes())),
                        ("key_every", str(key_every))])
        except (sqlite3.Error, FipsError) as e:
            self._remove_stub()
            if isinstance(e, FipsError):
                raise
            raise FipsError(f"{path}: cannot record there ({one_line(e, 200)})") from None
        # appending starts a new segment with a key frame (the codec starts fresh)
        self.codec = FrameCodec(key_every=self.key_every)
        self._prev_aux = b""

    def append(self, frame: RawFrame, marks: int = 0) -> int:
        """Writes one frame (one transaction); returns its size in bytes."""
        raw = frame.ring
        ring, is_key = self.codec.encode(raw)
        aux_json = auxcodec.dumps(dict(frame.aux)) if frame.aux else b""
        aux_b = _pack_aux(aux_json, b"" if is_key else self._prev_aux) if aux_json else None
        self._prev_aux = aux_json
        try:
            self.db.execute("INSERT INTO frames(t_ns, mono_ns, key, marks, ring, aux) VALUES (?,?,?,?,?,?)",
                            (int(raw.taken_realtime_ns), int(raw.taken_mono_ns), int(is_key), int(marks), ring,
                             aux_b))
        except sqlite3.Error as e:
            self.codec.reset()  # the next frame must not be a delta on a frame that is not in the file
            self._prev_aux = b""
            if not self.frames_written:
                self._remove_stub()  # no file with a header and no frame is left behind
            if _is_full(e):
                raise FipsError(f"{self.path}: disk full after {self.frames_written} frames; "
                                "what was written is kept and replays") from None
            raise FipsError(f"{self.path}: cannot write a frame ({one_line(e, 200)})") from None
        n = len(ring) + (len(aux_b) if aux_b else 0)
        self.frames_written += 1
        self.bytes_written += n
        return n

    def close(self) -> None:
        if not self.frames_written:
            self._remove_stub()
        if not self._open:
            return
        self._open = False
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass
        self.db.close()

    def _remove_stub(self) -> None:
        """The file this writer created, with no frame in it: gone, with its -wal and -shm."""
        if not self.created:
            return
        if self._open:
            self._open = False
            try:
                self.db.close()
            except (sqlite3.Error, AttributeError):
                pass
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(self.path + suffix)
            except OSError:
                pass
        self.created = False


def _pack_aux(data: bytes, prev: bytes) -> bytes:
    if prev:
        z = zlib.compressobj(6, zdict=prev)
        return b"\x01" + z.compress(data) + z.flush()
    return b"\x00" + zlib.compress(data, 6)


def _unpack_aux(blob: bytes, prev: bytes) -> bytes:
    """Raises zlib.error / ValueError on anything that is not what _pack_aux wrote."""
    if not blob:
        raise ValueError("empty")
    kind, body = blob[0], blob[1:]
    if kind == 1:
        if not prev:
            raise ValueError("no previous aux")
        d = zlib.decompressobj(zdict=prev)
    elif kind == 0:
        d = zlib.decompressobj()
    else:
        raise ValueError("unknown aux kind")
    out = d.decompress(body, _MAX_AUX_BYTES)
    if d.unconsumed_tail:
        raise ValueError("aux too large")
    return out


def _read_meta(db: sqlite3.Connection, path: str) -> dict[str, str]:
    try:
        rows = db.execute("SELECT key, value FROM meta").fetchall()
    except sqlite3.DatabaseError as e:
        msg = one_line(e, 200)
        if "no such table" in msg:
            raise FipsError(f"{path}: not a fipstop recording (an SQLite file without fipstop's tables)") from None
        if "not a database" in msg:
            raise FipsError(f"{path}: not a fipstop recording (not an SQLite file)") from None
        raise FipsError(f"{path}: corrupted recording ({msg})") from None
    meta = {str(k): str(v) for k, v in rows}
    if meta.get("format") != FORMAT:
        raise FipsError(f"{path}: not a fipstop recording (format {meta.get('format', 'missing')[:40]!r})")
    try:
        ver = int(meta.get("schema_version", ""))
    except ValueError:
        raise FipsError(f"{path}: corrupted recording (schema version is not a number)") from None
    if ver > SCHEMA_VERSION:
        raise FipsError(f"{path}: written by a newer fipstop (recording schema {ver}; this fipstop reads up to "
                        f"{SCHEMA_VERSION}): upgrade fipstop to replay it")
    if ver < 1:
        raise FipsError(f"{path}: recording schema {ver} is not one fipstop ever wrote")
    return meta


class RecordingReader:
    """Reads a recording, also one still being written (call ``refresh``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.exists(path):
            raise FipsError(f"{path}: no such file")
        if os.path.isdir(path):
            raise FipsError(f"{path}: is a directory, not a recording")
        try:
            # O_NONBLOCK: a FIFO named as the recording must not block the open (it is refused below)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise FipsError(f"{path}: cannot read ({e.strerror})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise FipsError(f"{path}: not a regular file, not a recording")
            head = os.pread(fd, 16, 0)
        except OSError as e:
            raise FipsError(f"{path}: cannot read ({e.strerror})") from None
        finally:
            os.close(fd)
        if head != b"SQLite format 3\x00":
            raise FipsError(f"{path}: not a fipstop recording (not an SQLite file)" if head
                            else f"{path}: empty file, not a recording")
        writable = os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)
        uri = f"file:{os.path.abspath(path)}?mode={'rw' if writable else 'ro'}"
        db: sqlite3.Connection | None = None
        try:
            db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA query_only=ON")
            self.meta = _read_meta(db, path)
            self.dtypes = decode_dtypes(self.meta.get("dtypes", ""))
            try:
                self.interval_s = float(self.meta.get("interval_s", "1"))
            except ValueError:
                self.interval_s = math.nan
            if not (math.isfinite(self.interval_s) and 0 < self.interval_s <= 86400):
                raise FipsError(f"{path}: corrupted recording (interval_s {self.meta.get('interval_s', '')[:20]!r} "
                                "is not a number of seconds between 0 and 86400)")
            self.host = self.meta.get("host", "")
        except (FipsError, sqlite3.Error, ValueError) as e:
            if db is not None:
                db.close()  # a failed open leaves no connection (and no WAL lock) behind
            if isinstance(e, FipsError):
                raise
            raise FipsError(f"{path}: corrupted recording ({one_line(e, 200)})") from None
        self.db = db
        self._codec = FrameCodec(self.dtypes)
        self._decoded_seq: int | None = None  # seq the codec state belongs to
        self._prev_aux = b""  # aux JSON of frame _decoded_seq (the next delta's dictionary)
        self.refresh()

    # -- index ------------------------------------------------------------------

    def _q(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise FipsError(f"{self.path}: corrupted recording ({one_line(e, 200)})") from None

    def refresh(self) -> int:
        """Re-reads the extent (a recorder may be appending); returns the frame count."""
        (lo, hi, n), = self._q("SELECT MIN(seq), MAX(seq), COUNT(*) FROM frames")
        self.first_seq, self.last_seq, self.count = (lo or 0), (hi or 0), int(n)
        return self.count

    def time_of(self, seq: int) -> int | None:
        r = self._q("SELECT t_ns FROM frames WHERE seq = ?", (seq,))
        if r and not isinstance(r[0][0], int):
            raise FipsError(f"{self.path}: corrupted recording (frame {seq}: t_ns holds {type(r[0][0]).__name__}, "
                            "not an integer)")
        return int(r[0][0]) if r else None

    @property
    def first_t_ns(self) -> int:
        return self.time_of(self.first_seq) or 0

    @property
    def last_t_ns(self) -> int:
        return self.time_of(self.last_seq) or 0

    def seq_at(self, t_ns: int) -> int | None:
        """The last frame taken at or before ``t_ns`` (the first frame if none); O(log n)."""
        r = self._q("SELECT seq FROM frames WHERE t_ns <= ? ORDER BY t_ns DESC, seq DESC LIMIT 1", (int(t_ns),))
        if r:
            return int(r[0][0])
        return self.first_seq if self.count else None

    def next_seq(self, seq: int) -> int | None:
        r = self._q("SELECT seq FROM frames WHERE seq > ? ORDER BY seq LIMIT 1", (seq,))
        return int(r[0][0]) if r else None

    def prev_seq(self, seq: int) -> int | None:
        r = self._q("SELECT seq FROM frames WHERE seq < ? ORDER BY seq DESC LIMIT 1", (seq,))
        return int(r[0][0]) if r else None

    def marks(self) -> list[tuple[int, int]]:
        """(t_ns, marks) of every frame with a mark, for the timeline."""
        rows = self._q("SELECT t_ns, marks FROM frames WHERE marks != 0 AND typeof(t_ns) = 'integer' "
                       "AND typeof(marks) = 'integer' ORDER BY seq")
        return [(int(t), int(m)) for t, m in rows]

    # -- frames ------------------------------------------------------------------

    def seq_back(self, seq: int, n: int) -> int:
        """The frame ``n`` frames before ``seq`` (the first frame when there are fewer); one query."""
        r = self._q("SELECT seq FROM frames WHERE seq < ? ORDER BY seq DESC LIMIT 1 OFFSET ?", (seq, max(n - 1, 0)))
        return int(r[0][0]) if r and n > 0 else (seq if n <= 0 else self.first_seq)

    def _key_before(self, seq: int) -> int:
        (start,), = self._q("SELECT MAX(seq) FROM frames WHERE seq <= ? AND key = 1", (seq,))
        if start is None:
            raise FipsError(f"{self.path}: corrupted recording (no key frame before frame {seq})")
        return int(start)

    def read(self, seq: int) -> RecordedFrame:
        """Frame ``seq``; decodes forward from the key frame before it unless the
        codec already stands on ``seq - 1``."""
        prev = self.prev_seq(seq)
        if self._decoded_seq is None or prev is None or self._decoded_seq != prev:
            self._codec.reset()
            self._prev_aux = b""
            for row in self._q(f"SELECT {_COLS} FROM frames WHERE seq >= ? AND seq < ? ORDER BY seq",
                               (self._key_before(seq), seq)):
                s, _t, _m, blob, aux_b = self._checked(row)
                self._decode(s, blob)
                self._aux_json(s, aux_b)
        rows = self._q(f"SELECT {_COLS} FROM frames WHERE seq = ?", (seq,))
        if not rows:
            raise FipsError(f"{self.path}: no frame {seq}")
        return self._frame(*self._checked(rows[0]))

    def _checked(self, row: tuple) -> tuple[int, int, int, bytes, bytes | None]:
        """(seq, t_ns, marks, ring, aux) of a row, each of the type the recorder writes: a file from
        anywhere may hold TEXT or REAL in any column (SQLite does not enforce column types)."""
        seq, t, mono, key, marks, ring, aux = row
        for name, v, ok in (("t_ns", t, int), ("mono_ns", mono, int), ("key", key, int), ("marks", marks, int),
                            ("ring", ring, bytes), ("aux", aux, (bytes, type(None)))):
            if not isinstance(v, ok) or isinstance(v, bool):
                raise FipsError(f"{self.path}: corrupted recording (frame {seq}: {name} holds "
                                f"{type(v).__name__}, not {'a blob' if ok is not int else 'an integer'})")
        return seq, t, marks, ring, aux

    def _frame(self, seq: int, t: int, marks: int, blob: bytes, aux_b: bytes | None) -> RecordedFrame:
        raw = self._decode(seq, blob)
        data = self._aux_json(seq, aux_b)
        aux: dict[str, Any] = {}
        if data:
            try:
                val = auxcodec.loads(data)
            except ValueError as e:
                raise FipsError(f"{self.path}: frame {seq}: {e}") from None
            except RecursionError:  # JSON nested deeper than Python recurses: no recorder writes that
                raise FipsError(f"{self.path}: frame {seq}: aux data nested too deeply (corrupted)") from None
            if isinstance(val, dict):
                aux = val
        return RecordedFrame(int(seq), int(t), int(marks), RawFrame(raw, aux))

    def _aux_json(self, seq: int, aux_b: bytes | None) -> bytes:
        try:
            data = _unpack_aux(bytes(aux_b), self._prev_aux) if aux_b else b""
        except (zlib.error, ValueError):
            self._decoded_seq = None
            raise FipsError(f"{self.path}: corrupted recording (frame {seq}: aux data)") from None
        self._prev_aux = data
        return data

    def _decode(self, seq: int, blob: bytes) -> RawSample:
        try:
            raw = self._codec.decode(bytes(blob))
        except ValueError as e:
            self._decoded_seq = None
            raise FipsError(f"{self.path}: frame {seq}: {e}") from None
        self._decoded_seq = int(seq)
        return raw

    def iter_frames(self, from_seq: int | None = None, to_seq: int | None = None) -> Iterator[RecordedFrame]:
        """Frames ``from_seq``..``to_seq`` in order, read in one pass from the key
        frame before the first (do not :meth:`read` while iterating)."""
        if not self.count:
            return
        (first,), = self._q("SELECT MIN(seq) FROM frames WHERE seq >= ?",
                            (self.first_seq if from_seq is None else from_seq,))
        if first is None:
            return
        self._codec.reset()
        self._prev_aux = b""
        sql = f"SELECT {_COLS} FROM frames WHERE seq >= ?"
        args: tuple = (self._key_before(int(first)),)
        if to_seq is not None:
            sql, args = sql + " AND seq <= ?", args + (to_seq,)
        try:
            cur = self.db.execute(sql + " ORDER BY seq", args)
            while rows := cur.fetchmany(64):
                for row in rows:
                    seq, t, marks, ring, aux = self._checked(row)
                    if seq < first:  # from the key frame up to the first one asked for
                        self._decode(seq, ring)
                        self._aux_json(seq, aux)
                    else:
                        yield self._frame(seq, t, marks, ring, aux)
        except sqlite3.Error as e:
            raise FipsError(f"{self.path}: corrupted recording ({one_line(e, 200)})") from None

    def close(self) -> None:
        self.db.close()
