"""Fuzzing fipstop's readers (issue 17): domain files, recordings, Fail2Ban filter files and HTTP
requests to `fipstop serve` (raw bytes from a client, pipelined ones included).

Every input goes through the real reader in a child process (tests/fuzz/worker.py): a reader may
refuse an input only with a one-line FipsError - any other exception is a traceback a user would
see, a dead child is a crash, a child that stops answering is a hang.  Each run replays the kept
corpus of past failures (tests/fuzz/corpus/KIND/: every file there once broke a reader) and then
mutates valid inputs for a bounded time (FUZZ_SECONDS per kind, 12 s by default, so ~45 s in all in
`make test`), seeded by FUZZ_SEED (17; `FUZZ_SEED=$RANDOM FUZZ_SECONDS=60` explores further).  A new failure is written to tests/fuzz/corpus/KIND/ as
new-<sha1> - commit it with the fix - and fails the test with the reader's one line.
"""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
WORKER = HERE / "worker.py"
SECONDS = float(os.environ.get("FUZZ_SECONDS", "12"))
SEED = int(os.environ.get("FUZZ_SEED", "17"))  # fixed: `make test` and CI are reproducible; others explore
PER_INPUT_S = 10.0  # a reader that takes longer over one small input hangs

pytestmark = pytest.mark.slow


def run_worker(kind: str, files: list[Path]) -> list[tuple[Path, str]]:
    """(input, problem) for every input that broke the reader."""
    bad: list[tuple[Path, str]] = []
    todo = list(files)
    while todo:
        p = subprocess.Popen([sys.executable, str(WORKER), kind, *map(str, todo)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=HERE)
        current: Path | None = None
        done: list[Path] = []
        assert p.stdout is not None
        deadline = time.monotonic() + PER_INPUT_S * len(todo) + 30
        try:
            for line in p.stdout:
                if line.startswith("BEGIN "):
                    current = Path(line[6:].rstrip("\n"))
                elif current is not None:
                    if line.startswith("BAD "):
                        bad.append((current, line[4:].strip()))
                    done.append(current)
                    current = None
                if time.monotonic() > deadline:
                    break
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        if p.poll() is None:
            p.kill()
            p.wait()
            if current is not None:
                bad.append((current, "hang: no answer"))
        elif p.returncode != 0 and current is not None:
            err = (p.stderr.read() if p.stderr else "")[-300:]
            bad.append((current, f"crash: exit {p.returncode} {' '.join(err.split())}"))
        finished = set(done) | {b for b, _ in bad}
        todo = [f for f in todo if f not in finished]
        if current is None and todo and p.returncode == 0:
            raise AssertionError(f"worker skipped {todo[:3]}")
    return bad


def keep(kind: str, data: bytes) -> Path:
    d = CORPUS / kind
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"new-{hashlib.sha1(data).hexdigest()[:16]}"
    p.write_bytes(data)
    return p


# -- valid inputs and mutations -----------------------------------------------------------------------


def template_domain(d: Path) -> bytes:
    from fipstop._fips import Consumer, Domain, Producer

    with Domain("tpl", d, max_rings=2, max_consumers=2, ring_capacity=4096, max_record=256) as dom:
        p = Producer(dom)
        c = Consumer(dom, "c")
        for i in range(40):
            p.log(b"<30>named[7]: client 192.0.2.%d#53 query %d " % (i, i) + b"x" * (i * 7 % 90))
        b = c.read(5)
        assert b is not None
        c.release(b)
        c.detach()
    return (d / "fips.tpl").read_bytes()


def template_recording(path: Path) -> bytes:
    from fipstop.fixtures import demo_samples
    from fipstop.model.raw import RawFrame
    from fipstop.recording.store import RecordingWriter

    w = RecordingWriter(str(path), interval_s=1.0, host="h", key_every=3)
    for s in demo_samples(8):
        w.append(RawFrame(s, {}))
    w.close()
    return path.read_bytes()


def mutate_bytes(rng: random.Random, data: bytes, hot: int = 0) -> bytes:
    """Byte-level: flips, interesting words, truncation, extension, splices; ``hot`` bytes at the
    start (a header) get most of the attention."""
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 16))):
        r = rng.random()
        span = hot if hot and rng.random() < 0.7 else len(b)
        if not b:
            break
        i = rng.randrange(max(1, min(span, len(b))))
        if r < 0.35:
            b[i] ^= 1 << rng.randrange(8)
        elif r < 0.6:
            word = rng.choice((0, 1, 0xFF, 0x7F, 0x80, 0xFFFFFFFF, 0x80000000, 0xFFFFFFFFFFFFFFFF, 4096, 1 << 40))
            n = rng.choice((1, 2, 4, 8))
            b[i:i + n] = (word & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
        elif r < 0.7:
            del b[rng.randrange(len(b)):]
        elif r < 0.8:
            b += bytes(rng.randrange(1, 5000))
        else:
            j = rng.randrange(len(b))
            b[i:i + 8] = b[j:j + 8]
    return bytes(b)


def mutate_recording(rng: random.Random, tpl: Path, out: Path) -> bytes:
    """Row-level (SQLite keeps working, the content lies) or byte-level."""
    out.write_bytes(tpl.read_bytes())
    if rng.random() < 0.15:
        out.write_bytes(mutate_bytes(rng, out.read_bytes(), hot=100))
        return out.read_bytes()
    db = sqlite3.connect(out)
    rows = db.execute("SELECT seq, ring, aux FROM frames").fetchall()
    seq, ring, aux = rng.choice(rows)
    r = rng.random()
    try:
        _mutate_rows(rng, db, r, seq, ring, aux)
    except sqlite3.Error:  # a constraint refused it: the file stays as copied
        pass
    db.close()
    return out.read_bytes()


def _mutate_rows(rng: random.Random, db: sqlite3.Connection, r: float, seq: int, ring: bytes, aux: bytes | None) -> None:
    with db:
        if r < 0.4:
            db.execute("UPDATE frames SET ring = ? WHERE seq = ?", (mutate_bytes(rng, ring, hot=40), seq))
        elif r < 0.5 and aux is not None:
            db.execute("UPDATE frames SET aux = ? WHERE seq = ?", (mutate_bytes(rng, aux, hot=8), seq))
        elif r < 0.65:
            col = rng.choice(("t_ns", "mono_ns", "key", "marks", "ring", "aux"))
            val = rng.choice(("text", 1.5, -1, 0, 2**62, b"\0", None, "x" * 1000))
            db.execute(f"UPDATE frames SET {col} = ? WHERE seq = ?", (val, seq))
        elif r < 0.8:
            key = rng.choice(("interval_s", "schema_version", "dtypes", "key_every", "format"))
            val = rng.choice(("nan", "inf", "-1", "0", "", "{}", "[1,2", "1e308", "2", "fipstop-recording"))
            db.execute("UPDATE meta SET value = ? WHERE key = ?", (val, key))
        elif r < 0.9:
            db.execute("DELETE FROM frames WHERE seq = ?", (seq,))
        else:
            db.execute("UPDATE frames SET key = 1 - key WHERE seq = ?", (seq,))


FILTER_TPL = b"""[INCLUDES]
before = common.conf

[DEFAULT]
_daemon = sshd

[Definition]
prefregex = ^<F-MLFID>%(__prefix_line)s</F-MLFID><F-CONTENT>.+</F-CONTENT>$
failregex = ^Failed <F-USER>\\S+</F-USER> for .* from <HOST>( port \\d+)?( ssh\\d*)?$
            ^client @\\S+ <HOST>#\\d+ \\(\\S+\\): query \\(cache\\) '\\S+' denied$
ignoreregex = ^Accepted
datepattern = {^LN-BEG}
maxlines = 1
"""
FILTER_PIECES = [b"%(", b")s", b"<HOST>", b"<F-", b">", b"</F-USER>", b"(?P<x>", b"(?", b"[", b"\\", b"{", b"}",
                 b"\xff", b"\n", b"\n  ", b"=", b"[Init]\n", b"<SKIPLINES>", b"%(known/failregex)s", b"maxlines = 9\n",
                 b"before = fuzz.conf\n", b"after = /dev/zero\n", b"(" * 50, b"a{70000}", b"<mdre-<mode>>",
                 b"mode = %(mode)s\n", b"%(_daemon)s" * 20]


HTTP_TPL = [
    b"GET /metrics HTTP/1.1\r\nHost: localhost:9464\r\nAccept: application/openmetrics-text;version=1.0.0;q=0.9,"
    b"text/plain;q=0.5\r\nAccept-Encoding: gzip\r\nConnection: keep-alive\r\n\r\n",
    b"GET / HTTP/1.0\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: Prometheus/2.42.0\r\n\r\n",
    b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
]
HTTP_PIECES = [b"\r\n", b"\n", b"\r", b"\r\n\r\n", b" ", b"\t", b":", b"%00", b"%", b"?", b"#", b"\x00", b"\xff",
               b"HTTP/1.1", b"HTTP/0.9", b"HTTP/2.0", b"GET /metrics HTTP/1.1\r\n\r\n", b"Content-Length: 99999999\r\n",
               b"Content-Length: -5\r\n", b"Transfer-Encoding: chunked\r\n", b"Expect: 100-continue\r\n",
               b"Accept-Encoding: gzip;q=nan\r\n", b"Accept-Encoding: gzip;q=1e999\r\n", b"Accept: */*;q=-1\r\n",
               b"Host: [::1\r\n", b"Connection: close\r\n", b"X: " + b"y" * 9000 + b"\r\n", b"/" * 300,
               b"\x1b[31m", "\u00e9\u202e".encode(), b"/metrics?" + b"a=b&" * 200]


def mutate_http(rng: random.Random, _unused: bytes = b"") -> bytes:
    """Pieces of HTTP syntax inserted, lines cut, duplicated or dropped, and byte-level damage."""
    b = bytearray(rng.choice(HTTP_TPL))
    for _ in range(rng.choice((1, 2, 3, 6))):
        r = rng.random()
        i = rng.randrange(len(b) + 1)
        if r < 0.45:
            b[i:i] = rng.choice(HTTP_PIECES)
        elif r < 0.6:
            del b[i:i + rng.randrange(1, 30)]
        elif r < 0.75:
            lines = bytes(b).split(b"\r\n")
            k = rng.randrange(len(lines))
            lines.insert(rng.randrange(len(lines) + 1), lines[k] * rng.choice((1, 1, 50)))
            b = bytearray(b"\r\n".join(lines))
        elif r < 0.85:
            del b[rng.randrange(len(b) + 1):]
        else:
            b = bytearray(mutate_bytes(rng, bytes(b), hot=64)) if b else b
    return bytes(b)


def mutate_filter(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 2, 3, 6))):
        i = rng.randrange(len(b) + 1)
        r = rng.random()
        if r < 0.5:
            b[i:i] = rng.choice(FILTER_PIECES)
        elif r < 0.7:
            del b[i:i + rng.randrange(1, 20)]
        elif r < 0.85:
            lines = bytes(b).split(b"\n")
            k = rng.randrange(len(lines))
            lines.insert(rng.randrange(len(lines) + 1), lines[k])
            b = bytearray(b"\n".join(lines))
        else:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
    return bytes(b)


# -- the tests ------------------------------------------------------------------------------------------


def corpus(kind: str) -> list[Path]:
    d = CORPUS / kind
    return sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []


def fuzz(kind: str, make, tmp: Path) -> None:
    """The corpus, then mutations until SECONDS pass, in batches through the worker."""
    kept = corpus(kind)
    assert kept, f"the corpus of past failures in {CORPUS / kind} is empty"
    copies = []  # readers open a copy: a recording gets a -wal beside it, the tree stays as committed
    for k in kept:
        c = tmp / f"corpus-{k.name}"
        c.write_bytes(k.read_bytes())
        copies.append(c)
    bad = run_worker(kind, copies)
    assert not bad, f"corpus inputs break the {kind} reader again: {bad[:3]}"
    rng = random.Random(f"{SEED}-{kind}")
    end = time.monotonic() + SECONDS
    n = 0
    while time.monotonic() < end:
        batch = []
        for _ in range(25):
            p = tmp / f"{kind}-{n}"
            make(rng, p)
            batch.append(p)
            n += 1
        bad = run_worker(kind, batch)
        if bad:
            saved = [(keep(kind, p.read_bytes()), why) for p, why in bad[:5]]
            raise AssertionError(f"{len(bad)} {kind} inputs broke the reader (seed {SEED}; kept as "
                                 f"{[str(s) for s, _ in saved]}): {saved[0][1]}")
    print(f"\nfuzz {kind}: {len(kept)} corpus + {n} mutated inputs, seed {SEED}, 0 failures")


def test_fuzz_domain_files(tmp_path: Path) -> None:
    d = tmp_path / "tpl"
    d.mkdir()
    tpl = template_domain(d)
    hot = 4096  # the header, the ring table and the consumer table

    def make(rng: random.Random, p: Path) -> None:
        p.write_bytes(mutate_bytes(rng, tpl, hot=hot))

    fuzz("domain", make, tmp_path)


def test_fuzz_recordings(tmp_path: Path) -> None:
    tpl = tmp_path / "tpl.fsr"
    template_recording(tpl)

    def make(rng: random.Random, p: Path) -> None:
        mutate_recording(rng, tpl, p)

    fuzz("recording", make, tmp_path)


def test_fuzz_http_requests(tmp_path: Path) -> None:
    """Requests to the real `fipstop serve` server (tests/fuzz/worker.py:http_request)."""

    def make(rng: random.Random, p: Path) -> None:
        p.write_bytes(mutate_http(rng))

    fuzz("http", make, tmp_path)


def test_fuzz_filter_files(tmp_path: Path) -> None:
    (tmp_path / "common.conf").write_text("[INCLUDES]\nafter = common.local\n[DEFAULT]\n"
                                          "__prefix_line = \\s*(?:\\S+ )?%(_daemon)s(?:\\[\\d+\\])?:\\s+\n")

    kept = corpus("filter")
    assert kept
    bad = run_worker("filter", [ensure_conf(p, tmp_path) for p in kept])
    assert not bad, f"corpus inputs break the filter reader again: {bad[:3]}"
    rng = random.Random(f"{SEED}-filter")
    end = time.monotonic() + SECONDS
    n = 0
    while time.monotonic() < end:
        batch = []
        for _ in range(25):
            p = tmp_path / f"f{n}.conf"
            p.write_bytes(mutate_filter(rng, FILTER_TPL))
            batch.append(p)
            n += 1
        bad = run_worker("filter", batch)
        if bad:
            saved = [(keep("filter", p.read_bytes()), why) for p, why in bad[:5]]
            raise AssertionError(f"{len(bad)} filter inputs broke the reader (seed {SEED}; kept as "
                                 f"{[str(s) for s, _ in saved]}): {saved[0][1]}")
    print(f"\nfuzz filter: {len(kept)} corpus + {n} mutated inputs, seed {SEED}, 0 failures")


def ensure_conf(p: Path, tmp: Path) -> Path:
    """A corpus filter copied as NAME.conf beside common.conf (load_filter reads NAME.conf)."""
    out = tmp / f"corpus-{p.name}.conf"
    out.write_bytes(p.read_bytes())
    return out
