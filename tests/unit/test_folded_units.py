"""Folded stacks say their unit: off-CPU weights are microseconds blocked, as bcc's ``offcputime -f`` writes them
(its BPF program divides the nanosecond delta by 1000; flamegraph.pl is then run with ``--countname=us``), on-CPU
weights are samples.  The oracle is the fixture report's nanoseconds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fipstop.cli import main
from fipstop.probes.stacks import StackCount, folded_lines
from fipstop.profile.demo import demo_report
from fipstop.profile.session import FOLDED_UNITS, folded_note


def test_offcpu_folded_is_microseconds_oncpu_samples() -> None:
    r = demo_report()
    bpf = next(p for p in r.available_profiles() if p.source == "bpf")
    want_us = {s.frames[-1]: s.value // 1000 for s in bpf.offcpu}  # the fixture's ns are whole microseconds
    got = {ln.rsplit(" ", 1)[0].rsplit(";", 1)[1]: int(ln.rsplit(" ", 1)[1]) for ln in r.folded("offcpu")}
    assert got == want_us and got["unix_wait_for_peer"] == 240_000  # 240 ms blocked
    on = {ln.rsplit(" ", 1)[0].rsplit(";", 1)[1]: int(ln.rsplit(" ", 1)[1]) for ln in r.folded("oncpu")}
    assert on["__vfprintf_internal"] == 41  # samples, unscaled
    assert FOLDED_UNITS == {"oncpu": "samples", "offcpu": "us"}


def test_rounding_merges_first_and_drops_only_below_half_a_microsecond() -> None:
    st = [StackCount(("a", "b"), 700, 1, "t"), StackCount(("a", "b"), 600, 1, "t"), StackCount(("c",), 400, 1, "t")]
    assert folded_lines(st, divisor=1000) == ["t-1;a;b 1"]  # 1.3 us -> 1; 0.4 us rounds to nothing
    assert folded_lines(st) == ["t-1;a;b 1300", "t-1;c 400"]


def test_cli_says_the_unit_on_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    import fipstop.profile.session as session

    monkeypatch.setattr(session, "profile_once", lambda *a, **k: demo_report())
    out = tmp_path / "off.folded"
    assert main(["profile", "--pid", str(os.getpid()), "--offcpu", "--folded", str(out)]) == 0
    err = capsys.readouterr().err
    assert "3 offcpu stacks; off-CPU weights are microseconds blocked (as bcc's offcputime -f)" in err
    assert "--countname=us" in err and err.count("\n") == 1
    assert all(int(ln.rsplit(" ", 1)[1]) >= 180_000 for ln in out.read_text().splitlines())
    assert main(["profile", "--pid", str(os.getpid()), "--folded", "-"]) == 0
    cap = capsys.readouterr()
    assert cap.out.count("\n") == 4 and "samples" in cap.err  # stdout stays pure folded text
    assert folded_note("oncpu").startswith("on-CPU weights are samples")


def test_json_names_the_offcpu_unit() -> None:
    j = demo_report().to_json()
    bpf = next(p for p in j["profiles"] if p["source"] == "bpf")
    assert bpf["offcpu_unit"] == "ns" and bpf["oncpu_unit"] == "samples"
    assert max(s["value"] for s in bpf["offcpu"]) == 2_790_000_000  # nanoseconds, as named
