"""``fipstop bench bind --callgrind``: named's instructions per query, mode by mode.

Why: on this shared 2-core VM named's CPU per query moves by +-30 % from one
run to the next with the other engineers' load (``bench/results/bind-*.json``:
querylog no alone spans 7.5..12.2 us in eight rounds), which swamps a
difference of a microsecond.  Instruction counts do not move with the load.
named runs under ``valgrind --tool=callgrind --toggle-collect=ns__client_request``:
only the instructions executed inside ns__client_request (libns's handling
of one request: parsing it, dnstap's AUTH_QUERY message, ns_query_start with
the lookup, the answer and log_query's query line, synchronously) are
counted, and callgrind records how many times it was called.  dnsperf sends each line of a 1000-line query
file once (``-n 1``); instructions / calls is the cost of one query, and its
difference to ``querylog no`` is what query logging costs named in that mode.

What it does not count: work outside ns__client_request, e.g. dnstap's
writer thread (the encode and the queueing are inside, the socket write is not),
rsyslogd, a consumer; and no kernel time.  The syslog modes need no rsyslogd
here: mode ``syslog`` is left out.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from fipstop.bench.bind.dns import ZONE, free_port, named_conf, write_queries, write_zone
from fipstop.bench.bind.modes import NATIVE_MODES, BindConfig
from fipstop.bench.bind.native import native_named
from fipstop.bench.bind.procs import build_nullsyslog, find_program, start_capture, start_named, stop_process
from fipstop.bench.bind.run import log
from fipstop.bench.results import machine_info, publish
from fipstop.preload import bind_native_shim_path, bind_shim_path, preload_env, shim_path

CALLGRIND_MODES = ("none", "null_syslog", "fips", "fips_bind", "dnstap", "none_native", "fips_native")
QUERIES = 1000
TOGGLE = "ns__client_request"


def parse_callgrind(text: str, fn: str = TOGGLE) -> tuple[int | None, int | None]:
    """(instructions collected, calls of fn) from a callgrind output file.

    Function names are compressed: the first mention is ``(id) name``, later
    ones ``(id)`` only; every ``cfn=`` edge to fn is followed by ``calls=N``."""
    total = None
    m = re.search(r"^summary:\s+(\d+)", text, re.M) or re.search(r"^totals:\s+(\d+)", text, re.M)
    if m:
        total = int(m.group(1))
    ids = set(re.findall(rf"^c?fn=\((\d+)\) {re.escape(fn)}$", text, re.M))
    if not ids:
        return total, None
    calls = 0
    lines = text.splitlines()
    for i, ln in enumerate(lines[:-1]):
        m2 = re.match(r"^cfn=\((\d+)\)", ln)
        if m2 and m2.group(1) in ids:
            m3 = re.match(r"^calls=(\d+)", lines[i + 1])
            if m3:
                calls += int(m3.group(1))
    return total, calls


def _run_mode(mode: str, tmp: Path, valgrind: str, named: str, dnsperf: str, nullsyslog: Path | None,
              fstrm_capture: str | None, shm: Path) -> dict[str, Any]:
    d = tmp / f"cg-{mode}"
    d.mkdir()
    d.chmod(0o755)
    zone = d / f"{ZONE}.zone"
    write_zone(zone)
    write_queries(d / "queries.txt", n=QUERIES)
    port = free_port()
    conf = d / "named.conf"
    conf.write_text(named_conf(mode, d, port, zone), encoding="utf-8")
    out = d / "callgrind.out"
    if mode in NATIVE_MODES:
        native, reason = native_named()
        if native is None:
            return {"status": "skipped", "reason": reason}
        named = str(native)
    argv = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", f"--toggle-collect={TOGGLE}",
            named, "-f", "-c", str(conf), "-n", "2"]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    helper = None
    if mode == "null_syslog":
        if nullsyslog is None:
            return {"status": "skipped", "reason": "the no-op syslog(3) did not build"}
        env["LD_PRELOAD"] = str(nullsyslog)
    elif mode in ("fips", "fips_bind", "fips_native"):
        from fipstop import _fips

        shim = {"fips_bind": bind_shim_path(), "fips_native": bind_native_shim_path()}.get(mode, shim_path())
        if not shim.is_file():
            return {"status": "skipped", "reason": f"{shim} not built"}
        domain = f"cg-{mode}"
        # 1000 lines fit in a 1 MiB ring: no consumer needed, none dropped
        _fips.Domain(domain, str(shm), create=True).close()
        env = preload_env(env, domain=domain, shm_dir=str(shm), shim=shim)
    elif mode == "dnstap":
        if not fstrm_capture:
            return {"status": "skipped", "reason": "fstrm_capture not found (apt-get install fstrm-bin)"}
        helper, why = start_capture(fstrm_capture, d / "dnstap.sock", d / "dnstap.fstrm")
        if helper is None:
            return {"status": "error", "reason": why}
    t0 = time.monotonic()
    proc, why = start_named(argv, d, port, env)
    try:
        if proc is None:
            return {"status": "error", "reason": why}
        r = subprocess.run([dnsperf, "-s", "127.0.0.1", "-p", str(port), "-d", str(d / "queries.txt"), "-n", "1",
                            "-q", "20"], capture_output=True, text=True, timeout=300)
        answered = re.search(r"Queries completed:\s+(\d+)", r.stdout)
    finally:
        stop_process(proc, 120)
        if helper is not None:
            stop_process(helper, 10)
    if not out.is_file():
        return {"status": "error", "reason": "callgrind wrote no output"}
    total, calls = parse_callgrind(out.read_text(errors="replace"))
    if not total or not calls:
        return {"status": "error", "reason": f"no {TOGGLE} calls in the callgrind output"}
    return {"status": "ok", "instructions": total, "calls": calls,
            "instructions_per_query": round(total / calls, 1),
            "dnsperf_answered": int(answered.group(1)) if answered else None,
            "wall_s": round(time.monotonic() - t0, 1)}


def measure(tmp: Path, shm: Path, modes: tuple[str, ...]) -> dict[str, Any]:
    valgrind, named, dnsperf = find_program("valgrind"), find_program("named"), find_program("dnsperf")
    if not valgrind or not named or not dnsperf:
        return {"status": "skipped", "reason": "needs valgrind, named and dnsperf"}
    nullsyslog = build_nullsyslog()[0] if "null_syslog" in modes else None
    res: dict[str, Any] = {}
    for m in modes:
        log(f"callgrind: {m} ({QUERIES} queries)")
        try:
            res[m] = _run_mode(m, tmp, valgrind, named, dnsperf, nullsyslog, find_program("fstrm_capture"), shm)
        except Exception as exc:  # one broken mode must not lose the others
            res[m] = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        if res[m]["status"] == "ok":
            log(f"  {m}: {res[m]['instructions_per_query']:.0f} instructions per query ({res[m]['calls']} calls)")
    for base in ("none", "null_syslog", "none_native"):
        b = (res.get(base) or {}).get("instructions_per_query")
        for r in res.values():
            if r.get("status") == "ok" and b:
                r[f"minus_{base}"] = round(r["instructions_per_query"] - b, 1)
    return {"status": "ok", "modes": res}


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    m = res.get("modes", {})
    b, f = m.get("fips_bind", {}), m.get("null_syslog", {})
    x = b.get("minus_null_syslog")
    nv, nn = m.get("fips_native", {}), m.get("none_native", {})
    y = nv.get("minus_none_native")
    return [{"name": "fips_bind_instructions_vs_null_syslog", "target": "< 0 (below the no-op syslog floor)",
             "measured": x, "pass": (x < 0) if x is not None else None,
             "note": f"instructions per query in {TOGGLE}, fips_bind {b.get('instructions_per_query')} - "
                     f"null_syslog {f.get('instructions_per_query')}; deterministic, no rounds needed"},
            {"name": "fips_native_instructions_vs_none_native", "target": "informational",
             "measured": y, "pass": None,
             "note": f"instructions per query in {TOGGLE}, fips_native {nv.get('instructions_per_query')} - "
                     f"none_native {nn.get('instructions_per_query')} (the same patched named, querylog no); "
                     "what the native query log costs named"}]


def render(doc: dict[str, Any]) -> str:
    rows = [("mode", "instructions/query", "- none", "- null_syslog", "calls")]
    for mode, r in doc["callgrind"].get("modes", {}).items():
        if r.get("status") != "ok":
            rows.append((mode, r.get("status", "?"), "", "", r.get("reason") or ""))
            continue
        rows.append((mode, f"{r['instructions_per_query']:.0f}", f"{r.get('minus_none', 0):+.0f}",
                     f"{r.get('minus_null_syslog', 0):+.0f}", str(r["calls"])))
    w = [max(len(x[i]) for x in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(n) for c, n in zip(row, w)).rstrip() for row in rows]
    lines.append(f"valgrind --tool=callgrind --toggle-collect={TOGGLE}; dnsperf -n 1 over {QUERIES} queries")
    for t in doc["targets"]:
        v = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        lines.append(f"  {v}  {t['name']}: target {t['target']}, measured {t['measured']}")
    return "\n".join(lines)


def main(config: BindConfig) -> int:
    import tempfile

    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    modes = config.modes or CALLGRIND_MODES
    bad = [m for m in modes if m not in CALLGRIND_MODES]
    if bad:
        from fipstop.errors import FipsError

        raise FipsError(f"bench bind --callgrind: mode(s) {', '.join(bad)} not measured this way; "
                        f"choose from {', '.join(CALLGRIND_MODES)}")
    tmp = Path(tempfile.mkdtemp(prefix="fipstop-bench-bind-cg-"))
    tmp.chmod(0o755)
    shm = Path(tempfile.mkdtemp(prefix="fipstop-bench-bind-cg-", dir=config.shm_dir or None))
    load_start = [round(x, 2) for x in os.getloadavg()]
    t0 = time.monotonic()
    try:
        res = measure(tmp, shm, tuple(modes))
    finally:
        if not config.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
    machine = machine_info()
    machine["loadavg_at_start"] = load_start
    machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {"bench": "bind-callgrind", "schema": 1, "command": config.output.command,
           "date": now.isoformat().replace("+00:00", "Z"), "machine": machine,
           "params": {"modes": list(modes), "queries": QUERIES, "toggle_collect": TOGGLE,
                      "valgrind": f"valgrind --tool=callgrind --toggle-collect={TOGGLE} named -f -c CONF -n 2",
                      "load": f"dnsperf -s 127.0.0.1 -p PORT -d queries.txt -n 1 -q 20 ({QUERIES} lines)"},
           "callgrind": res, "targets": targets(res), "wall_s": round(time.monotonic() - t0, 1)}
    publish("bind-callgrind", doc, config.output, now, render, log)
    return 0
