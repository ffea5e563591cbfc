"""The command line: version, usage errors, and FipsError reporting."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import fipstop
from fipstop import cli
from fipstop.errors import FipsError

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fipstop", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def _fake_command(monkeypatch: pytest.MonkeyPatch, run) -> None:
    """Make `fipstop boom` the only command, calling ``run(args)``."""
    mod = types.ModuleType("fipstop_fake_command")

    def register(subparsers) -> None:
        p = subparsers.add_parser("boom", help="fake command for tests")
        p.set_defaults(func=run)

    setattr(mod, "register", register)  # noqa: B010 - a module made at run time
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(cli, "COMMANDS", [mod.__name__])


def test_version_subprocess() -> None:
    proc = _run("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"fipstop {fipstop.__version__}"
    assert "Traceback" not in proc.stderr


def test_no_args_without_a_terminal_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # `fipstop` alone opens the live monitor; under pytest there is no tty
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "terminal" in err and "fipstop snapshot" in err


def test_help_lists_the_dashboard(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: fipstop" in out and "top" in out and "--interval" in out


def test_unknown_subcommand_is_one_line_exit_2() -> None:
    proc = _run("no-such-command")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fipstop: ")
    assert "no-such-command" in lines[0]


def test_fips_error_is_one_line_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args):
        raise FipsError("domain 'x' not found\nin /nowhere")

    _fake_command(monkeypatch, run)
    assert cli.main(["boom"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "fipstop: domain 'x' not found; in /nowhere\n"
    assert captured.out == ""


def test_fips_error_exit_code(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def run(args):
        raise FipsError("critical", exit_code=3)

    _fake_command(monkeypatch, run)
    assert cli.main(["boom"]) == 3
    assert capsys.readouterr().err == "fipstop: critical\n"


def test_keyboard_interrupt_is_quiet_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args):
        raise KeyboardInterrupt

    _fake_command(monkeypatch, run)
    assert cli.main(["boom"]) == 130
    assert capsys.readouterr().err == ""


def test_command_gets_shm_dir(monkeypatch: pytest.MonkeyPatch, shm_dir: Path) -> None:
    seen = {}

    def run(args):
        seen["shm_dir"] = args.shm_dir
        return 0

    _fake_command(monkeypatch, run)
    assert cli.main(["boom"]) == 0
    assert seen["shm_dir"] == str(shm_dir)  # from FIPS_SHM_DIR
    assert cli.main(["--shm-dir", "/elsewhere", "boom"]) == 0
    assert seen["shm_dir"] == "/elsewhere"


def test_missing_command_module_is_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "COMMANDS", ["fipstop.no_such_module"])
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().err == ""


def test_top_level_probes_and_views_are_not_importable() -> None:
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "import fipstop.probes, fipstop.views\n"
        "for name in ('probes', 'views'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        pass\n"
        "    else:\n"
        "        raise SystemExit(name + ' is importable')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def _parsers(parser: argparse.ArgumentParser, path: str = "fipstop") -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _parsers(sub, f"{path} {name}")
    return out


def test_every_command_has_a_help_that_formats() -> None:
    """--help of every subcommand, bench ones included (a stray % in a help
    string only fails when the help is printed)."""
    parsers = _parsers(cli.build_parser())
    names = {p for p, _ in parsers}
    assert {"fipstop check", "fipstop bench ring", "fipstop ips", "fipstop replay"} <= names
    for path, parser in parsers:
        text = parser.format_help()
        assert text.startswith(f"usage: {path}"), path
        # argparse %-formats argument help, never a description: a "%%" there is printed as is
        assert "%%" not in text, path


def test_every_command_has_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` and ``--version`` of every (sub)command exit 0 and print what they say."""
    from fipstop import __version__

    for path, _ in _parsers(cli.build_parser()):
        argv = path.split()[1:]
        assert cli.main([*argv, "--help"]) == 0, path
        assert capsys.readouterr().out.startswith(f"usage: {path}"), path
        assert cli.main([*argv, "--version"]) == 0, path
        assert capsys.readouterr().out.strip().endswith(__version__), path


@pytest.mark.parametrize("argv, says", [
    (["--attach-pairs", "5"], "--attach-pairs must be 6..10000, not 5"),
    (["--attach-pairs", "40", "--cases", "fips_c"], "--attach-pairs needs the prototype cases"),
    (["--attach-pairs", "40", "--against", "HEAD"], "--attach-pairs needs the prototype cases"),
    (["--rounds", "0"], "--rounds must be at least 1, not 0"),
    (["--cases", "nope"], "--cases 'nope': not a case"),
    (["--sizes", "12"], "--sizes '12': sizes must be 32..65535 bytes"),
])
def test_bench_ring_bad_options_are_one_line_errors(argv, says, capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before anything is built or run."""
    assert cli.main(["bench", "ring", *argv]) != 0
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("prio", ["0", "100"])
def test_bench_attack_ips_rt_must_be_a_fifo_priority(prio, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "attack", "--ips-rt", prio]) != 0
    err = capsys.readouterr().err
    assert f"--ips-rt must be a SCHED_FIFO priority 1..99, not {prio}" in err and err.count("\n") == 1
