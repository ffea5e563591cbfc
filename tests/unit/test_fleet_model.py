"""The fleet model, its text/JSON and its diagnosis, on query answers shaped like Prometheus' (a fake query
function: the real server is in tests/integration/test_fleet_prometheus.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fipstop.analysis.fleet_diagnose import diagnose_fleet
from fipstop.errors import FipsError
from fipstop.fixtures_fleet import AT, A, B, C, D, answers, cons, s
from fipstop.model.fleet import fleet_queries, fleet_view
from fipstop.outputs.fleet import fleet_json, format_fleet, ring_cells
from fipstop.sources.prometheus import FleetSourceConfig, PrometheusFleet, prometheus_query, valid_window


def view():
    return fleet_view(answers(), at_s=AT, url="http://prom:9090", rate_window="10s")


def test_host_states_and_unknowns() -> None:
    v = view()
    states = {h.instance: h.state for h in v.hosts}
    assert states == {A: "up", B: "up", C: "stale", D: "down"}
    ages = {h.instance: h.sample_age_s for h in v.hosts}
    assert ages[A] == pytest.approx(0.5) and ages[D] is None
    rings = {(r.instance, r.ring): r for r in v.rings}
    assert rings[(C, 0)].records_per_s is None  # no rate yet: unknown, not 0
    assert rings[(C, 0)].pid is None and rings[(C, 0)].thread == ""
    assert rings[(B, 1)].lag_s is None and rings[(B, 1)].lag_records == 46  # NaN is unknown
    assert rings[(B, 1)].dropped_total == 5414 and rings[(B, 1)].drops_per_s == 400
    assert "\x1b" not in rings[(A, 0)].thread and "evil" in rings[(A, 0)].thread


def test_unknown_host_without_sample_time() -> None:
    a = answers()
    a["up"].append(s(1, instance="node:9100"))
    assert {h.instance: h.state for h in fleet_view(a, at_s=AT).hosts}["node:9100"] == "unknown"


def test_text_marks_unknown_and_not_current() -> None:
    v = view()
    text = format_fleet(v)
    assert "fleet: 4 host(s), 2 up" in text and "rates over 10s" in text
    assert f"not current: {C} (stale), {D} (down)" in text
    cells = {(r.instance, r.ring): ring_cells(r) for r in v.rings}
    assert cells[(C, 0)][8] == "?" and cells[(C, 0)][4] == "?"  # rate and pid unknown
    assert cells[(B, 1)][11:] == ("46", "?")  # lag known, its seconds unknown
    assert cells[(C, 0)][11:] == ("-", "-")  # no active consumer: lag does not apply
    assert "\x1b" not in text


def test_json_nulls_and_filter() -> None:
    doc = fleet_json(view().only("10.0.0.2"))
    json.dumps(doc, allow_nan=False)
    assert [h["instance"] for h in doc["hosts"]] == [B]
    assert doc["rings"][0]["lag_s"] is None and doc["at_s"] == AT


def test_diagnose_fleet() -> None:
    found = diagnose_fleet(view())
    ids = [(f.id, f.subject) for f in found]
    assert set(ids[:2]) == {("host-down", D), ("consumer-too-slow", B)}  # the criticals first
    assert ("consumer-too-slow", B) in ids and ("host-stale", C) in ids
    slow = next(f for f in found if f.id == "consumer-too-slow")
    assert slow.evidence["consumer"] == "archiver" and slow.evidence["drops_per_s"] == 400
    a = answers()
    a["consumer_health"] = [cons(A, "ips", 1, fips_consumer_health="alive")]
    a["released"] = a["released"][:1]
    assert ("no-consumer", B) in [(f.id, f.subject) for f in diagnose_fleet(fleet_view(a, at_s=AT))]
    a = answers()
    a["consumer_health"][1] = cons(B, "archiver", 1, fips_consumer_health="stale")
    assert ("consumer-dead", B) in [(f.id, f.subject) for f in diagnose_fleet(fleet_view(a, at_s=AT))]


def test_source_evaluates_every_query_at_one_time() -> None:
    by_expr = {expr: name for name, expr in fleet_queries("fipstop", "10s").items()}
    times = set()

    def fake(expr: str, at: float | None = None) -> list[dict[str, Any]]:
        times.add(at)
        return answers()[by_expr[expr]]

    v = PrometheusFleet(FleetSourceConfig("http://prom:9090", rate_window="10s"), fake, clock=lambda: AT).poll()
    assert times == {AT} and len(v.hosts) == 4
    assert 'job="a\\"b"' in fleet_queries('a"b', "1m")["up"]


def test_bad_input_is_one_line() -> None:
    with pytest.raises(FipsError, match="give an http"):
        prometheus_query("prom:9090", 1)
    with pytest.raises(FipsError, match="--rate-window"):
        valid_window("1 minute")
    assert valid_window("1m30s") == "1m30s"


@pytest.mark.parametrize("argv, said", [
    (["top", "--prometheus", "http://127.0.0.1:1"], "the fleet dashboard needs a terminal"),
    (["top", "--prometheus", "prom:9090"], "--prometheus 'prom:9090': give an http"),
    (["snapshot", "--prometheus", "http://127.0.0.1:1", "--rate-window", "1 min"], "--rate-window '1 min'"),
    (["snapshot", "--prometheus", "http://127.0.0.1:1", "--domain", "named"], "--domain, --backends and --fipsipc"),
    (["diagnose", "--prometheus", "http://127.0.0.1:1", "--pid", "1"], "--domain and --pid do not apply"),
    (["snapshot", "--prometheus", "http://127.0.0.1:1"], "Prometheus at http://127.0.0.1:1:"),
])
def test_cli_bad_input_is_one_line(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    from fipstop import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_no_ring_drops_per_host_and_a_finding() -> None:
    """Records a domain dropped because its ring table was full are drops: each host's totals and rate are the
    sum over its domains of what the exporter said; a host whose exporter says nothing shows unknown."""
    a = answers()
    a["no_ring"].append(s(7, instance=B, domain="unbound"))
    a["no_ring_rate"].append(s(0.5, instance=B, domain="unbound"))
    v = fleet_view(a, at_s=AT, rate_window="10s")
    hosts = {h.instance: h for h in v.hosts}
    assert (hosts[A].no_ring_total, hosts[A].no_ring_per_s) == (0, 0.0)
    assert (hosts[B].no_ring_total, hosts[B].no_ring_per_s) == (1207, 30.5)
    assert hosts[B].no_ring_domains == (("named", 1200, 30.0), ("unbound", 7, 0.5))
    assert (hosts[C].no_ring_total, hosts[C].no_ring_per_s) == (None, None)  # not reported: unknown, not 0
    text = format_fleet(v)
    assert "NO RING" in text and "1207" in text
    found = [f for f in diagnose_fleet(v) if f.id == "no-ring"]
    assert [(f.subject, f.evidence["domain"], f.evidence["no_ring_per_s"]) for f in found] == [
        (B, "named", 30.0), (B, "unbound", 0.5)]
    doc = fleet_json(v)
    json.dumps(doc, allow_nan=False)
    assert {h["instance"]: h["no_ring_total"] for h in doc["hosts"]} == {A: 0, B: 1207, C: None, D: None}
