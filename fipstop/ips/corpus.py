"""Fail2Ban's own filter test corpus, replayed through fipstop's matcher.

Fail2Ban tests every filter against sample logs that ship with it
(``fail2ban/tests/files/logs/<filter>``): a ``# failJSON: {...}`` comment
above a line says whether the filter must match it and with which host
(and time, user, ...).  ``fail2ban/tests/samplestestcase.py`` reads them;
:func:`replay` reads them the same way -- ``# fileOptions:`` for the whole
file, ``# filterOptions:`` blocks (one filter per option set, e.g.
``{"mode": "aggressive"}``; a filter with the same options is the same
filter, state included), ``# addFILE:`` includes, ``test.condition`` and
``constraint`` expressions, ``logtype = journal`` lines matched without a
date and with ``test.prefix-line`` -- and feeds each raw line (date
included) to the compiled jail, in order, comparing per line:

* match: the expectation's ``match`` against fipstop finding a failure
  (an address, or a host that is not one);
* host: the expectation's ``host`` against fipstop's (as IP addresses when
  both are; as text otherwise).

Lines whose expected host is not an IP address (a DNS name, or
``192.030.0.6``) are counted apart: fipstop never resolves names.  The
filters come from the Fail2Ban configuration directory (``/etc/fail2ban``;
its ``filter.d/*.conf`` without ``common.conf``) and the package's own test
configuration (``zzz-*.conf``), as in samplestestcase.py.

``python -m fipstop.ips.corpus [--failures]`` prints the report.
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fipstop.errors import FipsError

#: samplestestcase.py's test time (MyTime.setTime(TEST_NOW)): years a date lacks are chosen
#: so that the date is not after it
TEST_NOW = 1124013600
_JSON_RE = re.compile(r"^#+ ?(failJSON|(?:file|filter)Options|addFILE):(.+)$")


def fail2ban_package_dir() -> Path | None:
    """The installed ``fail2ban`` package (``$FIPSTOP_FAIL2BAN_DIR``, else the system python's)."""
    env = os.environ.get("FIPSTOP_FAIL2BAN_DIR")
    if env:
        return Path(env) if Path(env, "tests", "files", "logs").is_dir() else None
    py = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else shutil.which("python3")
    if py:
        try:
            r = subprocess.run([py, "-c", "import fail2ban, os; print(os.path.dirname(fail2ban.__file__))"],
                               capture_output=True, text=True, timeout=30)
            p = Path(r.stdout.strip())
            if r.returncode == 0 and (p / "tests" / "files" / "logs").is_dir():
                return p
        except (OSError, subprocess.SubprocessError):
            pass
    for cand in sorted(Path("/usr/lib").glob("python3*/dist-packages/fail2ban")):
        if (cand / "tests" / "files" / "logs").is_dir():
            return cand
    return None


def _safe_eval(expr: str, env: dict[str, Any]) -> bool:
    """The corpus's conditions (``name == 'sshd'``, ``opts.get('mode') != 'aggressive'``), evaluated
    without eval(): comparisons of names, string constants and ``opts.get(str)``, and/or/not."""

    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.BoolOp):
            vals = [ev(v) for v in n.values]
            return all(vals) if isinstance(n.op, ast.And) else any(vals)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return not ev(n.operand)
        if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Eq, ast.NotEq)):
            a, b = ev(n.left), ev(n.comparators[0])
            return (a == b) if isinstance(n.ops[0], ast.Eq) else (a != b)
        if isinstance(n, ast.Constant) and isinstance(n.value, (str, int, type(None))):
            return n.value
        if isinstance(n, ast.Name) and n.id in env:
            return env[n.id]
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                and n.func.value.id == "opts" and n.func.attr == "get" and len(n.args) in (1, 2)):
            return env["opts"].get(*[ev(a) for a in n.args])
        raise FipsError(f"corpus: condition not understood: {expr[:80]!r}")

    return bool(ev(ast.parse(expr, mode="eval")))


def _canon(host: str | None) -> str | None:
    if host is None:
        return None
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def is_ip(host: str | None) -> bool:
    try:
        ipaddress.ip_address(host or "")
        return True
    except ValueError:
        return False


@dataclass
class LineResult:
    filter: str
    block: str
    file: str
    lnnum: int
    line: str
    expected: dict[str, Any]
    got: dict[str, Any]
    agree: bool
    #: the expected host is not an IP address (a DNS name): counted apart
    dns: bool = False
    time_agree: bool | None = None
    user_agree: bool | None = None
    line_time: float | None = None
    #: "config": a filter of the Fail2Ban configuration (the measure); "test": the package's own
    #: test filters (zzz-*), reported apart
    origin: str = "config"


@dataclass
class Report:
    package: str
    results: list[LineResult] = field(default_factory=list)
    #: filter or block -> one-line reason it could not be used
    errors: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def counted(self) -> list[LineResult]:
        return [r for r in self.results if not r.dns and r.origin == "config"]

    @property
    def agreed(self) -> int:
        return sum(r.agree for r in self.counted)

    @property
    def share(self) -> float:
        return self.agreed / max(1, len(self.counted))

    def failures(self) -> list[LineResult]:
        return [r for r in self.counted if not r.agree]

    def per_filter(self) -> dict[str, tuple[int, int]]:
        out: dict[str, list[int]] = {}
        for r in self.counted:
            a = out.setdefault(r.filter, [0, 0])
            a[0] += r.agree
            a[1] += 1
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}

    def summary(self) -> dict[str, Any]:
        main = [r for r in self.results if r.origin == "config"]
        dns = [r for r in main if r.dns]
        t = [r.time_agree for r in main if r.time_agree is not None]
        u = [r.user_agree for r in main if r.user_agree is not None]
        fails: dict[str, int] = {}
        for r in self.failures():
            fails[r.filter] = fails.get(r.filter, 0) + 1
        extra = [r for r in self.results if r.origin == "test" and not r.dns]
        return {
            "filters": len({r.filter for r in main}), "blocks": len({(r.filter, r.block) for r in main}),
            "annotated_lines": len(main), "dns_host_lines": len(dns),
            "test_filters": sorted({r.filter for r in self.results if r.origin == "test"}),
            "test_filter_lines": len(extra), "test_filter_lines_agreeing": sum(r.agree for r in extra),
            "test_filter_failures": sorted(f"{r.block}:{r.lnnum}" for r in extra if not r.agree),
            "dns_host_lines_agreeing": sum(r.agree for r in dns), "counted_lines": len(self.counted),
            "agreeing_lines": self.agreed, "agreement": round(self.share, 5), "failures_per_filter": fails,
            "time_checked": len(t), "time_agreeing": sum(t), "user_checked": len(u), "user_agreeing": sum(u),
            "errors": self.errors, "skipped": self.skipped,
        }


def _expected_time(t: str) -> float:
    try:
        d = _dt.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        d = _dt.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%f")
    import time as _time

    return _time.mktime(d.timetuple()) + d.microsecond / 1e6


#: samplestestcase.py's time zone (tests/utils.py): the expected times are local times in it
TEST_TZ = "CET-01CEST-02,M3.5.0,M10.5.0"


def replay(package: Path | None = None, config_dir: Path = Path("/etc/fail2ban"), test_filters: bool = False
           ) -> Report:
    """Replay the corpus of the installed Fail2Ban (see the module docstring).  The process's
    time zone is Fail2Ban's test zone while it runs (dates without a zone are local time).

    The package's test filters (zzz-*) include ``../../../../../../../config/filter.d/common.conf``,
    a path of Fail2Ban's source tree that does not exist in an installed package (Fail2Ban's own
    test cannot read them there either): they are skipped, or with ``test_filters`` read with that
    include pointing at ``CONFIG_DIR/filter.d/common.conf`` and reported apart (origin "test")."""
    import time as _time

    old = os.environ.get("TZ")
    os.environ["TZ"] = TEST_TZ
    _time.tzset()
    try:
        return _replay(package, config_dir, test_filters)
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        _time.tzset()


def _replay(package: Path | None, config_dir: Path, test_filters: bool) -> Report:
    import tempfile

    from fipstop.ips import datedetect
    from fipstop.ips.filters import load_filter
    from fipstop.ips.jails import JailSpec, compile_jail

    package = package or fail2ban_package_dir()
    if package is None:
        raise FipsError("corpus: the fail2ban package (with tests/files/logs) is not installed")
    logs = package / "tests" / "files" / "logs"
    report = Report(package=str(package))
    now = _dt.datetime.fromtimestamp(TEST_NOW)
    sources = [(config_dir / "filter.d", lambda x: not x.endswith("common.conf") and x.endswith(".conf")),
               (package / "tests" / "config" / "filter.d", lambda x: x.startswith("zzz-") and x.endswith(".conf"))]
    tmp = tempfile.TemporaryDirectory(prefix="fipstop-corpus-")
    try:
        for origin, (fdir, pick) in zip(("config", "test"), sources):
            if not fdir.is_dir():
                continue
            for fn in sorted(os.listdir(fdir)):
                if not pick(fn) or fn.startswith("."):
                    continue
                name = fn.rpartition(".")[0]
                if not (logs / name).is_file():
                    report.skipped[name] = "no sample log"
                    continue
                use = fdir
                if origin == "test":
                    text = (fdir / fn).read_text(encoding="utf-8")
                    inc = re.search(r"^before = (\S*common\.conf)\s*$", text, re.M)
                    if inc and not (fdir / inc.group(1)).resolve().exists():
                        if not test_filters:
                            report.skipped[name] = (f"includes {inc.group(1)}, which is not in the installed "
                                                    "package (Fail2Ban cannot read it either)")
                            continue
                        use = Path(tmp.name)
                        text = text[:inc.start(1)] + str(config_dir / "filter.d" / "common.conf") + text[inc.end(1):]
                        (use / fn).write_text(text, encoding="utf-8")
                _replay_filter(report, name, use, logs, now, load_filter, JailSpec, compile_jail, datedetect,
                               origin)
    finally:
        tmp.cleanup()
    return report


def _replay_filter(report: Report, name: str, fdir: Path, logs: Path, now, load_filter, JailSpec, compile_jail,
                   datedetect, origin: str = "config") -> None:
    jails: dict[str, tuple[Any, Any] | str] = {}
    last_time: dict[str, float] = {}

    def jail_for(blk: str, opts: dict[str, Any]):
        if blk not in jails:
            fopts = {k: str(v) for k, v in opts.items() if not k.startswith("test.")}
            spec = name + ("[" + ", ".join(f'{k}="{v}"' for k, v in fopts.items()) + "]" if fopts else "")
            try:
                f = load_filter(spec, fdir)
                cf = f.compiled()
                jails[blk] = (compile_jail(JailSpec(name, f, maxretry=10**6), cf), cf)
            except FipsError as exc:
                jails[blk] = str(exc)
                report.errors[blk] = str(exc)
        return jails[blk]

    files = [name]
    common: dict[str, Any] = {}
    faildata: Any = {}
    tests: list[tuple[str, dict[str, Any]]] | None = None
    i = 0
    while i < len(files):
        fname = files[i]
        i += 1
        try:
            text = (logs / fname).read_bytes().decode("utf-8", "replace")
        except OSError as exc:
            report.errors[f"{name}:{fname}"] = f"cannot read {fname}: {exc.strerror}"
            continue
        lines = text.splitlines(keepends=True)
        ignore_block = False
        k = 0
        while k < len(lines):
            line = lines[k]
            k += 1
            lnnum = k
            m = _JSON_RE.match(line.rstrip("\r\n"))
            if m:
                faildata = json.loads(m.group(2))
                kind = m.group(1)
                if kind == "fileOptions":
                    common = faildata
                    continue
                if kind == "filterOptions":
                    tests = []
                    ignore_block = False
                    for fd in (faildata if isinstance(faildata, list) else [faildata]):
                        opts = {**common, **fd} if common else fd
                        if opts.get("test.condition"):
                            ignore_block = not _safe_eval(opts["test.condition"], {"name": name, "opts": opts})
                        if not ignore_block:
                            fo = {kk: v for kk, v in opts.items() if not kk.startswith("test.")}
                            blk = name + (opts.get("test.filter-name") or (str(fo) if fo else ""))
                            tests.append((blk, opts))
                    continue
                if kind == "addFILE":
                    files.append(faildata)
                    continue
                if k >= len(lines):
                    break
                line = lines[k]
                k += 1
                lnnum = k
            elif ignore_block or line.startswith("#") or not line.strip():
                continue
            else:
                faildata = {}
            if ignore_block:
                continue
            if not tests:
                tests = [(name, {})]
            line = line.rstrip("\r\n")
            for blk, opts in tests:
                if faildata.get("constraint") and not _safe_eval(faildata["constraint"], {"name": name, "opts": opts}):
                    continue
                jc = jail_for(blk, opts)
                l2 = line
                journal = opts.get("logtype") == "journal"
                if journal and opts.get("test.prefix-line"):
                    l2 = opts["test.prefix-line"] + l2
                if isinstance(jc, str):
                    got: dict[str, Any] = {"result": "error", "error": jc}
                else:
                    got = jc[0].check(l2.encode("utf-8", "surrogateescape"), nodate=journal)
                if not faildata:  # not annotated: it advances the filter's state, nothing to compare
                    continue
                r = _compare(name, blk, fname, lnnum, line, faildata, got, None if isinstance(jc, str) else jc[1],
                             now, datedetect, last_time.get(blk))
                r.origin = origin
                if r.line_time is not None:
                    last_time[blk] = r.line_time
                report.results.append(r)


def _compare(name, blk, fname, lnnum, line, exp, got, cf, now, datedetect, last: float | None) -> LineResult:
    want = bool(exp.get("match", False))
    res = got.get("result")
    found = res in ("hit", "dns", "not_ip")
    host = got.get("ip") if res == "hit" else got.get("host")
    agree = want == found
    if agree and want and exp.get("host") is not None:
        agree = _canon(exp["host"]) == _canon(host)
    dns = want and exp.get("host") is not None and not is_ip(exp["host"])
    r = LineResult(filter=name, block=blk, file=fname, lnnum=lnnum, line=line, expected=exp,
                   got={k: v for k, v in got.items() if k != "line"}, agree=agree, dns=dns)
    if got.get("date") is not None and cf is not None:
        tmpl, g0, s, e = got["date"]
        if e > s:  # an empty date match: "no date here", the last one holds (Fail2Ban)
            dl = got["line"]
            g0c = len(dl[:g0].decode("utf-8", "replace"))
            r.line_time = datedetect.parse_time(cf.dates.templates[tmpl], dl.decode("utf-8", "replace"), g0c, now=now)
    t = r.line_time if r.line_time is not None else last
    if want and found and exp.get("time") and t is not None:
        r.time_agree = abs(t - _expected_time(exp["time"])) < 1.0
    if want and found and "user" in exp:
        r.user_agree = (got.get("groups") or {}).get("user") == exp["user"]
    return r


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fipstop.ips.corpus",
                                description="Replay Fail2Ban's sample logs through fipstop's matcher.")
    p.add_argument("--failures", action="store_true", help="list every disagreeing line")
    p.add_argument("--json", action="store_true", help="the summary as JSON")
    ns = p.parse_args(argv)
    from fipstop.textsafe import escape_text

    try:
        rep = replay()
    except FipsError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    s = rep.summary()
    if ns.json:
        print(json.dumps(s, indent=1, sort_keys=True))
    else:
        print(f"Fail2Ban sample corpus ({rep.package}): {s['filters']} filters, {s['blocks']} filter/option "
              f"blocks, {s['annotated_lines']} annotated lines")
        print(f"  lines whose host is a DNS name (not counted): {s['dns_host_lines']} "
              f"({s['dns_host_lines_agreeing']} of them agree on the name)")
        print(f"  agree: {s['agreeing_lines']} / {s['counted_lines']} = {100 * s['agreement']:.2f} %")
        print(f"  time stamps: {s['time_agreeing']} / {s['time_checked']}; users: {s['user_agreeing']} / "
              f"{s['user_checked']}")
        for f, n in sorted(s["failures_per_filter"].items()):
            print(f"  {f}: {n} disagreeing")
        for k, v in {**s["errors"], **s["skipped"]}.items():
            print(f"  {k}: {escape_text(v)}")
    if ns.failures:
        for r in rep.failures():
            print(f"{r.block} {r.file}:{r.lnnum}: {escape_text(r.line[:200])}\n    expected {r.expected}\n"
                  f"    got {r.got}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
