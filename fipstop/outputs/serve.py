"""Live metrics for Prometheus: the /metrics server behind ``fipstop serve``.

A background sampler polls the source every ``interval_s`` (the dashboard's
probes), looks at the domain files as ``fipstop check`` does (their modes,
a walk of every open ring's records: :func:`fipstop.analysis.check.inspect_host`)
and renders the exposition in both formats; a scrape is answered
from the last sample at once, so it never waits behind a slow probe and
never stalls because another scrape is sampling (``fipstop_exporter_*``
says how old the sample is and how long it took); the body is rendered (and
gzip'd, for a scraper that accepts it, as Prometheus does) once per sample.  The format is negotiated
from the ``Accept`` header as prometheus_client does
(:func:`fipstop.outputs.openmetrics.choose_format`): OpenMetrics for a
scraper that asks for it (Prometheus does), the text format 0.0.4 otherwise.

The HTTP side is built for a port other hosts may reach, with
node_exporter's behaviour as the reference: one asyncio loop, no thread per
connection (a thousand idle or slow sockets cost a few KB each); the request
head must arrive within ``header_timeout_s`` (slowloris), an idle keep-alive
connection is closed after ``idle_timeout_s``, a response not read within
``write_timeout_s`` is dropped; at most ``max_connections`` at once (then the
one that has waited longest for a request head is closed for the new one, so
a thousand slow sockets cannot lock a scraper out; the open-files limit is
raised to its hard limit, as Go programs do); a listen backlog of ``backlog``; a client that goes away
early is no error (no traceback, nothing on stderr).  ``HOST`` may be an
IPv6 address (``[::1]:9464``) or empty for every address of both families
(``:9464``).

9464 is the port the OpenTelemetry Prometheus exporter uses by convention;
the default binds loopback only: exposing metrics beyond the host is a
choice (``--listen :9464``).
"""

from __future__ import annotations

import asyncio
import gzip
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from fipstop.analysis.check import inspect_host
from fipstop.errors import FipsError, one_line
from fipstop.outputs.openmetrics import (
    CONTENT_TYPES,
    OPENMETRICS,
    Family,
    choose_format,
    encode,
    families,
    inspection_families,
)
from fipstop.sources.protocol import Source

__all__ = ["MetricsServer", "ServeLimits", "parse_listen"]

_MAX_HEAD_BYTES = 16 * 1024


def parse_listen(text: str) -> tuple[str | None, int]:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` (every address, both families: host None) or ``PORT`` (loopback)."""
    s = text.strip()
    host, sep, port = s.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", s
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise FipsError(f"--listen {s[:60]!r}: put an IPv6 address in brackets, as [::1]:9464")
    try:
        p = int(port)
    except ValueError:
        p = -1
    if not 0 <= p <= 65535:
        raise FipsError(f"--listen {s[:60]!r}: give HOST:PORT with a port from 0 to 65535")
    return (host or None), p


def _raise_nofile() -> None:
    """The soft open-files limit up to the hard one (Go's runtime does this for node_exporter): 1024 is too few
    for an exporter a thousand sockets can reach."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
    except (ValueError, OSError):
        pass


def _accepts_gzip(header: str) -> bool:
    """``gzip`` in Accept-Encoding with a quality above 0 (Prometheus sends ``gzip``)."""
    for part in header.split(","):
        name, *params = part.split(";")
        if name.strip().lower() == "gzip":
            for p in params:
                k, _, v = p.partition("=")
                if k.strip() == "q":
                    try:
                        return float(v) > 0
                    except ValueError:
                        return False
            return True
    return False


@dataclass(frozen=True)
class ServeLimits:
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    write_timeout_s: float = 10.0
    max_connections: int = 4096
    backlog: int = 1024


@dataclass(frozen=True)
class _Sample:
    bodies: dict[str, str]  # format -> exposition without the exporter's own families and without # EOF
    taken_realtime_ns: int
    duration_s: float
    seq: int  # which sample this is (the body cache's key: never reused)


class MetricsServer:
    """Serves /metrics from a Source; ``port`` is the bound port (0 picks one)."""

    def __init__(self, source: Source, host: str | None = "127.0.0.1", port: int = 9464, *,
                 interval_s: float = 1.0, procfs_root: str = "/proc", limits: ServeLimits = ServeLimits(),
                 inspect: bool = True) -> None:
        self.source = source
        self.inspect = inspect
        self.interval_s = interval_s
        self.limits = limits
        self.procfs_root = procfs_root
        self.scrapes = 0
        self.samples = 0
        self.sample_errors = 0
        self.last_error = ""
        self.connections = 0
        self.refused = 0
        self.evicted = 0
        self._bodies: dict[tuple[int, int, str, bool], bytes] = {}
        self._waiting: dict[asyncio.StreamWriter, float] = {}
        self._open: set[asyncio.StreamWriter] = set()  # connections waiting for a request head, since when
        self._sample: _Sample | None = None
        self._have_sample = threading.Event()
        self._stop = threading.Event()
        _raise_nofile()
        self._loop = asyncio.new_event_loop()
        self._sampler: threading.Thread | None = None
        self._thread: threading.Thread | None = None
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(
                self._connection, host, port, backlog=limits.backlog, reuse_address=True,
                limit=_MAX_HEAD_BYTES))
        except OSError as e:
            self._loop.close()
            where = f"[{host}]" if host and ":" in host else (host or "")
            raise FipsError(f"--listen {where}:{port}: cannot listen ({e.strerror or e})") from None
        self.sockets = [s.getsockname() for s in self._server.sockets]
        self.port = int(self.sockets[0][1])

    # -- sampling ---------------------------------------------------------------------------------------------------

    def _pid_alive(self, pid: int) -> bool:
        return pid <= 0 or os.path.exists(os.path.join(self.procfs_root, str(pid)))

    def sample_once(self) -> bool:
        """Poll the source once and keep the rendered exposition; False when the source has no more frames."""
        t0 = time.monotonic()
        try:
            frame = self.source.poll()
            if frame is None:
                return False
            fams = families(frame.snapshot, pid_alive=self._pid_alive)
            if self.inspect:
                fams += inspection_families(inspect_host(frame))
            bodies = {fmt: encode(fams, fmt, eof=False) for fmt in CONTENT_TYPES}
            self.samples += 1
            self._sample = _Sample(bodies, frame.snapshot.taken_realtime_ns, time.monotonic() - t0, self.samples)
        except Exception as e:  # a failed sample keeps the last good one and is counted, never a dead server
            self.sample_errors += 1
            self.last_error = one_line(e, 300)
        self._have_sample.set()
        return True

    def _sample_loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            if not self.sample_once():
                return
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def _own_families(self, sample: _Sample | None) -> list[Family]:
        ts = Family("fipstop_exporter_sample_timestamp_seconds", "gauge", "When the sample this scrape shows was "
                    "taken (Unix time).", "seconds")
        dur = Family("fipstop_exporter_sample_duration_seconds", "gauge", "How long taking that sample took.",
                     "seconds")
        errs = Family("fipstop_exporter_sample_errors", "counter", "Samples that failed (the last good one is "
                      "served).")
        if sample is not None:
            ts.add({}, sample.taken_realtime_ns / 1e9)
            dur.add({}, sample.duration_s)
        errs.add({}, self.sample_errors)
        return [ts, dur, errs]

    def metrics(self, fmt: str = OPENMETRICS) -> bytes:
        """The exposition of the last sample in ``fmt`` (FipsError when there is none yet)."""
        sample = self._sample
        if sample is None:
            raise FipsError("no sample yet" + (f": {self.last_error}" if self.last_error else ""))
        self.scrapes += 1
        return self._body(sample, fmt, False)

    def _body(self, sample: _Sample, fmt: str, gz: bool) -> bytes:
        """The body for ``sample``, the same bytes for every scrape until the next sample (gzip'd once)."""
        key = (sample.seq, self.sample_errors, fmt, gz)
        cached = self._bodies.get(key)
        if cached is None:
            cached = (sample.bodies[fmt] + encode(self._own_families(sample), fmt)).encode()
            if gz:
                cached = gzip.compress(cached, compresslevel=1, mtime=0)
            if len(self._bodies) > 8:
                self._bodies.clear()
            self._bodies[key] = cached
        return cached

    # -- HTTP -------------------------------------------------------------------------------------------------------

    def _respond(self, method: str, target: str, accept: str | None,
                 encoding: str = "") -> tuple[int, str, bytes, bool]:
        """(status, content type, body, gzip'd)."""
        code, ctype, body = self._respond_plain(method, target, accept)
        if code == 200 and ctype in CONTENT_TYPES.values() and _accepts_gzip(encoding):
            sample = self._sample
            if sample is not None:
                self.scrapes += 1
                return code, ctype, self._body(sample, choose_format(accept), True), True
        if code == 200 and ctype in CONTENT_TYPES.values():
            self.scrapes += 1
        return code, ctype, body, False

    def _respond_plain(self, method: str, target: str, accept: str | None) -> tuple[int, str, bytes]:
        path = target.split("?", 1)[0]
        plain = "text/plain; charset=utf-8"
        if method not in ("GET", "HEAD"):
            return 405, plain, b"method not allowed: GET /metrics\n"
        if path == "/metrics":
            if self._sample is None:
                self._have_sample.wait(2.0)  # only before the very first sample
            fmt = choose_format(accept)
            sample = self._sample
            if sample is not None:
                return 200, CONTENT_TYPES[fmt], self._body(sample, fmt, False)
            try:
                return 200, CONTENT_TYPES[fmt], self.metrics(fmt)
            except FipsError as e:
                return 503, plain, f"fipstop: {e.message}\n".encode()
        if path == "/":
            return 200, plain, b"fipstop metrics: /metrics\n"
        if path == "/healthz":
            return 200, plain, b"ok\n"
        return 404, plain, b"not found: try /metrics\n"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lim = self.limits
        if self.connections >= lim.max_connections and not self._evict_oldest_waiting():
            self.refused += 1
            writer.transport.abort()
            return
        self.connections += 1
        self._open.add(writer)
        try:
            first = True
            while True:
                self._waiting[writer] = time.monotonic()
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                                  lim.header_timeout_s if first else lim.idle_timeout_s)
                except asyncio.LimitOverrunError:
                    await self._send(writer, 431, "text/plain; charset=utf-8", b"request head too large\n",
                                     keep=False)
                    return
                finally:
                    self._waiting.pop(writer, None)
                first = False
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    await self._send(writer, 400, "text/plain; charset=utf-8", b"bad request\n", keep=False)
                    return
                method, target, version = parts
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    k, sep, v = line.partition(":")
                    if sep:
                        headers[k.strip().lower()] = v.strip()
                if headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers:
                    await self._send(writer, 400, "text/plain; charset=utf-8", b"no request body, please\n",
                                     keep=False)
                    return
                conn = headers.get("connection", "").lower()
                keep = conn == "keep-alive" if version == "HTTP/1.0" else conn != "close"
                code, ctype, body, gz = await asyncio.get_running_loop().run_in_executor(
                    None, self._respond, method, target, headers.get("accept"), headers.get("accept-encoding", ""))
                await self._send(writer, code, ctype, body if method != "HEAD" else b"", keep=keep,
                                 length=len(body), gzipped=gz)
                if not keep:
                    return
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            return  # slow, idle or gone: close quietly
        finally:
            self.connections -= 1
            self._open.discard(writer)
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # a reader that does not read: drop what is queued
            else:
                writer.close()

    def _evict_oldest_waiting(self) -> bool:
        """At the connection cap: close the connection that has waited longest for a request head (a slowloris
        socket or an idle keep-alive), so a scraper that sends its request at once is always served."""
        if not self._waiting:
            return False
        oldest = min(self._waiting, key=self._waiting.__getitem__)
        del self._waiting[oldest]
        self.evicted += 1
        oldest.transport.abort()
        return True

    async def _send(self, writer: asyncio.StreamWriter, code: int, ctype: str, body: bytes, *, keep: bool,
                    length: int | None = None, gzipped: bool = False) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large", 503: "Service Unavailable"}.get(code, "")
        head = (f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body) if length is None else length}\r\n"
                f"Connection: {'keep-alive' if keep else 'close'}\r\nServer: fipstop\r\n"
                + ("Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n" if gzipped else "") + "\r\n")
        writer.write(head.encode("latin-1") + body)
        await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)

    # -- running ----------------------------------------------------------------------------------------------------

    def _start_sampler(self) -> None:
        if self._sampler is None:
            self._sampler = threading.Thread(target=self._sample_loop, name="fipstop-sampler", daemon=True)
            self._sampler.start()

    def serve_forever(self, until: Callable[[], bool] | None = None) -> None:
        """Sample and serve in this thread until :meth:`close` (or ``until()`` turns true)."""
        self._start_sampler()

        async def run() -> None:
            while not self._stop.is_set() and not (until is not None and until()):
                await asyncio.sleep(0.2)

        self._loop.run_until_complete(run())

    def start(self) -> threading.Thread:
        """Sample and serve in background threads (tests, embedding)."""
        self._thread = threading.Thread(target=self.serve_forever, name="fipstop-serve", daemon=True)
        self._thread.start()
        return self._thread

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._sampler is not None:
            self._sampler.join(5)
        if not self._loop.is_closed():
            self._server.close()
            # the connections still open end here, inside the loop (asyncio.run's shutdown): no "Task was
            # destroyed" and no "Event loop is closed" on stderr when serve stops with clients connected
            # (aborted, not cancelled: Python 3.11's stream callback reports a cancelled handler as an error)
            pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for w in list(self._open):
                w.transport.abort()

            async def finish() -> None:
                await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 2.0)
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

            try:
                self._loop.run_until_complete(finish())
                self._loop.run_until_complete(self._loop.shutdown_default_executor())
            except (TimeoutError, RuntimeError):
                pass
            self._loop.close()

