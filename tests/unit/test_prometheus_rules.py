"""contrib/prometheus: the alerting and recording rules, one per ``fipstop
check`` condition, run by promtool against series shaped like fipstop's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fipstop import fixtures
from fipstop.banfixtures import demo_ban_aux
from fipstop.model.raw import RawFrame
from fipstop.model.snapshot import ModelStep
from fipstop.outputs.openmetrics import TEXT, render

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "prometheus"
RULES = CONTRIB / "fipstop-rules.yml"
RULE_TESTS = CONTRIB / "fipstop-rules.test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian prometheus) is not installed")


@needs_promtool
def test_rules_are_valid_and_their_tests_pass() -> None:
    assert PROMTOOL is not None
    r = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=120,
                       cwd=CONTRIB)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def _exposed_names() -> set[str]:
    """Every sample name fipstop serve exposes for the demo fixture (bans and backends included)."""
    n = 40
    aux = [{"backends": b, **bans} for b, bans in zip(fixtures.backend_samples(n), demo_ban_aux(n), strict=True)]
    step = ModelStep()
    frames = [step(RawFrame(s, a)) for s, a in zip(fixtures.demo_samples(n), aux, strict=True)]
    text = render(frames[-1].snapshot, fmt=TEXT, pid_alive=lambda pid: pid % 2 == 0)
    names = {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line and line[0] != "#"}
    # families the fixture has no sample of, but fipstop exposes: a domain that cannot be read, the exporter itself,
    # the backends that are not in the fixture
    return names | {"fips_domain_error", "fipstop_exporter_sample_timestamp_seconds",
                    "fips_backend_syslog_socket_drops_total", "fips_backend_rsyslog_queue_discarded_total"}


def test_every_metric_the_rules_read_is_one_fipstop_exposes() -> None:
    from fipstop.outputs import openmetrics

    source = Path(openmetrics.__file__).read_text() + Path(openmetrics.__file__).with_name("serve.py").read_text()
    exposed = _exposed_names()
    for path in (RULES, RULE_TESTS):
        text = path.read_text()
        used = set(re.findall(r"\b(fips(?:top)?_[a-z0-9_]+)", text)) - {"fips_consumer_health"}
        for name in sorted(used):
            base = re.sub(r"_(total|info|bucket)$", "", name)
            assert name in exposed or f'"{base}"' in source, f"{path.name}: {name} is not a fipstop metric"
        assert "fips_consumer_health" in exposed


def test_every_check_condition_has_an_alert() -> None:
    """The conditions of fipstop check that /metrics can show, each with an alert at the check's thresholds."""
    text = RULES.read_text()
    alerts = set(re.findall(r"- alert: (\w+)", text))
    for condition, alert in {"drops": "FipsRingDropping", "fill": "FipsRingFilling", "lag": "FipsConsumerLagging",
                             "lag_seconds": "FipsConsumerLagSeconds", "consumers stale": "FipsConsumerStale",
                             "consumers evicted": "FipsConsumerEvicted", "producers": "FipsProducerGone",
                             "header": "FipsDomainUnreadable", "backends": "FipsBackendLosing",
                             "contents": "FipsRingContentsCorrupt", "permissions": "FipsDomainWritableByOthers"}.items():
        assert alert in alerts, condition
    from fipstop.analysis.levels import Thresholds, as_range

    th = Thresholds()
    fill_w, fill_c = as_range(th.warn_fill_pct).end, as_range(th.crit_fill_pct).end
    assert f"> {fill_c / 100:.2f}" in text and f"> {fill_w / 100:.2f}" in text
    assert f"fips_consumer_lag_records > {int(as_range(th.warn_lag_records).end)}" in text
    assert f"fips_consumer_lag_seconds > {int(as_range(th.crit_lag_s).end)}" in text
