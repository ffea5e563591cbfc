"""``fipstop bench ring --against REV`` in a tiny mode: the JSON's shape and that its
summaries are what its own raw runs say, never timing.

It builds REV's libfips and bench driver from git, so it needs the git
history (skipped with the reason when the checkout has none) and a C compiler.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

from fipstop import cli
from fipstop.bench.cbuild import SOURCE_TREE
from fipstop.bench.results import Output
from fipstop.bench.ring import against, spec
from fipstop.bench.ring.run import main as run_bench
from fipstop.errors import FipsError

ROUNDS = 2


def _git_rev(spec_: str) -> str | None:
    if SOURCE_TREE is None or shutil.which("git") is None:
        return None
    r = subprocess.run(["git", "-C", str(SOURCE_TREE), "rev-parse", "--verify", "--quiet", f"{spec_}^{{commit}}"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


BASE = _git_rev(spec.ISSUE14_BASE)
needs_history = pytest.mark.skipif(BASE is None, reason=f"git history with {spec.ISSUE14_BASE} unavailable "
                                   "(not a git checkout, or a shallow clone)")


def _num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if BASE is None:
        pytest.skip(f"git history with {spec.ISSUE14_BASE} unavailable")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    tmp = tmp_path_factory.mktemp("against")
    shm = tmp / "shm"
    shm.mkdir()
    out = tmp / "ring-against.json"
    mp = pytest.MonkeyPatch()
    mp.setenv(spec.ENV_DURATION, "0.05")
    try:
        rc = run_bench(spec.RingConfig(Output(out=str(out), command="test --against"), shm_dir=str(shm),
                                       reps=ROUNDS, against=spec.ISSUE14_BASE))
    finally:
        mp.undo()
    assert rc == 0
    assert list(shm.iterdir()) == []  # the bench's private domain directory is gone
    return json.loads(out.read_text())


@needs_history
def test_top_level(doc: dict) -> None:
    assert doc["bench"] == "ring-against"
    assert doc["command"] == "test --against"
    assert doc["date"].endswith("Z")
    assert doc["previous"]["rev"] == BASE and doc["previous"]["rev_spec"] == spec.ISSUE14_BASE
    srcs = doc["previous"]["build"]["sources"]
    for path in ("fipstop/csrc/fips.c", "fipstop/csrc/fips.h", "bench/ring/ringbench.c"):
        assert any(s.endswith(":" + path) for s in srcs), srcs
    # the same compiler and flags for both builds, each binary its own
    cur, prev = doc["current"]["build"], doc["previous"]["build"]
    assert (cur["cc_version"], cur["cflags"]) == (prev["cc_version"], prev["cflags"])
    assert cur["binary"] != prev["binary"]
    assert doc["current"]["rev"] == _git_rev("HEAD")
    for when in ("before", "after"):
        assert "load average" in doc["regime"][when]["uptime"]
        assert len(doc["regime"][when]["loadavg"]) == 3
    p = doc["params"]
    assert p["rounds"] == ROUNDS and p["sizes_bytes"] == list(spec.SIZES) and p["case"] == "fips_c"
    assert p["duration_s_per_run"] == pytest.approx(0.05)


@needs_history
def test_comparisons_are_their_rounds(doc: dict) -> None:
    """Every figure of a comparison recomputed from its raw runs (the oracle: the runs' own counts)."""
    seen = {(c["comparison"], c["size_bytes"]) for c in doc["comparisons"]}
    assert seen == {(n, z) for n in ("current_vs_previous", "control_current_vs_current") for z in spec.SIZES}
    for c in doc["comparisons"]:
        a, b = c["ratio_of"].split(" / ")
        assert set(c["sides"]) == {a, b} and a == "current"
        assert b == ("previous" if c["comparison"] == "current_vs_previous" else "current_again")
        assert len(c["rounds"]) == ROUNDS
        side_rounds: dict[str, list[float]] = {a: [], b: []}
        for rd in c["rounds"]:
            for s in (a, b):
                runs = rd[s]
                assert len(runs) == 2  # A B B A: two runs a side
                for r in runs:
                    assert r["status"] == "ok", r["reason"]
                    assert r["records_per_s"] == pytest.approx((r["attempted"] - r["dropped"]) / r["elapsed_s"])
                    if not r["consumer_evicted"]:  # every record the ring accepted reached the consumer
                        assert r["delivered"] == r["attempted"] - r["dropped"]
                side_rounds[s].append(statistics.fmean(r["records_per_s"] for r in runs))
        for s in (a, b):
            side = c["sides"][s]
            assert side["rounds_records_per_s"] == pytest.approx(side_rounds[s])
            assert side["records_per_s_median"] == pytest.approx(statistics.median(side_rounds[s]))
            runs = [r for rd in c["rounds"] for r in rd[s]]
            assert side["attempted"] == sum(r["attempted"] for r in runs)
            assert side["dropped"] == sum(r["dropped"] for r in runs)
            assert side["delivered"] == sum(r["delivered"] for r in runs)
            assert side["runs"] == side["runs_ok"] == 2 * ROUNDS
        ratios = [x / y for x, y in zip(side_rounds[a], side_rounds[b], strict=True)]
        assert c["round_ratios"] == pytest.approx(ratios)
        assert c["ratio_median"] == pytest.approx(statistics.median(ratios))
        assert c["ratio_min"] == pytest.approx(min(ratios)) and c["ratio_max"] == pytest.approx(max(ratios))


@needs_history
def test_instructions_and_verdicts(doc: dict) -> None:
    ins = doc["instructions"]
    if ins["status"] != "ok":
        assert ins["status"] == "unavailable" and "valgrind" in ins["reason"]
    else:
        assert [r["size_bytes"] for r in ins["sizes"]] == list(spec.SIZES)
        for r in ins["sizes"]:
            for k in ("current", "previous", "current_again"):
                m = r[k]
                assert m["status"] == "ok", m
                assert m["records"] > 0 and _num(m["instructions_per_record"])
                assert m["instructions_per_record"] == pytest.approx(m["instructions"] / m["records"], abs=0.01)
            assert r["ratio_current_over_previous"] == pytest.approx(
                r["current"]["instructions_per_record"] / r["previous"]["instructions_per_record"], abs=1e-3)
    by = {(c["comparison"], c["size_bytes"]): c for c in doc["comparisons"]}
    assert [v["size_bytes"] for v in doc["verdicts"]] == list(spec.SIZES)
    for v in doc["verdicts"]:
        z = v["size_bytes"]
        assert v["ratio_current_over_previous"] == by[("current_vs_previous", z)]["ratio_median"]
        ctl = by[("control_current_vs_current", z)]
        assert v["control_ratio_range"] == [ctl["ratio_min"], ctl["ratio_max"]]
        assert v["no_loss_beyond_noise"] == (v["ratio_current_over_previous"] >= ctl["ratio_min"])


@needs_history
def test_table_renders(doc: dict) -> None:
    text = against.render(doc)
    assert spec.ISSUE14_BASE in text and "load before" in text
    assert len(text.splitlines()) >= 4 + len(spec.SIZES)


@needs_history
def test_local_headers_come_along(tmp_path: Path) -> None:
    """fips.c's own #include "..." files are fetched too (HEAD's includes fips_explore.h)."""
    _, fips_c, taken = against.fetch_sources(_git_rev("HEAD") or "HEAD", tmp_path)
    if '"fips_explore.h"' in fips_c.read_text():
        assert (tmp_path / "fips_explore.h").is_file() and "fipstop/csrc/fips_explore.h" in taken


@needs_history
def test_a_wrong_rev_is_one_line() -> None:
    with pytest.raises(FipsError) as exc:
        run_bench(spec.RingConfig(Output(out="/nonexistent/x.json"), against="no-such-rev-xyz"))
    msg = str(exc.value)
    assert "--against" in msg and "no-such-rev-xyz" in msg and "\n" not in msg


def test_the_option_parses() -> None:
    """``--against`` alone means the code before issue 14's fixes; without it the bench runs every case."""
    parser = cli.build_parser()
    assert parser.parse_args(["bench", "ring", "--against"]).against == spec.ISSUE14_BASE
    args = parser.parse_args(["bench", "ring", "--against", "main~2", "--rounds", "3"])
    assert (args.against, args.rounds) == ("main~2", 3)
    assert parser.parse_args(["bench", "ring"]).against is None
