"""`fipstop bench ui` is wired next to `ring` and its in-process part runs."""

from __future__ import annotations

import asyncio

from fipstop import cli


def test_bench_ui_is_registered() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "ui", "--quick", "--json", "--out", "/tmp/x.json"])
    assert args.func.__name__ == "run_ui" and args.quick and args.json
    args = parser.parse_args(["bench", "ring", "--quick"])
    assert args.func.__name__ == "run_ring"


def test_frame_sort_filter_measurement_runs() -> None:
    from fipstop.bench.ui import _frames

    res = asyncio.run(_frames(64, 3))
    assert res["rings"] == 64 and res["rows_in_table"] == 64
    for key in ("derive_ms", "update_ms", "render_ms", "frame_ms", "sort_ms", "filter_ms", "frame_cpu_ms"):
        assert res[key]["n"] > 0 and res[key]["median"] >= 0
