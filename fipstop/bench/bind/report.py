"""The result of ``fipstop bench bind``: per mode the median round and the
ratios to no logging, the issue's targets, the reference numbers, the table.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from fipstop.bench.bind.modes import (
    DESCRIPTIONS,
    DISTURBED_CORES,
    FIPS_MODES,
    MIN_ABBA_ROUNDS,
    REFERENCE_QPS,
    TARGET_BIND_LOGGED,
    TARGET_LOGGED,
    TARGET_NATIVE_CPU_US,
    TARGET_NATIVE_QPS_RATIO,
    TARGET_QPS_RATIO,
    Run,
)
from fipstop.bench.results import mean_ci

__all__ = ["quality", "reference", "render_table", "summarize", "targets"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _med(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return statistics.median(known) if known else None


def _qps(r: Run) -> float:
    """The q/s of a run that went ok (only those are compared)."""
    assert r.qps is not None
    return r.qps


# --------------------------------------------------------------------------- #


def paired_ratio(ok: list[Run], runs: list[Run], base_mode: str) -> tuple[float | None, list[int]]:
    """Median over rounds of qps / qps of base_mode in the same round, using
    only rounds where neither run was disturbed when there is one; (ratio,
    rounds used)."""
    base = {r.round: r for r in runs if r.mode == base_mode and r.status == "ok" and r.qps}
    pairs = [(r, base[r.round]) for r in ok if r.round in base]
    calm = [(r, b) for r, b in pairs if not r.disturbed and not b.disturbed]
    use = calm or pairs
    if not use:
        return None, []
    return round(statistics.median(_qps(r) / _qps(b) for r, b in use), 4), sorted(r.round for r, _ in use)


def paired_cpu_diff(ok: list[Run], runs: list[Run], base_mode: str) -> dict[str, Any] | None:
    """named's CPU per query minus base_mode's, round by round (both runs of a
    round are minutes apart at most, and CPU per query moves much less with
    the machine's other load than queries/s does): the median, the mean with
    its 95 % t-interval, the per-round values and how many rounds were below 0."""
    base = {r.round: r.named_cpu_us_per_query for r in runs
            if r.mode == base_mode and r.status == "ok" and r.named_cpu_us_per_query is not None}
    diffs = {r.round: round(r.named_cpu_us_per_query - base[r.round], 3) for r in ok
             if r.named_cpu_us_per_query is not None and r.round in base}
    if not diffs:
        return None
    vals = list(diffs.values())
    m, lo, hi = mean_ci(vals)
    return {"median_us": round(statistics.median(vals), 3), "mean_us": round(m, 3),
            "ci95_us": [round(lo, 3), round(hi, 3)] if len(vals) > 1 else None,
            "rounds": len(vals), "rounds_below_zero": sum(1 for v in vals if v < 0),
            "by_round": [diffs.get(i) for i in range(max(diffs) + 1)]}


def summarize(modes: tuple[str, ...], runs: list[Run]) -> list[dict[str, Any]]:
    base = {r.round: r.qps for r in runs if r.mode == "none" and r.status == "ok"}
    out = []
    for mode in modes:
        mine = [r for r in runs if r.mode == mode]
        ok = [r for r in mine if r.status == "ok" and r.qps]
        entry: dict[str, Any] = {"mode": mode, "description": DESCRIPTIONS[mode]}
        if not ok:
            first = mine[0] if mine else None
            entry.update(status=first.status if first else "skipped",
                         skip_reason=first.reason if first else "not run", qps=None, ratio_to_none=None)
            entry["runs"] = [_run_json(r) for r in mine]
            out.append(entry)
            continue
        calm = [r for r in ok if not r.disturbed]
        pool = sorted(calm or ok, key=lambda r: r.qps or 0.0)
        med = pool[(len(pool) - 1) // 2]
        # per-round ratios; rounds where this run or the baseline was disturbed
        # are left out when at least one calm pair exists
        ratio, used = paired_ratio(ok, runs, "none")
        floor_ratio, floor_used = paired_ratio(ok, runs, "null_syslog")
        by_round = {r.round: round(_qps(r) / b, 4) for r in ok if (b := base.get(r.round))}
        all_ratios = [by_round.get(i) for i in range(max((r.round for r in mine), default=-1) + 1)]
        logged = [r.logged_per_answered for r in ok if r.logged_per_answered is not None]
        entry.update(
            status="ok",
            skip_reason=None,
            qps=med.qps,
            qps_runs=[r.qps for r in ok],
            ratio_to_none=ratio,
            ratio_by_round=all_ratios,
            ratio_rounds_used=used,
            ratio_to_null_syslog=floor_ratio,
            ratio_to_null_syslog_rounds_used=floor_used,
            rounds_disturbed=sorted(r.round for r in ok if r.disturbed),
            queries_sent=med.queries_sent,
            queries_answered=med.queries_completed,
            queries_lost=med.queries_lost,
            rcodes=med.rcodes,
            log_lines=med.log_lines,
            logged_per_answered=med.logged_per_answered,
            logged_per_answered_min=min(logged) if logged else None,
            ring=med.ring,
            ring_load=med.ring_load,
            consumer=med.consumer,
            named_cpu_cores=med.named_cpu_cores,
            named_cpu_us_per_query=med.named_cpu_us_per_query,
            named_cpu_us_per_query_median=_med([r.named_cpu_us_per_query for r in ok]),
            cpu_us_per_query_minus_none=paired_cpu_diff(ok, runs, "none"),
            cpu_us_per_query_minus_null_syslog=paired_cpu_diff(ok, runs, "null_syslog"),
            cpu_us_per_query_minus_none_native=paired_cpu_diff(ok, runs, "none_native"),
            ratio_to_none_native=paired_ratio(ok, runs, "none_native")[0],
            ring_dropped_total=sum(int((r.ring_load or {}).get("records_dropped") or 0) for r in ok)
            if mode in FIPS_MODES else None,
            dnstap=med.dnstap,
            helper=med.helper,
            helper_cpu_s=med.helper_cpu_s,
            dnsperf_cpu_s=med.dnsperf_cpu_s,
            median_round=med.round,
            other_cpu_cores=med.other_cpu_cores,
        )
        if mode in FIPS_MODES:
            acc = [_accounted(r) for r in ok]
            entry["ring_accounted_per_answered_min"] = min(x for x in acc if x is not None) if any(
                x is not None for x in acc) else None
        entry["runs"] = [_run_json(r) for r in mine]
        failed = [r for r in mine if r.status != "ok"]
        if failed:
            entry["notes"] = f"{len(failed)} of {len(mine)} rounds failed: {failed[0].reason}"
        out.append(entry)
    return out


def _accounted(r: Run) -> float | None:
    """(committed + dropped) / answered: every query named logged is either in
    a ring or counted as dropped."""
    if not r.ring_load or not r.queries_completed:
        return None
    return round((r.ring_load["records_committed"] + r.ring_load["records_dropped"]) / r.queries_completed, 6)


def _run_json(r: Run) -> dict[str, Any]:
    d = asdict(r)
    d["ring_accounted_per_answered"] = _accounted(r)
    return d


def targets(results: list[dict[str, Any]], shim_call: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    by = {r["mode"]: r for r in results}

    def t(name: str, target: str, measured: float | None, ok: bool | None, note: str = "") -> dict[str, Any]:
        return {"name": name, "target": target, "measured": measured,
                "pass": ok if measured is not None else None, "note": note}

    out = []
    f = by.get("fips", {})
    n = by.get("fips_nocons", {})
    x = f.get("ratio_to_none")
    out.append(t("fips_with_consumer_qps_vs_none", f">= {TARGET_QPS_RATIO:.0%}", x,
                 x is not None and x >= TARGET_QPS_RATIO, "median of per-round ratios"))
    x = f.get("logged_per_answered_min")
    lost = sum(int((run.get("consumer") or {}).get("lost") or 0) for run in f.get("runs", []))
    drops = sum(int((run.get("ring") or {}).get("records_dropped") or 0) for run in f.get("runs", []))
    out.append(t("fips_with_consumer_logged_vs_answered", f">= {TARGET_LOGGED:.1%}", x,
                 x is not None and x >= TARGET_LOGGED,
                 f"worst round; query lines the consumer read / queries dnsperf got answered; "
                 f"ring drops {drops}, consumer lost {lost} over all rounds"))
    x = n.get("ratio_to_none")
    out.append(t("fips_no_consumer_qps_vs_none", f">= {TARGET_QPS_RATIO:.0%} (full speed)", x,
                 x is not None and x >= TARGET_QPS_RATIO, "median of per-round ratios"))
    x = by.get("null_syslog", {}).get("ratio_to_none")
    out.append(t("null_syslog_qps_vs_none", "informational", x, None,
                 "the floor: BIND's own query logging (querylog yes, syslog(3) a no-op); no transport behind "
                 "syslog(3) can exceed it, so a fips ratio to none above it is not reachable"))
    x = f.get("ratio_to_null_syslog")
    out.append(t("fips_with_consumer_qps_vs_null_syslog", "informational", x, None,
                 "the shim's own cost: fips vs BIND query logging into a no-op syslog(3) (the floor for any "
                 "syslog transport); not an issue target"))
    sc = shim_call if shim_call and shim_call.get("status") in ("ok", "warning") else {}
    x = sc.get("predicted_ratio_to_null_syslog")
    out.append(t("fips_shim_cost_vs_null_syslog_per_call", "informational", x, None,
                 f"the shim's cost per call measured against a no-op syslog(3) in one process "
                 f"({sc.get('cost_ns_per_call')} ns, 95 % {sc.get('cost_ns_ci95')}) over named's CPU per query "
                 f"with the no-op ({sc.get('named_us_per_query_null_syslog')} us): the throughput it leaves "
                 "named against the floor, free of the run-to-run noise of queries/s"))
    b = by.get("fips_bind", {})
    dn = b.get("cpu_us_per_query_minus_null_syslog") or {}
    ci = dn.get("ci95_us")
    x = dn.get("median_us")
    out.append(t("fips_bind_cpu_vs_null_syslog", "named CPU/query below the no-op syslog floor: 95 % interval of "
                 f"per-round differences < 0 us, >= {MIN_ABBA_ROUNDS} ABBA rounds", x,
                 ci is not None and ci[1] < 0 and dn.get("rounds", 0) >= MIN_ABBA_ROUNDS,
                 f"us/query, fips_bind - null_syslog, median of {dn.get('rounds')} rounds; mean {dn.get('mean_us')} "
                 f"95 % {ci}; {dn.get('rounds_below_zero')} rounds below 0"))
    x = b.get("logged_per_answered_min")
    out.append(t("fips_bind_logged_vs_answered", f">= {TARGET_BIND_LOGGED:.2%}", x,
                 x is not None and x >= TARGET_BIND_LOGGED and b.get("ring_dropped_total") == 0,
                 f"worst round; lines the drain read / queries dnsperf got answered; ring drops "
                 f"{b.get('ring_dropped_total')} over all rounds (must be 0)"))
    x = b.get("ratio_to_null_syslog")
    out.append(t("fips_bind_qps_vs_null_syslog", "informational", x, None,
                 "median of per-round q/s ratios; queries/s moves +-30 % between runs here: the CPU per query "
                 "difference above is the figure that resolves"))
    dnone = b.get("cpu_us_per_query_minus_none") or {}
    out.append(t("fips_bind_cpu_vs_none", "informational", dnone.get("median_us"), None,
                 f"us/query over querylog no, median of per-round differences (95 % {dnone.get('ci95_us')}); "
                 "what query logging still costs named with the preload"))
    nv = by.get("fips_native", {})
    dnv = nv.get("cpu_us_per_query_minus_none_native") or {}
    x = dnv.get("median_us")
    out.append(t("fips_native_cpu_vs_none_native", f"<= +{TARGET_NATIVE_CPU_US} us/query, median of >= "
                 f"{MIN_ABBA_ROUNDS} ABBA rounds", x,
                 x is not None and x <= TARGET_NATIVE_CPU_US and dnv.get("rounds", 0) >= MIN_ABBA_ROUNDS,
                 f"named CPU us/query, fips_native - none_native (the same patched named, querylog no), median of "
                 f"{dnv.get('rounds')} per-round differences; mean {dnv.get('mean_us')} 95 % {dnv.get('ci95_us')}; "
                 f"{dnv.get('rounds_below_zero')} rounds below 0"))
    x = nv.get("ratio_to_none_native")
    out.append(t("fips_native_qps_vs_none_native", f">= {TARGET_NATIVE_QPS_RATIO:.0%}", x,
                 x is not None and x >= TARGET_NATIVE_QPS_RATIO,
                 "median of per-round q/s ratios to none_native (q/s moves +-30 % between runs here)"))
    x = nv.get("logged_per_answered_min")
    out.append(t("fips_native_logged_vs_answered", f">= {TARGET_BIND_LOGGED:.2%}, 0 drops", x,
                 x is not None and x >= TARGET_BIND_LOGGED and nv.get("ring_dropped_total") == 0,
                 f"worst round; records the drain matched on their fields (type A, class IN, the zone) / queries "
                 f"answered; ring drops "
                 f"{nv.get('ring_dropped_total')} over all rounds (must be 0)"))
    nn = by.get("none_native", {})
    dnn = nn.get("cpu_us_per_query_minus_none") or {}
    out.append(t("none_native_cpu_vs_none", "informational", dnn.get("median_us"), None,
                 "us/query of the rebuilt named (querylog no) over Debian's named (querylog no): what the rebuild "
                 f"itself changes; 95 % {dnn.get('ci95_us')}"))
    dt = by.get("dnstap", {})
    out.append(t("dnstap_frames_vs_answered", "informational", dt.get("logged_per_answered_min"), None,
                 "worst round; AUTH_QUERY frames (type A, the zone) fstrm_capture wrote / queries answered"))
    dtn = dt.get("cpu_us_per_query_minus_none") or {}
    out.append(t("dnstap_cpu_vs_none", "informational", dtn.get("median_us"), None,
                 f"us/query over querylog no, median of per-round differences (95 % {dtn.get('ci95_us')})"))
    x = n.get("ring_accounted_per_answered_min")
    out.append(t("fips_no_consumer_drops_counted", "(committed + dropped) / answered >= 100 %", x,
                 x is not None and x >= 1.0,
                 "worst round; every query line named logged is in a ring or in the dropped counter "
                 "(> 100 % when named logged queries whose answers dnsperf counted lost)"))
    return out


# output


def _k(x: float | None) -> str:
    return "-" if x is None else f"{x / 1000:.1f} k"


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x * 100:.{digits}f} %"


def render_table(doc: dict[str, Any]) -> str:
    rows = [("mode", "q/s", "vs none", "logged/answered", "ring drops", "named CPU", "us/query", "-none us",
             "helper CPU s")]
    for r in doc["results"]:
        if r["status"] != "ok":
            rows.append((r["mode"], r["status"], "", "", "", "", "", "", r.get("skip_reason") or ""))
            continue
        ring = r.get("ring") or {}
        dn = (r.get("cpu_us_per_query_minus_none") or {}).get("median_us")
        rows.append((
            r["mode"],
            _k(r["qps"]),
            _pct(r["ratio_to_none"]),
            _pct(r["logged_per_answered"], 2) if r["mode"] != "none" else "-",
            str(ring.get("records_dropped", "-")),
            "-" if r["named_cpu_cores"] is None else f"{r['named_cpu_cores']:.2f} cores",
            "-" if r["named_cpu_us_per_query"] is None else f"{r['named_cpu_us_per_query']:.1f}",
            "-" if dn is None or r["mode"] == "none" else f"{dn:+.2f}",
            "-" if r["helper_cpu_s"] is None else f"{r['helper_cpu_s']:.2f} ({r['helper']})",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    p = doc["params"]
    lines.append("")
    lines.append(f"{p['rounds']} round(s) x {p['seconds_per_mode']:g} s per mode; {p['dnsperf_command']}")
    lines.append(f"load average before/after: {doc['machine'].get('loadavg_at_start')} / "
                 f"{doc['machine'].get('loadavg_at_end')}")
    w = (doc.get("quality") or {}).get("warning")
    if w:
        lines.append(f"WARNING: {w}")
    sc = doc.get("shim_call") or {}
    if sc.get("status") == "warning":
        lines.append(f"WARNING: shim cost per call: {sc.get('reason')}")
    if sc.get("status") in ("ok", "warning"):
        lines.append(f"shim cost per call (vs a no-op syslog(3), same process): {sc['cost_ns_per_call']} ns, "
                     f"95 % {sc['cost_ns_ci95'][0]}..{sc['cost_ns_ci95'][1]} ns"
                     + (f"; named at {sc['named_us_per_query_null_syslog']} us/query keeps "
                        f"{sc['predicted_ratio_to_null_syslog'] * 100:.1f} % of the floor's q/s"
                        if sc.get("predicted_ratio_to_null_syslog") else ""))
    elif sc:
        lines.append(f"shim cost per call: {sc.get('status')}: {sc.get('reason')}")
    lines.append("targets:")
    for t in doc["targets"]:
        verdict = "info" if t["target"] == "informational" else {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        m = t["measured"]
        shown = "-" if m is None else (f"{m:+.3f} us" if "_cpu_" in t["name"] else f"{m * 100:.2f} %")
        lines.append(f"  {verdict:4}  {t['name']}: target {t['target']}, measured {shown}")
    return "\n".join(lines)


def quality(results: list[dict[str, Any]]) -> dict[str, Any]:
    """How far the machine's other load can be trusted not to have decided the ratios."""
    calm = {}
    for r in results:
        runs = [x for x in r.get("runs", []) if x.get("status") == "ok"]
        calm[r["mode"]] = sum(1 for x in runs if x.get("disturbed") is False)
    others = [x.get("other_cpu_cores") for r in results for x in r.get("runs", [])
              if x.get("other_cpu_cores") is not None]
    avg = round(sum(others) / len(others), 3) if others else None
    warning = None
    if any(n == 0 for n in calm.values()):
        bad = ", ".join(m for m, n in calm.items() if n == 0)
        warning = (f"no undisturbed round for {bad}: other processes used {avg} cores on average during the "
                   f"loads (> {DISTURBED_CORES} counts as disturbed); these ratios measure the machine's other "
                   "load as much as logging")
    return {"calm_rounds_per_mode": calm, "other_cpu_cores_mean": avg, "warning": warning}


def reference(results: list[dict[str, Any]]) -> dict[str, Any]:
    """This run next to DESIGN.md's numbers for a 2-core machine."""
    by = {r["mode"]: r for r in results}
    ref_base = REFERENCE_QPS["none"]
    out: dict[str, Any] = {"source": "DESIGN.md (2-core CI-class machine, named -n 2, same dnsperf command)"}
    for mode, q in REFERENCE_QPS.items():
        mine = by.get(mode, {})
        out[mode] = {
            "reference_qps": q,
            "reference_ratio_to_none": round(q / ref_base, 4),
            "measured_qps": mine.get("qps"),
            "measured_ratio_to_none": mine.get("ratio_to_none"),
        }
    return out
