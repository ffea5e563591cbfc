"""named and dnsperf for ``fipstop bench bind``: the zone, the queries, named.conf, dnsperf's report.

:func:`render_named_conf` is also what the integration tests start named with.
"""

from __future__ import annotations

import random
import re
import socket
import struct
from pathlib import Path
from typing import Any

from fipstop.bench.bind.modes import NATIVE_MODES

CLIENTS, THREADS, OUTSTANDING = 8, 2, 200
NAMED_THREADS = 2
ZONE = "example.test"
N_NAMES = 5000  # hosts h0..h4999 in the zone
NX_EVERY = 10  # every 10th query line is a name that does not exist (NXDOMAIN)
N_QUERY_LINES = 20000
# In the query-log line of every dnsperf query ("... query: h12.example.test IN A -E(0)K ..."),
# not in the SOA query of the readiness probe nor in any other message.
QUERY_TOKEN = f"{ZONE} IN A ".encode()


def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (named listens on both)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("127.0.0.1", 0))
            port = u.getsockname()[1]
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    t.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free port on 127.0.0.1")


def soa_answered(port: int, zone: str = ZONE, timeout: float = 0.5) -> bool:
    """One UDP SOA query to 127.0.0.1#port: True on a NOERROR answer."""
    qid = random.randrange(1, 0xFFFF)
    qname = b"".join(bytes([len(label)]) + label.encode() for label in zone.split(".")) + b"\0"
    pkt = struct.pack(">HHHHHH", qid, 0, 1, 0, 0, 0) + qname + struct.pack(">HH", 6, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(pkt, ("127.0.0.1", port))
            data = s.recv(4096)
        except OSError:
            return False
    if len(data) < 12:
        return False
    rid, flags, _qd, an, _ns, _ar = struct.unpack(">HHHHHH", data[:12])
    return rid == qid and flags & 0x8000 and (flags & 0xF) == 0 and an >= 1


def write_zone(path: Path) -> None:
    lines = [
        "$TTL 300",
        f"@ IN SOA ns.{ZONE}. admin.{ZONE}. 1 3600 600 86400 300",
        f"@ IN NS ns.{ZONE}.",
        "ns IN A 127.0.0.1",
    ]
    lines += [f"h{i} IN A 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(N_NAMES)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_queries(path: Path, n: int = N_QUERY_LINES, seed: int = 3) -> dict[str, Any]:
    """dnsperf's input: n lines 'NAME TYPE'; every NX_EVERY-th is NXDOMAIN."""
    rng = random.Random(seed)
    nx = 0
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            if i % NX_EVERY == NX_EVERY - 1:
                f.write(f"nx{rng.randrange(1 << 30)}.{ZONE} A\n")
                nx += 1
            else:
                f.write(f"h{rng.randrange(N_NAMES)}.{ZONE} A\n")
    return {"lines": n, "nxdomain_lines": nx, "names_in_zone": N_NAMES, "seed": seed}


def named_conf(mode: str, d: Path, port: int, zone_file: Path) -> str:
    """named.conf for one query-logging mode of the bench (a native mode: its stock mode's)."""
    mode = NATIVE_MODES.get(mode, mode)
    if mode == "none":
        return render_named_conf(d, port, zone_file, querylog=False, channels={}, categories={"queries": "null"})
    if mode == "dnstap":
        # dnstap instead of the query log: named's own binary, framed transport
        return render_named_conf(d, port, zone_file, querylog=False, channels={}, categories={"queries": "null"},
                                 extra_options=f'dnstap {{ auth query; }};\n    dnstap-output unix "{d}/dnstap.sock";')
    if mode == "file":
        return render_named_conf(d, port, zone_file, querylog=True,
                                 channels={"qfile": f'file "{d}/queries.log"; severity info; print-time yes;'},
                                 categories={"queries": "qfile"})
    # syslog and the fips modes: syslog(3), which the shim replaces under wrap
    # (fips_bind: the preload takes the queries category before it reaches a channel)
    return render_named_conf(d, port, zone_file, querylog=True,
                             channels={"qsyslog": "syslog daemon; severity info;"}, categories={"queries": "qsyslog"})


def render_named_conf(d: Path, port: int, zone_file: Path, *, querylog: bool, channels: dict[str, str],
                      categories: dict[str, str], allow_query: str | None = None, listen: str = "127.0.0.1",
                      extra_options: str = "") -> str:
    """The one named.conf every bench and test here starts named with: foreground-friendly paths in ``d``,
    ``listen`` (loopback by default) only on ``port``, no recursion, the test zone, a ``main`` file channel for
    everything else, and the given extra ``channels`` (name -> destination clause) and ``categories``
    (name -> channel)."""
    chans = "".join(f"    channel {name} {{ {dest} }};\n" for name, dest in channels.items())
    cats = "".join(f"    category {name} {{ {chan}; }};\n" for name, chan in categories.items())
    allow = f"    allow-query {{ {allow_query}; }};\n" if allow_query else ""
    if extra_options:
        allow += f"    {extra_options}\n"
    return f"""options {{
    directory "{d}";
    pid-file "{d}/named.pid";
    session-keyfile "{d}/session.key";
    listen-on port {port} {{ {listen}; }};
    listen-on-v6 {{ none; }};
    recursion no;
    dnssec-validation no;
    notify no;
    querylog {"yes" if querylog else "no"};
{allow}}};
controls {{ }};
logging {{
    channel main {{ file "{d}/named.log"; severity info; print-time yes; }};
{chans}    category default {{ main; }};
    category general {{ main; }};
{cats}}};
zone "{ZONE}" {{ type primary; file "{zone_file}"; }};
"""


_DNSPERF_FIELDS = {
    "queries_sent": r"Queries sent:\s+(\d+)",
    "queries_completed": r"Queries completed:\s+(\d+)",
    "queries_lost": r"Queries lost:\s+(\d+)",
    "qps": r"Queries per second:\s+([\d.]+)",
    "run_time_s": r"Run time \(s\):\s+([\d.]+)",
    "latency_avg_s": r"Average Latency \(s\):\s+([\d.]+)",
}


def parse_dnsperf(text: str) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for key, pat in _DNSPERF_FIELDS.items():
        m = re.search(pat, text)
        if not m:
            if key in ("queries_completed", "qps"):
                return None
            out[key] = None
            continue
        out[key] = float(m.group(1)) if key in ("qps", "run_time_s", "latency_avg_s") else int(m.group(1))
    codes: dict[str, int] = {}
    m = re.search(r"Response codes:\s+(.*)", text)
    if m:
        for name, count in re.findall(r"([A-Z]+) (\d+) \(", m.group(1)):
            codes[name] = int(count)
    out["rcodes"] = codes
    return out
