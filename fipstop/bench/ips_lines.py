"""The records ``fipstop bench ips`` feeds its matchers: BIND query-log lines
as libfips_syslog.so stores them, and how a bench fills a ring with them
(shared by the throughput, matcher-vs-previous and time-to-ban parts)."""

from __future__ import annotations

import sys


def _log(msg: str) -> None:
    print(f"bench ips: {msg}", file=sys.stderr, flush=True)


def query_line(i: int, k: int = 0) -> bytes:
    """A BIND 9.18 query-log record as libfips_syslog.so stores it (client i)."""
    return (f"<30>named[4242]: client @0x7f3a2c0{k % 10}b168 10.{(i >> 8) & 255}.{i & 255}.{1 + (i >> 16)}"
            f"#{1024 + (i * 7 + k) % 60000} (www{k % 97}.example.com): query: www{k % 97}.example.com IN A "
            f"+E(0)K (127.0.0.1)").encode()


def legit_line(i: int, k: int) -> bytes:
    return (f"<30>named[4242]: client @0x7f3a2c0{k % 10}b168 192.168.{(i >> 8) & 255}.{i & 255}"
            f"#{1024 + k % 60000} (mail.example.org): query: mail.example.org IN MX +E(0) (127.0.0.1)").encode()


def _fill(prod, lines: list[bytes], want: int) -> int:
    n = 0
    while n < want:
        chunk = lines[: min(len(lines), want - n)]
        got = prod.log_batch(chunk)
        n += got
        if got < len(chunk):
            break
    return n
