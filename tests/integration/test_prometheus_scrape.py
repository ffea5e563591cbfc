"""A real Prometheus (Debian's) scraping ``fipstop serve`` every second during a headless ``fipstop demo``.

Ground truth is the demo's own summary (records its producer committed) and
Prometheus' own account of its scrapes (``up``, the target's last error).
Checked: every scrape succeeded; the counters Prometheus stored add up to
the demo's totals (exact up to the records committed after the last scrape,
which is bounded by the demo's rate); ``increase()`` over the run agrees
with the raw samples (only its edge extrapolation apart); the contrib rules
load and evaluate without error on the real series.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from promapi import free_port, get, query, wait

from fipstop.demo import producer_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]


REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
DEMO_S = 20.0
ATTACK_RATE, LEGIT_RATE = 4000.0, 1000.0


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian) is not installed")
def test_prometheus_scrapes_every_second_and_rate_matches_the_demo(tmp_path: Path) -> None:
    if not producer_path().exists():
        pytest.skip(f"{producer_path()} is not built (make lib)")
    assert PROMETHEUS is not None
    shm = tmp_path / "shm"
    shm.mkdir()
    serve_port, prom_port = free_port(), free_port()
    rules = REPO / "contrib" / "prometheus" / "fipstop-rules.yml"
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}\n"
        f"rule_files: ['{rules}']\n"
        "scrape_configs:\n"
        "  - job_name: fipstop\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{serve_port}']}}]\n")
    serve = subprocess.Popen([sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "serve", "--listen",
                              f"127.0.0.1:{serve_port}", "--interval", "0.5", "--bans-domain",
                              "promdemo-bans"], stderr=subprocess.PIPE, text=True,
                             cwd=REPO)
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{prom_port}"
    domain = "promdemo"
    try:
        wait(lambda: query(base, 'up{job="fipstop"} == 1'), 30, "Prometheus' first successful scrape")
        t_start = time.time()
        demo = subprocess.run(
            [sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "demo", "--headless", "--json",
             "--duration", f"{DEMO_S:g}", "--attackers", "256", "--attack-rate", f"{ATTACK_RATE:g}",
             "--legit-rate", f"{LEGIT_RATE:g}", "--ramp", "2", "--threads", "2", "--domain", domain],
            capture_output=True, text=True, timeout=DEMO_S + 60, stdin=subprocess.DEVNULL, cwd=REPO)
        assert demo.returncode == 0, demo.stderr
        summary = json.loads(demo.stdout)
        time.sleep(2.5)  # the scrapes after the demo, then ask
        t_end = time.time()
        window = f"{int(t_end - t_start) + 5}s"

        # 0 failed scrapes, about one a second
        n = float(query(base, f'count_over_time(up{{job="fipstop"}}[{window}])')[0]["value"][1])
        ok = float(query(base, f'sum_over_time(up{{job="fipstop"}}[{window}])')[0]["value"][1])
        assert n == ok and n >= int(t_end - t_start) - 1, (n, ok, t_end - t_start)  # one a second, all up
        (target,) = get(f"{base}/api/v1/targets")["data"]["activeTargets"]
        assert target["health"] == "up" and target["lastError"] == "", target
        slowest = float(query(base, f'max_over_time(scrape_duration_seconds{{job="fipstop"}}[{window}])')[0]
                        ["value"][1])
        assert slowest < 0.9  # never near the timeout: answered from the last sample

        # the counters Prometheus stored against the demo's own totals
        raw = query(base, f'fips_ring_records_total{{domain="{domain}"}}[{window}]')
        assert raw and len(raw) == 2  # one series per ring slot (two producer threads), no pid in the key
        first = sum(float(s["values"][0][1]) for s in raw)
        last = sum(float(s["values"][-1][1]) for s in raw)
        total = int(summary["records_committed"])
        peak = ATTACK_RATE + LEGIT_RATE
        assert last <= total and total - last <= peak * 1.5, (last, total)  # only the last second can be missing
        t_last = max(float(s["values"][-1][0]) for s in raw)
        inc = float(query(base, f'sum(increase(fips_ring_records_total{{domain="{domain}"}}[{window}]))',
                           at=t_last)[0]["value"][1])
        assert abs(inc - (last - first)) <= 0.05 * (last - first) + peak, (inc, last - first)
        drops = query(base, f'sum(max_over_time(fips_ring_dropped_records_total{{domain="{domain}"}}[{window}]))')
        assert float(drops[0]["value"][1]) == summary["records_dropped"] == 0
        bans = query(base, f'max_over_time(fips_bans_total{{source="fipstop-ips"}}[{window}])')
        assert bans and float(bans[0]["value"][1]) == summary["ban_events"] == 256

        # the contrib rules loaded and evaluate on the real series without error
        groups = get(f"{base}/api/v1/rules")["data"]["groups"]
        assert {g["name"] for g in groups} == {"fipstop-recording", "fipstop-alerts"}
        bad = [r["name"] for g in groups for r in g["rules"] if r.get("health") not in ("ok", "unknown")]
        assert not bad, bad
        print(f"scrapes {n:.0f} ok {ok:.0f}; slowest {slowest * 1000:.1f} ms; demo {total} records, Prometheus "
              f"saw {last:.0f} (first sample {first:.0f}), increase() {inc:.0f}")
    finally:
        prom.terminate()
        serve.terminate()
        prom.wait(10)
        _, err = serve.communicate(timeout=10)
    assert "Traceback" not in err, err
