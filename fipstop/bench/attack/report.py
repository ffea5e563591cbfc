"""The text of ``fipstop bench attack``: one table per attack length (pipelines side by side), the targets,
and the response-rate chart drawn in the terminal with plotext (pinned in pyproject: 6.x removed its API)."""

from __future__ import annotations

import re
from typing import Any

from fipstop.bench.attack.series import rolling

_ESC = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

ORDER = ("fips", "fail2ban", "crowdsec", "none")
#: one character per pipeline: the chart has no colours, the lines must still be told apart
MARKERS = {"fips": "F", "fail2ban": "2", "crowdsec": "c", "none": "."}


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".") + unit
    if isinstance(v, int):
        return f"{v:,}{unit}"
    return f"{v}{unit}"


def _pct(v: Any) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{v * 100:.2f} %"


def _reached(r: dict[str, Any], key: str) -> str:
    v = r.get(key)
    if v is None:
        return f"not reached (> {r.get('attack_s', '?')} s)" if "series" in r else "-"
    return f"{v:.1f} s"


def _read(r: dict[str, Any]) -> Any:
    """Records the IPS says it read (fipstop ips: its stats; CrowdSec: cscli metrics; Fail2Ban tells no such count)."""
    if "ips_stats" in r:
        return (r.get("ips_stats") or {}).get("records")
    return (r.get("crowdsec") or {}).get("lines_read")


def _split(r: dict[str, Any], key: str) -> str:
    """fipstop ips's own reaction, or a part of it (its stats: record timestamp -> the action returned,
    within 2 %; p99s of the parts do not add up to the whole's); "-" for an IPS that tells none."""
    p = ((r.get("ips_stats") or {}).get(key) or {})
    return _fmt(p.get("p99"), " ms") if p.get("count") else "-"


def _est(r: dict[str, Any]) -> str:
    v = r.get("all_banned_estimate_s")
    if v is None:
        return "-"
    if r.get("attackers_banned") == r.get("attackers"):
        return f"{v:,.1f} (measured)"
    return f"~{v:,.0f} (estimate)"


def table(key: str, runs: dict[str, Any], ratios: dict[str, Any]) -> str:
    cols = [p for p in ORDER if p in runs]
    rows: list[tuple[str, ...]] = [(f"attack {key}", *(runs[p].get("label", p) for p in cols))]

    def row(label: str, fn) -> None:
        rows.append((label, *(("failed" if "error" in runs[p] else fn(runs[p])) for p in cols)))

    row("attack sent (q/s)", lambda r: f"{(r.get('attack') or {}).get('rate_qps', 0):,.0f}")
    row("valid response before the attack", lambda r: _pct(r.get("baseline_response")))
    row("time to 99 %", lambda r: _reached(r, "time_to_99_s"))
    row("time to 99.5 %", lambda r: _reached(r, "time_to_99_5_s"))
    row("mean valid response before 99.5 %", lambda r: _pct(r.get("mean_response_before_99_5")))
    row("mean valid response, whole attack", lambda r: _pct(r.get("mean_response_attack")))
    row("attackers banned / total", lambda r: f"{_fmt(r.get('attackers_banned'))} / {_fmt(r.get('attackers'))}")
    row("  elements in nft sets at the end", lambda r: _fmt(sum((r.get("nft_sets") or {}).values())))
    row("last ban after (s)", lambda r: _fmt(r.get("last_ban_after_s")))
    row("bans/s (banned / time to last ban)", lambda r: _fmt(r.get("bans_per_s")))
    row("all banned after (s; est. at that rate)", lambda r: _est(r))
    for q in ("p50", "p99", "max"):
        row(f"time-to-ban {q} (first line -> ban)", lambda r, q=q: _fmt((r.get("ttb_ms") or {}).get(q), " ms"))
    row("reaction p99 (maxretry-th line -> ban)", lambda r: _fmt((r.get("reaction_ms") or {}).get("p99"), " ms"))
    row("fipstop ips's own stats: reaction p99", lambda r: _split(r, "reaction_ms"))
    row("  its part: record -> read by the IPS, p99", lambda r: _split(r, "reaction_read_ms"))
    row("  its part: handed to the action -> in force, p99", lambda r: _split(r, "reaction_action_ms"))
    row("attack queries named logged / sent", lambda r: _pct(r.get("attack_lines_logged_share")))
    row("log records the IPS read", lambda r: _fmt(_read(r)))
    row("records dropped (logging path)", lambda r: _fmt(r.get("records_dropped")))
    row("IPS CPU time", lambda r: _fmt(r.get("ips_cpu_s"), " s"))
    row("named CPU time", lambda r: _fmt(r.get("named_cpu_s"), " s"))
    row("load average (1 min) after", lambda r: _fmt((r.get("loadavg_after") or [None])[0]))
    w = [max(len(str(x[i])) for x in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i]) for i, c in enumerate(x)) for x in rows]
    for p in cols:
        if "error" in runs[p]:
            lines.append(f"{p} failed: {runs[p]['error']}")
    rs = {k: v for k, v in ratios.items() if v is not None}
    if rs:
        lines.append("ratios (other / FIPS): " + ", ".join(f"{k} {v}x" for k, v in rs.items()))
    return "\n".join(lines)


def chart(key: str, runs: dict[str, Any], width: int = 100, height: int = 22) -> str:
    """The valid clients' response rate over time (1 s rolling mean), every pipeline on one chart (plotext, plain
    text: no colour codes, so it reads the same in a log file)."""
    try:
        import plotext as plt
    except ImportError:
        return "(chart: plotext is not installed)"
    plt.clf()
    plt.plot_size(width, height)
    plt.theme("clear")
    drawn = 0
    for p in ORDER:
        r = runs.get(p)
        s = (r or {}).get("series")
        if not s:
            continue
        xs, ys = rolling(s["t_s"], s["sent"], s["answered"])
        if xs:
            plt.plot(xs, ys, label=(r or {}).get("label", p), marker=MARKERS.get(p, "."))
            drawn += 1
    if not drawn:
        return ""
    plt.ylim(0, 100)
    plt.title(f"valid clients' response rate (%, 1 s mean), attack {key} from t = 0")
    plt.xlabel("seconds since the first attack packet")
    out = plt.build()
    plt.clf()
    return _ESC.sub("", str(out))  # the clear theme still resets colours at each line's end


def render_table(doc: dict[str, Any]) -> str:
    parts = []
    skipped = (doc.get("params") or {}).get("skipped") or {}
    for p, why in skipped.items():
        parts.append(f"{p}: skipped: {why}")
    for key, runs in doc["runs"].items():
        parts.append(table(key, runs, doc["ratios"].get(key, {})))
        c = chart(key, runs)
        if c:
            parts.append(c)
    for t in doc["targets"]:
        ok = {True: "MET", False: "NOT MET", None: "n/a"}[t["ok"]]
        parts.append(f"target {t['name']}: {t['target']}, measured {_fmt(t['measured'])}: {ok}"
                     + (f" ({t['note']})" if t.get("note") else ""))
    return "\n".join(parts)
