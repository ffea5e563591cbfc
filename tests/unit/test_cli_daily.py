"""Command-line rules of issue 18: nothing given is dropped silently.

- an option before the command is honoured when the command takes it, an
  error when it does not (``fipstop --watch-file F snapshot --backends``);
- ``record -o EXISTING`` refuses unless ``--append``, and then says which
  session it appends after;
- ``wrap`` says when the program calls no syslog(3) (util-linux logger).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_wrap_tail import assert_one_line_error, fipstop

from fipstop import fixtures
from fipstop.cli import build_parser, main, merge_global_options
from fipstop.errors import FipsError
from fipstop.model.raw import RawFrame
from fipstop.preload import SYSLOG_FUNCTIONS, imported_functions
from fipstop.recording.store import RecordingReader, RecordingWriter


def parsed(*argv: str):
    args = build_parser().parse_args(list(argv))
    merge_global_options(args, list(argv))
    return args


# -- options before the command -----------------------------------------------------------

def test_watch_file_before_the_command_is_honoured(tmp_path: Path, capsys) -> None:
    log = tmp_path / "app.log"
    log.write_text("one line\n")
    assert main(["--shm-dir", str(tmp_path), "--watch-file", str(log), "snapshot", "--backends"]) == 0
    out = capsys.readouterr().out
    assert f"file {log}: 9 B" in out  # 9 bytes in the file: the oracle
    # before and after add up (the option is repeatable)
    a = parsed("--watch-file", "a", "snapshot", "--watch-file", "b")
    assert a.watch_file == ["a", "b"]


def test_scalar_options_before_the_command() -> None:
    assert parsed("--domain", "x", "wrap", "--", "true").domain == "x"  # once in wrap: honoured
    assert parsed("--interval", "2", "record", "-o", "f").interval == 2.0
    assert parsed("--interval", "2", "record", "-o", "f", "--interval", "2").interval == 2.0
    with pytest.raises(FipsError, match="given before and after `record` with different values"):
        parsed("--interval", "2", "record", "-o", "f", "--interval", "3")
    with pytest.raises(FipsError, match="--domain before `snapshot`: give it once"):
        parsed("--domain", "a", "--domain", "b", "snapshot")
    # no command, or nothing before it: as before
    assert parsed("--domain", "a").domain == ["a"]
    assert parsed("snapshot", "--domain", "a").domain == "a"


def test_an_option_the_command_does_not_take_is_an_error(capsys) -> None:
    assert main(["--fail2ban-db", "x.sqlite3", "snapshot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fipstop: --fail2ban-db before `snapshot`: `fipstop snapshot` does not take it "
                   "(options before a command are the dashboard's)"]


# -- record -o EXISTING -------------------------------------------------------------------

def _recording(path: Path, n: int = 3) -> None:
    w = RecordingWriter(str(path), interval_s=1.0, host="test")
    for s in fixtures.demo_samples(n):
        w.append(RawFrame(s))
    w.close()


def _frames(path: Path) -> int:
    r = RecordingReader(str(path))
    try:
        return r.count
    finally:
        r.close()


def test_record_refuses_an_existing_file_without_append(tmp_path: Path) -> None:
    rec = tmp_path / "r.fipsrec"
    _recording(rec)
    proc = fipstop("record", "-o", str(rec), "--interval", "0.05", "--duration", "0.2", shm=tmp_path)
    assert_one_line_error(proc, f"{rec}: exists; give --append")
    assert _frames(rec) == 3  # untouched


def test_record_append_says_where_the_new_session_starts(tmp_path: Path) -> None:
    rec = tmp_path / "r.fipsrec"
    _recording(rec)
    proc = fipstop("record", "-o", str(rec), "--append", "--interval", "0.05", "--duration", "0.3", shm=tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    first = err.splitlines()[0]
    assert "appending a new session after its 3 frames (last at " in first and "the replay jumps over the gap" in first
    assert _frames(rec) > 3
    # a file that is not a recording: the reader's own one-line error, and it stays as it was
    junk = tmp_path / "notes.txt"
    junk.write_text("not a recording\n")
    proc = fipstop("record", "-o", str(junk), "--append", "--duration", "0.2", shm=tmp_path)
    assert_one_line_error(proc, "not a fipstop recording")
    assert junk.read_text() == "not a recording\n"


# -- wrap a program that does not call syslog(3) -------------------------------------------

@pytest.mark.skipif(shutil.which("logger") is None, reason="util-linux logger is not installed")
def test_wrap_logger_says_it_writes_dev_log_itself(tmp_path: Path) -> None:
    logger = shutil.which("logger")
    assert logger is not None
    names = imported_functions(logger)
    assert names is not None and not names & SYSLOG_FUNCTIONS  # the oracle: its dynamic symbol table
    proc = fipstop("wrap", "--domain", "w", "--", "logger", "--no-act", "hello", shm=tmp_path)
    err = proc.stderr.decode()
    ours = [ln for ln in err.splitlines() if ln.startswith("fipstop")]  # logger may add its own complaint
    assert len(ours) == 1 and ours[0].startswith("fipstop wrap: warning: logger calls no syslog(3) function"), err
    assert "writes to /dev/log itself, as util-linux logger does" in ours[0]
    assert "--watch-socket /dev/log" in ours[0] and "fipstop wrap --domain w -- python3 -c" in ours[0]


def test_wrap_an_interpreter_that_loads_its_syslog_module_says_nothing(capsys) -> None:
    """pyenv's python (this venv's) imports no syslog(3) function itself: its syslog module is loaded at run
    time by libpython, which its RUNPATH finds. No warning, and the oracle is the loader's own view (ldd)."""
    from fipstop.commands.wrap import warn_if_not_syslog
    from fipstop.elfdyn import own_libraries

    exe = os.path.realpath(sys.executable)
    names = imported_functions(exe)
    assert names is not None
    libs = own_libraries(exe)
    assert libs is not None
    if shutil.which("ldd"):
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, check=True).stdout
        resolved = {ln.split("=>")[1].split("(")[0].strip() for ln in out.splitlines() if "=>" in ln}
        assert set(libs) <= {os.path.realpath(p) for p in resolved} | resolved
    warn_if_not_syslog(exe, "w")
    assert capsys.readouterr().err == ""


def test_wrap_a_syslog_caller_says_nothing(progs: dict[str, Path], capsys) -> None:
    from fipstop.commands.wrap import warn_if_not_syslog

    for exe in progs.values():  # tests/c/syslog_prog.c, built with and without FORTIFY
        names = imported_functions(str(exe))
        assert names is not None and names & SYSLOG_FUNCTIONS, exe
        warn_if_not_syslog(str(exe), "w")
    assert capsys.readouterr().err == ""
