"""The table of ``fipstop bench ban``: Fail2Ban on a file beside fipstop ips on rings, with ratios."""

from __future__ import annotations

from typing import Any


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.2f}{unit}"
    return f"{v:,}{unit}"


def render_table(doc: dict[str, Any]) -> str:
    r = doc["results"]
    rows = [("", "Fail2Ban on a file", "fipstop ips on FIPS rings", "ratio")]
    f, p = r.get("fail2ban", {}), r.get("fips", {})
    ra = doc["ratios"]

    def row(label: str, key: str, unit: str = "", sub: str | None = None, ratio: float | None = None) -> None:
        def get(x: dict[str, Any]) -> Any:
            v = x.get(key)
            return v.get(sub) if sub and isinstance(v, dict) else v
        rows.append((label, _fmt(get(f), unit), _fmt(get(p), unit), "" if ratio is None else f"{ratio}x"))

    row("attackers banned", "attackers_banned")
    row("share banned", "banned_share")
    row("time until all banned", "time_all_banned_s", " s", ratio=ra.get("time_all_banned"))
    row("attack lasted", "attack_s", " s")
    row("all banned after the attack ended", "all_banned_after_attack_end_s", " s")
    row("time-to-ban p50", "ttb_ms", " ms", "p50", ra.get("ttb_p50"))
    row("time-to-ban p99", "ttb_ms", " ms", "p99", ra.get("ttb_p99"))
    row("attack queries logged / sent", "attack_lines_logged_share")
    row("records dropped", "records_dropped")
    row("named queries/s (dnsperf)", "named_qps", ratio=ra.get("named_qps"))
    row("IPS CPU time", "consumer_cpu_s", " s")
    react = ((p.get("ips_stats") or {}).get("reaction_ms") or {})
    if react.get("count"):
        rows.append(("fips reaction p50 / p99 (maxretry-th record -> ban)", "",
                     f"{react.get('p50')} / {react.get('p99')} ms", ""))
    for side in (f, p):
        if side.get("error"):
            rows.append((f"{side['side']} failed", side["error"], "", ""))
    w = [max(len(str(x[i])) for x in rows) for i in range(4)]
    lines = ["  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i]) for i, c in enumerate(x)) for x in rows]
    for t in doc["targets"]:
        ok = {True: "PASS", False: "FAIL", None: "n/a"}[t["ok"]]
        lines.append(f"target {t['name']}: {t['target']}, measured {t['measured']}: {ok}"
                     + (f" ({t['note']})" if t.get("note") else ""))
    return "\n".join(lines)
