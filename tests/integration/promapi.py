"""What the Prometheus tests share: a free port, the HTTP query API, and waiting for a condition
(the server and the exporters start asynchronously)."""

from __future__ import annotations

import json
import socket
import time
import urllib.parse
import urllib.request
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 5) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def query(base: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """The result vector of an instant query (at time ``at``, or now)."""
    q = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
    doc = get(f"{base}/api/v1/query?{urllib.parse.urlencode(q)}")
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def wait(pred, timeout: float, what: str) -> None:
    """Poll ``pred`` every 0.25 s (an OSError counts as not yet) until true, else fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")
