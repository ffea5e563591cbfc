"""The child process of tests/fuzz/test_fuzz_readers.py: runs one reader over input files.

``python worker.py KIND FILE...`` prints ``BEGIN FILE`` (flushed) before each input and ``OK`` or
``BAD <one line>`` after it.  A reader may refuse an input only with fipstop's one-line
FipsError; any other exception is BAD; a crash or a hang shows as a BEGIN with no answer, which
names the input to the parent.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile
import traceback


def domain(path: str) -> None:
    """A domain file as every reader of the shm dir sees it: the ring probe (the dashboard's, the
    recorder's source), a check over two samples, a tap."""
    from fipstop.analysis.check import evaluate
    from fipstop.analysis.levels import Thresholds
    from fipstop.model.raw import RawFrame
    from fipstop.model.snapshot import ModelStep
    from fipstop.probes.ring import RingProbe

    d = tempfile.mkdtemp(prefix="fuzz-shm-")
    try:
        shutil.copyfile(path, os.path.join(d, "fips.tpl"))
        os.chmod(os.path.join(d, "fips.tpl"), 0o640)
        probe = RingProbe(shm_dir=d)
        step = ModelStep(1.0)
        a = step(RawFrame(probe.sample()))
        b = step(RawFrame(probe.sample()))
        rep = evaluate(a, b, Thresholds())
        assert "\n" not in rep.status_line()
        for dom in b.raw.ring.domains:
            for i in dom.active_ring_indices()[:4]:
                probe.tap(dom.name, int(i), 8)
        for e in b.raw.ring.errors:
            assert "\n" not in e.reason
        probe.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def recording(path: str) -> None:
    """A recording through export (every frame decoded and derived) and the replay source."""
    from fipstop.errors import FipsError
    from fipstop.recording.export import ExportOptions, export
    from fipstop.recording.replay import ReplaySource

    for fmt in ("jsonl", "openmetrics"):
        try:
            export(path, ExportOptions(fmt), io.StringIO())
        except FipsError as e:
            assert "\n" not in e.message
    try:
        src = ReplaySource(path, follow=False)
    except FipsError:
        return
    try:
        while src.poll() is not None:
            pass
        src.seek(0)
    except FipsError:
        pass
    finally:
        src.close()


def filter_file(path: str) -> None:
    """A Fail2Ban filter as `fipstop ips --filter PATH` reads it: load, compile, match two lines."""
    from fipstop import _ipsfast
    from fipstop.ips.filters import load_filter
    from fipstop.ips.jails import JailSpec, compile_jail

    f = load_filter(path)
    cf = f.compiled()
    j = compile_jail(JailSpec(f.name, f), cf)
    _ipsfast.feed_lines([b"Nov 14 17:05:35 host sshd[7]: Failed password for root from 192.0.2.1 port 22 ssh2",
                         b"<30>named[7]: client @0x1 192.0.2.7#53 (x): query (cache) 'x/A/IN' denied"],
                        1_700_000_000_000_000_000, (j,))


class _Http:
    """One `fipstop serve` server (the real MetricsServer on fixture samples) for the worker's whole
    batch, its stderr (fd 2) in a file: whatever a request makes it print is a finding."""

    server = None
    err_path = ""

    @classmethod
    def get(cls):
        if cls.server is None:
            from fipstop import fixtures
            from fipstop.outputs.serve import MetricsServer, ServeLimits
            from fipstop.sources.samples import SampleListSource

            fd, cls.err_path = tempfile.mkstemp(prefix="fuzz-serve-stderr-")
            os.dup2(fd, 2)
            os.close(fd)
            src = SampleListSource(fixtures.demo_samples(4), loop=True)
            cls.server = MetricsServer(src, "127.0.0.1", 0, interval_s=0.2,
                                       limits=ServeLimits(header_timeout_s=1.0, idle_timeout_s=1.0, write_timeout_s=2.0))
            cls.server.start()
        return cls.server


HTTP_ANSWER_S = 6.0  # the server closes an unfinished head after 1 s: an answer takes longer only if it hangs


def _exchange(port: int, data: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=HTTP_ANSWER_S) as s:
        out = b""
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            raise AssertionError(f"hang: no answer and no close within {HTTP_ANSWER_S:.0f} s") from None
        except OSError:
            pass  # the server closed on us: allowed
        return out


def http_request(path: str) -> None:
    """Raw bytes of a client's request (pipelined ones too) sent to `fipstop serve`, the writing half
    closed: an answer or a close, every response a well-formed status line, an error's body one
    line, nothing on the server's stderr, and a plain scrape still answered 200 afterwards."""
    import re

    srv = _Http.get()
    before = os.path.getsize(_Http.err_path)
    with open(path, "rb") as f:
        data = f.read()
    out = _exchange(srv.port, data)
    if out:
        assert out.startswith(b"HTTP/1."), f"answer without a status line: {out[:60]!r}"
    pos = 0
    while pos < len(out):  # the responses one after another (a pipelined request gets several)
        end = out.find(b"\r\n\r\n", pos)
        assert end > 0, f"a response head that does not end: {out[pos:pos + 80]!r}"
        head = out[pos:end]
        status_line = head.split(b"\r\n", 1)[0]
        assert re.fullmatch(rb"HTTP/1\.[01] [1-5]\d\d [ -~]*", status_line), f"bad status line {status_line[:80]!r}"
        m = re.search(rb"(?im)^content-length: *(\d+)\r?$", head)
        n = int(m.group(1)) if m else len(out) - end - 4
        body = out[end + 4:end + 4 + n]
        if body.startswith(b"HTTP/1."):  # the answer to a HEAD: no body
            body, n = b"", 0
        if int(status_line[9:12]) >= 400 and b"content-encoding" not in head.lower():
            assert b"\n" not in body.rstrip(b"\n"), f"{status_line!r}: an error body of several lines: {body[:120]!r}"
        pos = end + 4 + n
    ok = _exchange(srv.port, b"GET /metrics HTTP/1.0\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200") or ok.startswith(b"HTTP/1.0 200"), f"a scrape after it: {ok[:60]!r}"
    if os.path.getsize(_Http.err_path) != before:
        with open(_Http.err_path, "rb") as f:
            f.seek(before)
            err = f.read(400).decode(errors="replace")
        raise AssertionError(f"the server wrote to stderr: {' '.join(err.split())[:200]}")


TARGETS = {"domain": domain, "recording": recording, "filter": filter_file, "http": http_request}


def main() -> int:
    from fipstop.errors import FipsError

    target = TARGETS[sys.argv[1]]
    for path in sys.argv[2:]:
        print(f"BEGIN {path}", flush=True)
        try:
            target(path)
        except FipsError as e:
            if "\n" in e.message or not e.message:
                print(f"BAD not one line: {e.message!r}", flush=True)
                continue
        except Exception as e:  # the finding: a traceback a user would see
            tb = traceback.extract_tb(e.__traceback__)[-1]
            print(f"BAD {type(e).__name__}: {' '.join(str(e).split())[:200]} at {tb.filename}:{tb.lineno}",
                  flush=True)
            continue
        print("OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
