"""``fipstop bench bind --scaling 10-16``: the FIPS paper's client scaling.

The paper's FIPS Syslog "could not handle 2^16 clients".  Here named is
loaded, once per logging mode and per client count 2^k, by
bench/bind/clients.c: queries from 2^k distinct loopback source addresses
(127.16.0.0 + i, round-robin, so every address asks at least once), a
window of ``OUTSTANDING`` in flight like dnsperf's ``-q``, answers matched
to the address and id they were asked from.  Each (clients, mode) run is a
:meth:`~fipstop.bench.bind.run.Bench.run_one` of the ordinary bench with
this sender as the load, so the figures are the same: queries/s answered,
lines logged / answered (the drain's count, the file's, dnstap's frames),
ring drops, named's CPU per query.  Client counts run in order, and the
modes in reverse order every other count (ABBA).

The target it reports (the issue's): at 2^16 clients every fips mode logs
>= 99.9 % of the queries answered.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fipstop.bench.bind.dns import OUTSTANDING, ZONE
from fipstop.bench.bind.modes import FIPS_MODES, TARGET_LOGGED, BindConfig, Run
from fipstop.bench.bind.run import Bench, log
from fipstop.bench.cbuild import build_c, source
from fipstop.bench.results import machine_info, publish
from fipstop.errors import FipsError

CLIENTS_SRC = source("bind/clients.c")
DEFAULT_SCALING_MODES = ("none", "fips", "fips_bind", "dnstap", "fips_native")
SCALING_SECONDS = 4.0
QUICK_SCALING_SECONDS = 1.0
MAX_EXPONENT = 20


def parse_exponents(text: str) -> tuple[int, ...]:
    """``10-16`` or ``10,12,16``: the k of 2^k clients (1..20)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"--scaling: not an exponent or a range of them: {part!r} (e.g. 10-16)") from None
        if not 0 <= a <= b <= MAX_EXPONENT:
            raise ValueError(f"--scaling: exponents must be 0..{MAX_EXPONENT}, low to high: {part!r}")
        out += range(a, b + 1)
    if not out:
        raise ValueError("--scaling: no exponent given (e.g. 10-16)")
    return tuple(sorted(set(out)))


class ScalingBench(Bench):
    """The bench with clients.c as its load, one client count at a time."""

    load_name = "clients"

    def __init__(self, config: BindConfig) -> None:
        super().__init__(config if config.modes else _with_modes(config, DEFAULT_SCALING_MODES))
        if not config.seconds:
            self.seconds = QUICK_SCALING_SECONDS if self.quick else SCALING_SECONDS
        self.clients = 1
        self.sender: Path | None = None
        self.sender_reason: str | None = None

    def load_argv(self, port: int) -> list[str]:
        return [str(self.sender), str(port), str(self.clients), f"{self.seconds:g}", str(OUTSTANDING), ZONE]

    def parse_load(self, text: str) -> dict[str, Any] | None:
        for line in reversed(text.splitlines()):
            if line.startswith("{"):
                try:
                    d = json.loads(line)
                except ValueError:
                    return None
                if not isinstance(d, dict) or "queries_completed" not in d:
                    return None
                return {"qps": float(d["qps"]), "queries_sent": int(d["queries_sent"]),
                        "queries_completed": int(d["queries_completed"]), "queries_lost": int(d["queries_lost"]),
                        "run_time_s": float(d["run_time_s"]), "latency_avg_s": None,
                        "rcodes": {k: int(v) for k, v in d.get("rcodes", {}).items()},
                        "load": {k: d.get(k) for k in ("clients", "clients_asked", "unmatched", "send_errors")}}
        return None

    def missing(self) -> str | None:
        if not self.named:
            return "named not found (apt-get install bind9)"
        return None

    def scale(self, exponents: tuple[int, ...]) -> list[Run]:
        runs: list[Run] = []
        why = self.missing()
        if why is None:
            self.sender, self.sender_reason, info = build_c("bindclients", (CLIENTS_SRC,))
            self.build_info["clients"] = info
            why = None if self.sender else f"clients.c did not build: {self.sender_reason}"
        if why:
            return [self._fail(Run(mode=m, round=0, clients=1 << k), why, "skipped")
                    for k in exponents for m in self.modes]
        self.prepare()
        for i, k in enumerate(exponents):
            self.clients = 1 << k
            order = self.modes if i % 2 == 0 else tuple(reversed(self.modes))
            for pos, mode in enumerate(order):
                log(f"2^{k} clients: {mode} ({self.seconds:g} s)")
                try:
                    r = self.run_one(mode, k)
                except Exception as exc:  # one broken run must not lose the others
                    r = self._fail(Run(mode=mode, round=k), f"{type(exc).__name__}: {exc}", "error")
                r.clients, r.order = self.clients, pos
                if r.status != "ok":
                    log(f"  {mode}: {r.status}: {r.reason}")
                else:
                    log(f"  {mode}: {r.qps:.0f} q/s, logged {r.log_lines} of {r.queries_completed}")
                runs.append(r)
        return runs


def _with_modes(config: BindConfig, modes: tuple[str, ...]) -> BindConfig:
    from dataclasses import replace

    return replace(config, modes=modes)


def table(runs: list[Run], modes: tuple[str, ...]) -> list[dict[str, Any]]:
    """One row per client count: per mode q/s, logged / answered, ring drops, queries lost."""
    rows: list[dict[str, Any]] = []
    for n in sorted({r.clients for r in runs if r.clients}):
        row: dict[str, Any] = {"clients": n, "exponent": n.bit_length() - 1, "modes": {}}
        for m in modes:
            r = next((x for x in runs if x.clients == n and x.mode == m), None)
            if r is None:
                continue
            if r.status != "ok":
                row["modes"][m] = {"status": r.status, "reason": r.reason}
                continue
            row["modes"][m] = {
                "status": "ok", "qps": r.qps, "queries_sent": r.queries_sent, "queries_answered": r.queries_completed,
                "queries_lost": r.queries_lost, "log_lines": r.log_lines, "logged_per_answered": r.logged_per_answered,
                "ring_dropped": (r.ring_load or {}).get("records_dropped") if m in FIPS_MODES else None,
                "clients_asked": (r.load or {}).get("clients_asked"),
                "named_cpu_us_per_query": r.named_cpu_us_per_query, "other_cpu_cores": r.other_cpu_cores,
            }
        rows.append(row)
    return rows


def scaling_targets(rows: list[dict[str, Any]], modes: tuple[str, ...]) -> list[dict[str, Any]]:
    top = next((r for r in rows if r["clients"] == 1 << 16), None)
    out = []
    for m in modes:
        if m not in FIPS_MODES:
            continue
        x = ((top or {}).get("modes", {}).get(m) or {}).get("logged_per_answered")
        out.append({"name": f"{m}_logged_at_2^16_clients", "target": f">= {TARGET_LOGGED:.1%}", "measured": x,
                    "pass": (x >= TARGET_LOGGED) if x is not None else None,
                    "note": "lines logged / queries answered, 65536 distinct source addresses"})
    return out


def render(doc: dict[str, Any]) -> str:
    modes = doc["params"]["modes"]
    head = ["clients", *(f"{m} q/s | logged | drops" for m in modes)]
    lines = ["  ".join(head)]
    for row in doc["scaling"]:
        cells = [f"2^{row['exponent']}"]
        for m in modes:
            c = row["modes"].get(m) or {}
            if c.get("status") != "ok":
                cells.append(f"{m}: {c.get('status', '-')}")
                continue
            lg = c["logged_per_answered"]
            cells.append(f"{c['qps'] / 1000:.1f} k | {'-' if lg is None else f'{lg * 100:.2f} %'} | "
                         f"{'-' if c['ring_dropped'] is None else c['ring_dropped']}")
        lines.append("  ".join(cells))
    lines.append("")
    lines.append(f"{doc['params']['seconds_per_run']:g} s per run; load average before/after: "
                 f"{doc['machine'].get('loadavg_at_start')} / {doc['machine'].get('loadavg_at_end')}")
    lines.append("targets:")
    for t in doc["targets"]:
        v = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        m = t["measured"]
        lines.append(f"  {v:4}  {t['name']}: target {t['target']}, measured {'-' if m is None else f'{m:.2%}'}")
    return "\n".join(lines)


def main(config: BindConfig) -> int:
    """Run the client scaling, publish bench/results/bind-clients-<date>.json."""
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    load_start = [round(x, 2) for x in os.getloadavg()]
    try:
        bench = ScalingBench(config)
    except ValueError as exc:
        raise FipsError(f"bench bind: {exc}") from None
    t0 = time.monotonic()
    try:
        runs = bench.scale(config.scaling)
    finally:
        bench.cleanup()
    machine = machine_info()
    machine["loadavg_at_start"] = load_start
    machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    rows = table(runs, bench.modes)
    params = bench.params()
    params.update(seconds_per_run=bench.seconds, exponents=list(config.scaling),
                  load_command=f"bench/bind/clients.c: clients PORT 2^k {bench.seconds:g} {OUTSTANDING} {ZONE} "
                  "(IP_PKTINFO sources 127.16.0.0 + i, round-robin; runs on until every address asked once)")
    for k in ("dnsperf_command", "seconds_per_mode", "rounds", "ratio_method", "reference_qps_design_md"):
        params.pop(k, None)
    doc = {"bench": "bind-clients", "schema": 1, "command": config.output.command,
           "date": now.isoformat().replace("+00:00", "Z"), "machine": machine, "params": params,
           "scaling": rows, "targets": scaling_targets(rows, bench.modes), "runs": [asdict(r) for r in runs],
           "wall_s": round(time.monotonic() - t0, 2)}
    publish("bind-clients", doc, config.output, now, render, log)
    return 0
