"""Ring samples to bytes and back, small enough to record for hours.

A recording stores raw samples (``fipstop.probes.ring.RawSample``), never
derived numbers, so that replay re-derives with the same code.  A raw sample
of 64 rings is ~25 KB of counters, but between two samples a second apart
almost every word is unchanged or grows by a similar amount.  So:

- only slots in use are stored (rings and consumers whose state is not FREE;
  positions for stored consumers x stored rings) - a FREE slot never enters
  ``derive``;
- a *delta* frame stores, per 64-bit word of each stored row, the wrapping
  difference to the same word of the previous frame (the stat structs are
  multiples of 8 bytes); a *key* frame stores the words themselves.  A frame
  whose slots in use differ from the previous frame's is always a key frame;
- the words are laid out column by column and byte-shuffled (all least
  significant bytes, then the next ...), so the long runs of zero high bytes
  compress to nothing, then compressed with raw LZMA2 (64 KiB dictionary;
  10-15 % smaller than zlib -9 on real frames, ~3 ms per frame);
- from a delta, what other words predict is subtracted (``_PREDICT``:
  ``reserved`` moves with ``head``, a consumer's ``released_seq`` with the
  ring's ``records_committed``, byte positions with record counts at the
  ring's mean record size of the interval), so what is left is what carries
  information (how lags changed);
- last-commit and heartbeat times are kept to the microsecond
  (``TIME_QUANTUM_NS``); every other field is stored exactly.

``fipstop bench record`` measures what this buys against plain zlib.

Each domain's ``records_no_ring`` (a header counter, not a stat row) is in the frame's
metadata: key frames list it with the domain (``no_ring``), delta frames only when a
domain's changed (``nr``, one per domain).  A recording made before it was recorded
decodes it as ``None`` (unknown), never 0.

The record types' numpy dtypes are stored once per recording (``dtypes()``):
a recording made by an older libfips whose stat structs had other fields
replays by field name (fields it lacks read as 0) - see :func:`adapt`.

Encoded frames come from a file: :func:`decode` bounds every size and count
and raises ``ValueError`` with a one-line reason on anything inconsistent.
"""

from __future__ import annotations

import json
import lzma
import struct
from collections.abc import Callable

import numpy as np

from fipstop.probes.ring import DomainError, RawSample
from fipstop.ring import DomainSnapshot, consumer_stat_dtype, pos_dtype, ring_stat_dtype

__all__ = ["FrameCodec", "adapt", "current_dtypes", "decode_dtypes", "dtypes_json"]

_MAGIC = b"FSR1"
_HDR = struct.Struct("<4sBI")  # magic, kind (0 key, 1 delta), json length
_KEY, _DELTA = 0, 1
#: Bounds for what a frame may claim (a hostile file cannot make us allocate more).
MAX_DOMAINS = 4096
MAX_SLOTS = 1 << 20
MAX_FRAME_BYTES = 256 << 20

#: Last-commit and heartbeat times are stored to the microsecond: their
#: sub-microsecond digits are noise to every view (ages show in ms) and cost
#: ~10 bits per ring per frame.  Everything else is stored exactly.
TIME_QUANTUM_NS = 1000

_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9, "dict_size": 1 << 16, "lc": 0, "lp": 0, "pb": 0}]

_DOMAIN_FIELDS = ("name", "path", "version", "max_rings", "max_consumers", "ring_capacity_bytes", "max_record_bytes",
                  "file_size_bytes", "grace_ns", "creator_pid", "created_realtime_ns", "created_mono_ns",
                  "taken_realtime_ns", "taken_mono_ns")


#: Delta-frame predictions, in decode order: (table, field, predicted from).  A
#: word's delta is stored minus the delta of what predicts it, so what is
#: left is what carries information: ``reserved``/``bytes_committed`` move
#: with ``head``; a consumer's ``released_seq`` moves with the ring's
#: ``records_committed`` (the residual is how its lag changed) and its
#: ``released`` bytes with that at the ring's mean record size; timestamps
#: move with the clock.  A source is always restored before the target that
#: uses it (decode order); the encoder runs the list backwards.
#: Measured on 64 rings x 4 consumers (the bench's samples): 1 481 bytes per
#: frame when bytes were predicted from ``head`` alone and time stamps stored
#: whole, 1 267 with the scaled predictions and stamps as differences.
_PREDICT = (
    ("ring", "reserved", ("ring", "head")),
    ("ring", "bytes_committed", ("ring", "head")),
    ("ring", "floor_seq", ("ring", "records_committed")),
    # bytes follow records at the ring's mean record size in this interval (head / records)
    ("ring", "floor", ("rscaled", "floor_seq")),
    ("ring", "last_commit_ns", ("clock", "realtime")),
    ("consumer", "heartbeat_mono_ns", ("clock", "mono")),
    ("pos", "released_seq", ("posring", "records_committed")),
    ("pos", "records_released", ("pos", "released_seq")),
    ("pos", "released", ("scaled", "released_seq")),
)


def _scaled(count_d: np.ndarray, head_d: np.ndarray, rec_d: np.ndarray) -> np.ndarray:
    """count * head / records, rounded, as wrapping words: how many bytes
    ``count`` records take at the ring's mean record size of the interval.
    Same inputs, same IEEE float64 arithmetic: encoder and decoder agree."""
    c = count_d.view(np.int64).astype(np.float64)
    h = head_d.view(np.int64).astype(np.float64)
    r = rec_d.view(np.int64).astype(np.float64)
    with np.errstate(all="ignore"):
        p = np.where(r > 0, np.rint(c * h / np.where(r > 0, r, 1.0)), 0.0)
    p = np.where(np.isfinite(p) & (np.abs(p) < 2.0**62), p, 0.0)
    return p.astype(np.int64).view(np.uint64)


def _word(dt: np.dtype, name: str) -> int | None:
    """Word index of an 8-byte, 8-aligned field (None: cannot predict it)."""
    f = dt.fields.get(name) if dt.fields else None
    if f is None or f[0].itemsize != 8 or f[1] % 8:
        return None
    return f[1] // 8


def _predict(dts: dict[str, np.dtype], w: list[np.ndarray], nc: int, nr: int, clock_d: tuple[int, int],
             decode: bool) -> None:
    """Apply (decode) or remove (encode) the predictions, in place, on one
    domain's delta words ``w = [rings, consumers, pos]`` (pos consumer-major)."""
    tables = {"ring": 0, "consumer": 1, "pos": 2}
    ops = _PREDICT if decode else tuple(reversed(_PREDICT))
    for table, field, (src_kind, src) in ops:
        arr = w[tables[table]]
        t = _word(dts[table], field)
        if t is None or arr.size == 0:
            continue
        if src_kind == "clock":
            v = np.uint64((clock_d[0] if src == "realtime" else clock_d[1]) & 0xFFFFFFFFFFFFFFFF)
            col = arr[:, t]
            arr[:, t] = col + v if decode else col - v
            continue
        if src_kind in ("scaled", "rscaled"):
            s_ = _word(dts[table], src)
            h_, r_ = _word(dts["ring"], "head"), _word(dts["ring"], "records_committed")
            if s_ is None or h_ is None or r_ is None or nr == 0:
                continue
            reps = nc if src_kind == "scaled" else 1
            if reps == 0:
                continue
            pred = _scaled(arr[:, s_].copy(), np.tile(w[0][:, h_], reps), np.tile(w[0][:, r_], reps))
        elif src_kind == "posring":
            s_ = _word(dts["ring"], src)
            if s_ is None or nr == 0 or nc == 0:
                continue
            pred = np.tile(w[0][:, s_], nc)  # ring r's delta for every (consumer, r)
        else:
            s_ = _word(dts[src_kind], src)
            if s_ is None:
                continue
            pred = w[tables[src_kind]][:, s_].copy()
        arr[:, t] = arr[:, t] + pred if decode else arr[:, t] - pred


def current_dtypes() -> dict[str, np.dtype]:
    return {"ring": ring_stat_dtype(), "consumer": consumer_stat_dtype(), "pos": pos_dtype()}


def _record_fields(dt: np.dtype) -> list[tuple[str, np.dtype, int]]:
    """(name, dtype, offset) of each field of a record dtype."""
    if dt.names is None or dt.fields is None:
        raise ValueError(f"{dt} is not a record layout")
    fields = dt.fields
    return [(n, fields[n][0], fields[n][1]) for n in dt.names]


def dtypes_json(dts: dict[str, np.dtype]) -> str:
    out = {}
    for k, dt in dts.items():
        fields = _record_fields(dt)
        out[k] = {"names": [n for n, _, _ in fields], "formats": [f.str for _, f, _ in fields],
                  "offsets": [o for _, _, o in fields], "itemsize": dt.itemsize}
    return json.dumps(out, sort_keys=True)


def decode_dtypes(text: str) -> dict[str, np.dtype]:
    try:
        d = json.loads(text)
        out = {}
        for k in ("ring", "consumer", "pos"):
            spec = d[k]
            item = int(spec["itemsize"])
            if not (8 <= item <= 65536 and item % 8 == 0):
                raise ValueError(f"{k} record size {item}")
            dt = np.dtype({"names": [str(n) for n in spec["names"]], "formats": [str(f) for f in spec["formats"]],
                           "offsets": [int(o) for o in spec["offsets"]], "itemsize": item})
            if dt.hasobject:
                raise ValueError(f"{k} has object fields")
            out[k] = dt
        return out
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
        raise ValueError(f"recording: bad record layouts ({' '.join(str(e).split())[:120]})") from None


def adapt(arr: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Rows of a recorded dtype as rows of the current one, field by field."""
    if arr.dtype == dt:
        return arr
    out = np.zeros(arr.shape, dtype=dt)
    have = arr.dtype.names or ()
    for name in dt.names or ():
        if name in have:
            try:
                out[name] = arr[name]
            except (TypeError, ValueError):
                pass  # a field whose type changed incompatibly stays 0
    return out


def _words(rows: np.ndarray) -> np.ndarray:
    """(n, itemsize/8) uint64 view of contiguous rows."""
    a = np.ascontiguousarray(rows)
    return a.view(np.uint8).reshape(len(a), a.dtype.itemsize).view("<u8")


def _shuffle(words: np.ndarray) -> bytes:
    # column-major words, then bytes grouped by significance
    cols = np.ascontiguousarray(words.T).reshape(-1)
    return np.ascontiguousarray(cols.view(np.uint8).reshape(-1, 8).T).tobytes()


def _unshuffle(buf: bytes, n: int, w: int) -> np.ndarray:
    b = np.frombuffer(buf, dtype=np.uint8)
    if b.size != n * w * 8:
        raise ValueError("recording: frame body has the wrong size")
    cols = np.ascontiguousarray(b.reshape(8, n * w).T).view("<u8").reshape(-1)
    return np.ascontiguousarray(cols.reshape(w, n).T)


def _no_ring_list(v: object, n: int) -> list[int | None]:
    """A frame's records_no_ring per domain: ints in [0, 2^64) or None (unknown)."""
    if not isinstance(v, list) or len(v) != n:
        raise ValueError("recording: a frame's no-ring counts do not match its domains")
    for x in v:
        if x is not None and (type(x) is not int or not 0 <= x < 1 << 64):
            raise ValueError("recording: a frame's no-ring count is not a counter")
    return list(v)


class FrameCodec:
    """Encodes a stream of raw samples (one per call, in order) or decodes one.

    One instance per direction: an encoder remembers the previous frame's rows
    (to write deltas), a decoder the previous decoded frame's (to apply them).
    ``key_every`` bounds how many deltas follow a key frame (seek cost).
    """

    def __init__(self, dtypes: dict[str, np.dtype] | None = None, *, key_every: int = 60) -> None:
        self.dtypes = dtypes or current_dtypes()
        self.current = current_dtypes()
        self.key_every = max(1, int(key_every))
        self._prev_layout: tuple | None = None
        self._prev_words: list[np.ndarray] | None = None
        self._prev_stamps: list[tuple[int, int]] = []
        self._prev_meta: dict = {}
        self._prev_no_ring: list[int | None] = []
        self._since_key = 0

    def reset(self) -> None:
        self._prev_layout = None
        self._prev_words = None
        self._prev_no_ring = []
        self._since_key = 0

    # -- encode ---------------------------------------------------------------

    def encode(self, s: RawSample) -> tuple[bytes, bool]:
        """(bytes, is_key) for the next sample of the stream."""
        meta_domains = []
        parts: list[np.ndarray] = []
        for d in s.domains:
            ri = d.active_ring_indices().astype(np.uint32)
            ci = d.active_consumer_indices().astype(np.uint32)
            rings = d.rings[ri]  # copies (fancy indexing)
            cons = d.consumers[ci]
            for arr, f in ((rings, "last_commit_ns"), (cons, "heartbeat_mono_ns")):
                if f in (arr.dtype.names or ()):
                    arr[f] -= arr[f] % np.uint64(TIME_QUANTUM_NS)
            pos = d.pos[np.ix_(ci, ri)].reshape(-1) if ri.size and ci.size else d.pos.reshape(-1)[:0].copy()
            m = {f: getattr(d, f) for f in _DOMAIN_FIELDS}
            m["ri"] = ri.tolist()
            m["ci"] = ci.tolist()
            m["no_ring"] = d.records_no_ring
            meta_domains.append(m)
            parts += [rings, cons, pos]
        words = [_words(p) for p in parts]
        # what must be equal between two frames for a delta: everything but the time taken
        layout = tuple(tuple(m[f] for f in _DOMAIN_FIELDS[:-2]) + (tuple(m["ri"]), tuple(m["ci"]))
                       for m in meta_domains)
        is_key = (self._prev_layout != layout or self._prev_words is None or self._since_key >= self.key_every)
        stamps = [(int(m["taken_realtime_ns"]), int(m["taken_mono_ns"])) for m in meta_domains]
        if is_key:
            body_words = words
            self._since_key = 0
        else:
            assert self._prev_words is not None  # not a key frame: there is a frame before
            body_words = [w - p for w, p in zip(words, self._prev_words)]  # wraps mod 2^64
            for i, m in enumerate(meta_domains):
                clock_d = (stamps[i][0] - self._prev_stamps[i][0], stamps[i][1] - self._prev_stamps[i][1])
                _predict(self.dtypes, body_words[3 * i:3 * i + 3], len(m["ci"]), len(m["ri"]), clock_d, False)
            self._since_key += 1
        self._prev_layout, self._prev_words, self._prev_stamps = layout, words, stamps
        meta = {"host": s.host, "shm_dir": s.shm_dir, "taken_mono_ns": s.taken_mono_ns,
                "taken_realtime_ns": s.taken_realtime_ns, "unavailable": s.unavailable,
                "errors": [[e.domain, e.reason] for e in s.errors], "domains": meta_domains,
                "warnings": [[e.domain, e.reason] for e in s.warnings]}
        if is_key:
            meta_b = json.dumps(meta, separators=(",", ":")).encode()
        else:  # the layout is implied by the previous frame: keep only what changes
            # times as small numbers: the sample's against the previous sample's, each domain's against the sample's
            pm = self._prev_meta
            small = {"dt": [int(s.taken_mono_ns) - int(pm["taken_mono_ns"]),
                            int(s.taken_realtime_ns) - int(pm["taken_realtime_ns"])],
                     "dom": [[int(m["taken_realtime_ns"]) - int(s.taken_realtime_ns),
                              int(m["taken_mono_ns"]) - int(s.taken_mono_ns)] for m in meta_domains]}
            for k in ("host", "shm_dir", "unavailable", "errors", "warnings"):  # only when they changed
                if meta[k] != self._prev_meta.get(k):
                    small[k] = meta[k]
            no_ring = [m["no_ring"] for m in meta_domains]
            if no_ring != self._prev_no_ring:
                small["nr"] = no_ring
            meta_b = json.dumps(small, separators=(",", ":")).encode()
        self._prev_meta = meta
        self._prev_no_ring = [m["no_ring"] for m in meta_domains]
        body = b"".join(_shuffle(w) if w.size else b"" for w in body_words)
        raw = _HDR.pack(_MAGIC, _KEY if is_key else _DELTA, len(meta_b)) + meta_b + body
        return lzma.compress(raw, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS), is_key

    # -- decode ---------------------------------------------------------------

    def decode(self, blob: bytes) -> RawSample:
        """The next frame of the stream (a key frame resets the stream).

        Decompression is bounded by what the frame itself declares: the
        header first, then its metadata (``mlen`` bytes), then exactly the
        body that metadata implies - a small blob that would inflate to
        hundreds of MiB stops at the first byte beyond it."""
        d = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
        pending = [blob]

        def take(n: int) -> bytes:
            out = b""
            try:
                while len(out) < n and not d.eof:
                    chunk = d.decompress(pending.pop() if pending else b"", n - len(out))
                    if not chunk and (d.eof or d.needs_input):
                        break
                    out += chunk
            except (lzma.LZMAError, EOFError):
                raise ValueError("recording: a frame does not decompress (corrupted)") from None
            return out

        head = take(_HDR.size)
        if len(head) < _HDR.size:
            raise ValueError("recording: a frame is truncated")
        magic, kind, mlen = _HDR.unpack_from(head)
        if magic != _MAGIC or kind not in (_KEY, _DELTA):
            raise ValueError("recording: a frame has a bad header")
        if mlen > MAX_FRAME_BYTES:
            raise ValueError("recording: a frame's metadata is too large")
        meta_b = take(mlen)
        if len(meta_b) < mlen:
            raise ValueError("recording: a frame's metadata is truncated")
        try:
            meta = json.loads(meta_b)
        except (ValueError, UnicodeDecodeError):
            raise ValueError("recording: a frame's metadata is not JSON") from None
        except RecursionError:
            raise ValueError("recording: a frame's metadata is nested too deeply") from None
        if not isinstance(meta, dict):
            raise ValueError("recording: a frame's metadata is not an object")

        def body(need: int) -> memoryview:
            if need > MAX_FRAME_BYTES:
                raise ValueError(f"recording: a frame's metadata declares {need} bytes, more than "
                                 f"{MAX_FRAME_BYTES}")
            got = take(need)
            extra = take(1)
            if len(got) != need or extra:
                have = f"more than {need}" if extra else str(len(got))
                raise ValueError(f"recording: a frame body is {have} bytes, its metadata says {need}")
            return memoryview(got)

        try:
            return self._decode(kind, meta, body)
        except (KeyError, TypeError, IndexError) as e:
            raise ValueError(f"recording: a frame's metadata is inconsistent ({type(e).__name__})") from None

    def _decode(self, kind: int, meta: dict, take_body: Callable[[int], memoryview]) -> RawSample:
        prev_stamps: list[tuple[int, int]] = []
        if kind == _DELTA:
            if self._prev_layout is None or self._prev_words is None:
                raise ValueError("recording: a delta frame without the frame before it")
            doms_meta = [dict(m) for m in self._prev_layout]
            prev_stamps = [(int(m["taken_realtime_ns"]), int(m["taken_mono_ns"])) for m in doms_meta]
            d_mono, d_rt = (int(x) for x in meta["dt"])
            meta["taken_mono_ns"] = int(self._prev_meta["taken_mono_ns"]) + d_mono
            meta["taken_realtime_ns"] = int(self._prev_meta["taken_realtime_ns"]) + d_rt
            stamps = meta["dom"]
            if len(stamps) != len(doms_meta):
                raise ValueError("recording: a delta frame does not match the frame before it")
            for m, (rt, mono) in zip(doms_meta, stamps):
                m["taken_realtime_ns"] = meta["taken_realtime_ns"] + int(rt)
                m["taken_mono_ns"] = meta["taken_mono_ns"] + int(mono)
        else:
            doms_meta = meta["domains"]
            if not isinstance(doms_meta, list) or len(doms_meta) > MAX_DOMAINS:
                raise ValueError("recording: a frame lists too many domains")
        dts = self.dtypes
        shapes = []
        for m in doms_meta:
            nr, nc = len(m["ri"]), len(m["ci"])
            mr, mc = int(m["max_rings"]), int(m["max_consumers"])
            if not (0 < mr <= MAX_SLOTS and 0 < mc <= MAX_SLOTS and nr <= mr and nc <= mc):
                raise ValueError("recording: a frame's slot counts are out of range")
            if any(not (0 <= int(i) < mr) for i in m["ri"]) or any(not (0 <= int(i) < mc) for i in m["ci"]):
                raise ValueError("recording: a frame's slot index is out of range")
            shapes += [(nr, dts["ring"]), (nc, dts["consumer"]), (nr * nc, dts["pos"])]
        need = sum(n * dt.itemsize for n, dt in shapes)
        tables = sum(int(m["max_rings"]) * int(m["max_consumers"]) for m in doms_meta) * dts["pos"].itemsize
        if tables > MAX_FRAME_BYTES:  # the full position tables the frame would be expanded into
            raise ValueError(f"recording: a frame's tables would take {tables} bytes, more than {MAX_FRAME_BYTES}")
        body = take_body(need)
        words, off = [], 0
        for n, dt in shapes:
            w = dt.itemsize // 8
            size = n * dt.itemsize
            words.append(_unshuffle(bytes(body[off:off + size]), n, w) if n else np.zeros((0, w), "<u8"))
            off += size
        if kind == _DELTA:
            assert self._prev_words is not None  # checked above
            if any(a.shape != b.shape for a, b in zip(words, self._prev_words)):
                raise ValueError("recording: a delta frame does not match the frame before it")
            for i, m in enumerate(doms_meta):
                clock_d = (int(m["taken_realtime_ns"]) - prev_stamps[i][0], int(m["taken_mono_ns"]) - prev_stamps[i][1])
                _predict(dts, words[3 * i:3 * i + 3], len(m["ci"]), len(m["ri"]), clock_d, True)
            words = [a + b for a, b in zip(words, self._prev_words)]
        self._prev_words = words
        self._prev_layout = tuple(
            {k: m[k] for k in (*_DOMAIN_FIELDS, "ri", "ci")} for m in doms_meta)
        if kind == _DELTA:
            no_ring = meta["nr"] if "nr" in meta else self._prev_no_ring
        else:
            no_ring = [m.get("no_ring") for m in doms_meta]
        self._prev_no_ring = _no_ring_list(no_ring, len(doms_meta))
        domains = []
        cur = self.current
        for i, m in enumerate(doms_meta):
            rw, cw, pw = words[3 * i: 3 * i + 3]
            rows_r = rw.view(np.uint8).view(dts["ring"]).reshape(-1) if rw.size else np.zeros(0, dts["ring"])
            rows_c = cw.view(np.uint8).view(dts["consumer"]).reshape(-1) if cw.size else np.zeros(0, dts["consumer"])
            rows_p = pw.view(np.uint8).view(dts["pos"]).reshape(-1) if pw.size else np.zeros(0, dts["pos"])
            mr, mc = int(m["max_rings"]), int(m["max_consumers"])
            ri = np.asarray(m["ri"], dtype=np.int64)
            ci = np.asarray(m["ci"], dtype=np.int64)
            rings = np.zeros(mr, dtype=cur["ring"])
            if "index" in rings.dtype.names:  # a FREE slot still knows its index
                rings["index"] = np.arange(mr)
            rings[ri] = adapt(rows_r, cur["ring"])
            cons = np.zeros(mc, dtype=cur["consumer"])
            if "index" in cons.dtype.names:
                cons["index"] = np.arange(mc)
            cons[ci] = adapt(rows_c, cur["consumer"])
            pos = np.zeros((mc, mr), dtype=cur["pos"])
            if ri.size and ci.size:
                pos[np.ix_(ci, ri)] = adapt(rows_p, cur["pos"]).reshape(ci.size, ri.size)
            for a in (rings, cons, pos):
                a.flags.writeable = False
            domains.append(DomainSnapshot(
                name=str(m["name"]), path=str(m["path"]), version=int(m["version"]), max_rings=mr,
                max_consumers=mc, ring_capacity_bytes=int(m["ring_capacity_bytes"]),
                max_record_bytes=int(m["max_record_bytes"]), file_size_bytes=int(m["file_size_bytes"]),
                grace_ns=int(m["grace_ns"]), creator_pid=int(m["creator_pid"]),
                created_realtime_ns=int(m["created_realtime_ns"]), created_mono_ns=int(m["created_mono_ns"]),
                taken_realtime_ns=int(m["taken_realtime_ns"]), taken_mono_ns=int(m["taken_mono_ns"]),
                rings=rings, consumers=cons, pos=pos, records_no_ring=self._prev_no_ring[i]))
        if kind == _DELTA:  # what a delta frame leaves out did not change
            meta = {k: self._prev_meta.get(k, [] if k in ("errors", "warnings") else "") for k in
                    ("host", "shm_dir", "unavailable", "errors", "warnings")} | meta
        self._prev_meta = meta
        errors = tuple(DomainError(str(a), str(b)) for a, b in meta.get("errors", []))
        # (a recording made before warnings were recorded has none)
        warnings = tuple(DomainError(str(a), str(b)) for a, b in meta.get("warnings", []))
        return RawSample(host=str(meta["host"]), shm_dir=str(meta["shm_dir"]),
                         taken_mono_ns=int(meta["taken_mono_ns"]), taken_realtime_ns=int(meta["taken_realtime_ns"]),
                         domains=tuple(domains), errors=errors, unavailable=str(meta.get("unavailable", "")),
                         warnings=warnings)
