"""The paper's figure for ``fipstop bench attack``: the valid clients' response rate over time, every pipeline
on one chart per attack length, as a plain SVG (no plotting library; PNG through rsvg-convert when present)."""

from __future__ import annotations

import shutil
import subprocess
from html import escape
from pathlib import Path
from typing import Any

from fipstop.bench.attack.series import rolling

COLORS = {"fips": "#1f77b4", "fail2ban": "#d62728", "crowdsec": "#2ca02c", "none": "#7f7f7f"}
ORDER = ("fips", "fail2ban", "crowdsec", "none")
W, PH = 900, 320  # width, one panel's height
ML, MR, MT, MB = 60, 190, 36, 44


def _panel(key: str, runs: dict[str, Any], y0: int) -> list[str]:
    out: list[str] = []
    xs_all = [t for r in runs.values() for t in ((r.get("series") or {}).get("t_s") or [])]
    if not xs_all:
        return out
    x_lo, x_hi = min(xs_all), max(xs_all) + 0.1
    pw, ph = W - ML - MR, PH - MT - MB

    def X(t: float) -> float:
        return ML + (t - x_lo) / (x_hi - x_lo) * pw

    def Y(v: float) -> float:
        return y0 + MT + (1 - v / 100.0) * ph

    out.append(f'<text x="{ML}" y="{y0 + 22}" font-size="15" font-weight="bold">Valid clients\' response rate, '
               f'attack of {escape(key)} (starts at 0; 1 s mean of 100 ms bins)</text>')
    out.append(f'<rect x="{ML}" y="{y0 + MT}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    for v in (0, 25, 50, 75, 99.5, 100):
        if v == 99.5:
            out.append(f'<line x1="{ML}" x2="{ML + pw}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#999" '
                       f'stroke-dasharray="4 3"/>')
            continue
        out.append(f'<line x1="{ML - 4}" x2="{ML}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#444"/>')
        out.append(f'<text x="{ML - 8}" y="{Y(v) + 4:.1f}" font-size="11" text-anchor="end">{v:g} %</text>')
    span = x_hi - x_lo
    step = next(s for s in (1, 2, 5, 10, 20, 30, 60, 120, 300, 600) if span / s <= 12)
    t = step * int(x_lo / step)
    while t <= x_hi:
        if t >= x_lo:
            out.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{y0 + MT + ph}" y2="{y0 + MT + ph + 4}" '
                       f'stroke="#444"/>')
            out.append(f'<text x="{X(t):.1f}" y="{y0 + MT + ph + 17}" font-size="11" '
                       f'text-anchor="middle">{t:g}</text>')
        t += step
    out.append(f'<text x="{ML + pw / 2}" y="{y0 + PH - 8}" font-size="12" text-anchor="middle">seconds since the '
               f'first attack packet</text>')
    if x_lo <= 0 <= x_hi:
        out.append(f'<line x1="{X(0):.1f}" x2="{X(0):.1f}" y1="{y0 + MT}" y2="{y0 + MT + ph}" stroke="#bbb"/>')
    ly = y0 + MT + 10
    for p in ORDER:
        r = runs.get(p) or {}
        s = r.get("series")
        if not s:
            continue
        xs, ys = rolling(s["t_s"], s["sent"], s["answered"])
        pts = " ".join(f"{X(t):.1f},{Y(v):.1f}" for t, v in zip(xs, ys))
        c = COLORS.get(p, "#000")
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.6" points="{pts}"/>')
        t995 = r.get("time_to_99_5_s")
        label = r.get("label", p)
        note = f"99.5 % at {t995:.1f} s" if isinstance(t995, (int, float)) else "99.5 % not reached"
        out.append(f'<line x1="{ML + pw + 12}" x2="{ML + pw + 32}" y1="{ly}" y2="{ly}" stroke="{c}" '
                   f'stroke-width="3"/>')
        out.append(f'<text x="{ML + pw + 38}" y="{ly + 4}" font-size="12">{escape(label)}</text>')
        out.append(f'<text x="{ML + pw + 38}" y="{ly + 18}" font-size="11" fill="#555">{escape(note)}</text>')
        ly += 40
    return out


def _load(doc: dict[str, Any]) -> str:
    la = (doc.get("machine") or {}).get("loadavg_at_end") or []
    return f"{la[0]:.1f} (1-min average at the end)" if la and isinstance(la[0], (int, float)) else "unknown"


def svg(doc: dict[str, Any]) -> str:
    keys = list(doc["runs"])
    height = PH * max(1, len(keys)) + 30
    body: list[str] = []
    for i, key in enumerate(keys):
        body += _panel(key, doc["runs"][key], i * PH)
    p = doc.get("params") or {}
    foot = (f"{p.get('attackers')} spoofed attackers at {p.get('attack_rate_qps', 0):,.0f} q/s, valid clients "
            f"{p.get('valid_qps', 0):,.0f} q/s, bins of {p.get('bin_ms')} ms; {doc.get('date', '')}, load "
            f"{_load(doc)}")
    sched = str(p.get("ips_scheduling") or "")
    if sched.startswith("SCHED_FIFO"):  # a chart of real-time IPSs must say so: it is not the default set-up
        foot += f"; every IPS {sched.split(' (')[0]}"
    body.append(f'<text x="{ML}" y="{height - 10}" font-size="11" fill="#555">{escape(foot)}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
            f'viewBox="0 0 {W} {height}" font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
            + "\n".join(body) + "\n</svg>\n")


def write(doc: dict[str, Any], json_path: Path) -> list[Path]:
    """NAME.svg (and NAME.png when rsvg-convert is there) beside a result's NAME.json."""
    out = json_path.with_suffix(".svg")
    out.write_text(svg(doc), encoding="utf-8")
    written = [out]
    conv = shutil.which("rsvg-convert")
    if conv:
        png = json_path.with_suffix(".png")
        r = subprocess.run([conv, "-o", str(png), str(out)], capture_output=True, timeout=60)
        if r.returncode == 0:
            written.append(png)
    return written
