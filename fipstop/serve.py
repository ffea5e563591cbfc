"""``fipstop serve [--listen 127.0.0.1:9464]``: live metrics for Prometheus.

Each scrape of ``/metrics`` samples the probes once (the same ones the
dashboard uses) and answers in the OpenMetrics text format
(:mod:`fipstop.openmetrics`).  Sampling on scrape keeps the numbers as fresh
as the scrape interval and costs nothing between scrapes; concurrent scrapes
share one sample taken under a lock (a second scrape within ``--min-interval``
gets the same sample instead of reading shared memory again).

9464 is the port the OpenTelemetry Prometheus exporter uses by convention;
the default binds loopback only: exposing metrics beyond the host is a
choice (``--listen 0.0.0.0:9464``).
"""

from __future__ import annotations

import argparse
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fipstop.errors import FipsError

__all__ = ["MetricsServer", "parse_listen", "register", "run"]


def parse_listen(text: str) -> tuple[str, int]:
    s = text.strip()
    host, sep, port = s.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", s
    host = host.strip("[]") or "127.0.0.1"
    try:
        p = int(port)
    except ValueError:
        p = -1
    if not 0 <= p <= 65535:
        raise FipsError(f"--listen {s[:60]!r}: give HOST:PORT with a port from 0 to 65535")
    return host, p


class MetricsServer:
    """Serves /metrics from a Source; ``port`` is the bound port (0 picks one)."""

    def __init__(self, source: Any, host: str = "127.0.0.1", port: int = 9464, *, min_interval_s: float = 0.5):
        from fipstop.openmetrics import CONTENT_TYPE, render

        self.source = source
        self.min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._cached: tuple[float, bytes] | None = None
        self.scrapes = 0
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "fipstop"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    try:
                        body, ctype, code = server_self.metrics(), CONTENT_TYPE, 200
                    except Exception as e:  # a failed sample is a 500 with the reason, never a dead server
                        body = f"fipstop: sampling failed: {' '.join(str(e).split())[:300]}\n".encode()
                        ctype, code = "text/plain; charset=utf-8", 500
                elif path in ("/", "/healthz"):
                    body = b"fipstop metrics: /metrics\n" if path == "/" else b"ok\n"
                    ctype, code = "text/plain; charset=utf-8", 200
                else:
                    body, ctype, code = b"not found: try /metrics\n", "text/plain; charset=utf-8", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # quiet: a scrape every 15 s is not news
                pass

        self._render = render
        try:
            self.httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            raise FipsError(f"--listen {host}:{port}: cannot listen ({e.strerror})") from None
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    def metrics(self) -> bytes:
        with self._lock:
            now = time.monotonic()
            if self._cached and now - self._cached[0] < self.min_interval_s:
                return self._cached[1]
            frame = self.source.poll()
            body = self._render(frame.snapshot, aux=frame.aux).encode()
            self._cached = (now, body)
            self.scrapes += 1
            return body

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.5)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="fipstop-serve", daemon=True)
        t.start()
        return t

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve", help="serve live metrics at /metrics (OpenMetrics, for Prometheus)",
        description="An HTTP endpoint with the live rings, consumers and other probes in the OpenMetrics text "
        "format; each scrape samples once.")
    p.add_argument("--listen", default="127.0.0.1:9464", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:9464)")
    p.add_argument("--domain", action="append", metavar="NAME", default=None, help="only this domain (repeatable)")
    from fipstop.config import add_options as add_backend_options

    add_backend_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from fipstop.sources import LiveSource
    from fipstop.top import live_probes

    host, port = parse_listen(args.listen)
    source = LiveSource(live_probes(args), 1.0)
    server = MetricsServer(source, host, port)
    print(f"fipstop: serving metrics on http://{host}:{server.port}/metrics", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        source.close()
    return 0
