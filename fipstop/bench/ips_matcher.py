"""``fipstop bench ips``, the matcher against its previous version: the
current C matcher (fipstop/csrc/ips_match.c) and built-in filters against
those of an earlier git revision, both compiled here alike, each with its
consumer on the same ring taking turns batch by batch, plus the instructions
each spends per line under callgrind (``python -m fipstop.bench.ips_matcher
_count`` is what callgrind runs)."""

from __future__ import annotations

import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fipstop.bench.ips_lines import _fill, query_line

REPO = Path(__file__).resolve().parents[2]
MATCHER_SRC = "fipstop/csrc/ips_match.c"
MATCHER_INCLUDES = ("fipstop/csrc/fips_bindq_fmt.c", "fipstop/csrc/fips_bindq.h")
FILTERS_SRC = "fipstop/ips/filters.py"
EXT_FLAGS = ("-O2", "-std=gnu11", "-fPIC", "-shared", "-pthread")


def dated_line(i: int, k: int = 0) -> bytes:
    """A BIND query-log line as a syslog daemon writes it to a file (date, host, ident): what a
    record holds when it reached fipstop through a file, rsyslog or a forwarder."""
    q = query_line(i, k)
    return f"Nov {1 + k % 28:2d} {k % 24:02d}:{k % 60:02d}:{(i * 7) % 60:02d} ns1 ".encode() + q[len(b"<30>"):]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60,
                          check=True).stdout


def baseline_rev(spec: str | None) -> str:
    """The previous matcher's commit: SPEC, else where this branch left main (git merge-base)."""
    if spec:
        return _git("rev-parse", "--verify", f"{spec}^{{commit}}").strip()
    for ref in ("main", "origin/main"):
        try:
            return _git("merge-base", "HEAD", ref).strip()
        except subprocess.CalledProcessError:
            continue
    return _git("rev-parse", "HEAD~1").strip()


def _build_matcher(src: Path, init: str, tmp: Path) -> tuple[Any, str]:
    """Compile ips_match.c into an extension module named INIT (its PyInit renamed), import it."""
    import sysconfig

    out = tmp / f"{init}.so"
    cmd = [os.environ.get("CC", "cc"), *EXT_FLAGS, f"-DPyInit__ipsfast=PyInit_{init}",
           "-I", sysconfig.get_paths()["include"], str(src), "-o", str(out), "-ldl"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"building {src.name} failed: {r.stderr.strip().splitlines()[-1:]}")
    mod = _load_module(init, out)
    return mod, shlex.join([c if c != str(src) else src.name for c in cmd])


def _prev_filters(rev: str, tmp: Path):
    """The previous fipstop/ips/filters.py as a module of its own (its built-in filters' regexes)."""

    p = tmp / "prev_filters.py"
    p.write_text(_git("show", f"{rev}:{FILTERS_SRC}"))
    return _load_module("fipstop_prev_filters", p, register=True)


def _load_module(name: str, path: Path, register: bool = False) -> Any:
    """Import the module file PATH as NAME; REGISTER puts it in sys.modules first (dataclasses look
    their module up there while the module runs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import {path} as a module")
    mod = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def matcher_vs_previous(shm: str, per_variant: int, rev_spec: str | None, rounds: int,
                         instructions: bool = True) -> dict[str, Any]:
    """The current matcher against the previous one (its C source and built-in filters from git),
    both compiled here with the same compiler and flags, each with its consumer on the same ring,
    taking turns batch by batch; the median of the rounds is reported (a shared machine is noisy).  With
    valgrind installed, also the instructions each spends per line (callgrind, counting inside the
    matcher only): a figure the machine's other load cannot move."""
    rev = baseline_rev(rev_spec)
    tmp = Path(tempfile.mkdtemp(prefix="fipstop-bench-matcher-"))
    try:
        return _matcher_runs(shm, per_variant, rev, rounds, tmp, instructions)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _matcher_runs(shm: str, per_variant: int, rev: str, rounds: int, tmp: Path, instructions: bool) -> dict[str, Any]:
    from dataclasses import replace

    from fipstop import _fips
    from fipstop.ips.jails import BUILTIN_JAILS, jail_args, parse_nets

    prev_src = tmp / "ips_match_prev.c"
    prev_src.write_text(_git("show", f"{rev}:{MATCHER_SRC}"))
    # what that revision's matcher #includes beside it (from fips_bindq_fmt.c on: the BIND query records' formatter)
    listed = set(_git("ls-tree", "--name-only", rev, "fipstop/csrc/").split())
    for dep in MATCHER_INCLUDES:
        if dep in listed:
            (tmp / Path(dep).name).write_text(_git("show", f"{rev}:{dep}"))
    prev, build = _build_matcher(prev_src, "_ipsfast_prev", tmp)
    cur, _ = _build_matcher(REPO / MATCHER_SRC, "_ipsfast_cur", tmp)
    prev_text = prev_src.read_text()
    prev_is_new = "date_any" in prev_text
    prev_kind = ("new" if "rx_may_match" in prev_text else "new-noreq") if prev_is_new else "old"
    pf = None if prev_is_new else _prev_filters(rev, tmp)

    def cur_jail(name: str):
        s = replace(BUILTIN_JAILS[name], maxretry=10**9, max_tracked=1 << 17)
        return cur.Jail(name, maxretry=s.maxretry, max_tracked=s.max_tracked, mode=s.mode,
                        ignoreip=parse_nets(s.ignoreip), **jail_args(s.filter.compiled()))

    def prev_jail(name: str):
        if prev_is_new:
            s = replace(BUILTIN_JAILS[name], maxretry=10**9, max_tracked=1 << 17)
            return prev.Jail(name, maxretry=s.maxretry, max_tracked=s.max_tracked,
                             **_prev_args(jail_args(s.filter.compiled()), prev_kind))
        assert pf is not None  # the previous filters.py was loaded when prev_is_new is false
        pref, fail, ign = pf.BUILTIN_FILTERS[name].compiled()
        return prev.Jail(name, fail, ign, pref, 10**9, 600.0, 600.0, 1 << 17, "window", [], False, 128)

    sets = {"bind": [query_line(i, i) for i in range(65536)], "dated": [dated_line(i, i) for i in range(65536)]}
    for lines_ in sets.values():
        random.Random(1).shuffle(lines_)
    dom = _fips.Domain("bench-ips-matcher", shm, create=True, ring_capacity=1 << 26, max_record=512)
    prod = _fips.Producer(dom)
    # one consumer per variant on the same ring: both read the same records, batch by batch in turn
    conss = {"previous": _fips.Consumer(dom, "previous"), "current": _fips.Consumer(dom, "current")}
    per_round = max(20_000, per_variant // rounds)
    cases = [("bind_query_rate", "bind", "named-query-rate"), ("bind_named_refused_nomatch", "bind", "named-refused"),
             ("dated_file_query_rate", "dated", "named-query-rate"),
             # an A/A control: the current matcher against itself, measured the same way (the noise)
             ("control_current_vs_current", "bind", "named-query-rate")]
    res: dict[str, Any] = {
        "previous_rev": rev, "previous_source": f"git show {rev[:12]}:{MATCHER_SRC} (+ {FILTERS_SRC})",
        "build": build + "  (the same for both)", "rounds": rounds, "lines_per_round": per_round,
        "dated_line_example": sets["dated"][0].decode(), "bind_line_example": sets["bind"][0].decode()}
    try:
        for key, data, jail in cases:
            variants = {"previous": (cur, cur_jail(jail)) if key.startswith("control") else (prev, prev_jail(jail)),
                        "current": (cur, cur_jail(jail))}
            rates: dict[str, list[float]] = {v: [] for v in variants}
            for _r in range(rounds):
                _fill(prod, sets[data] * 5, per_round)
                n = {v: 0 for v in variants}
                cpu = {v: 0.0 for v in variants}
                order = list(variants)
                more = True
                while more:
                    more = False
                    for v in order:  # this machine's speed swings by 1.5x within seconds: both
                        mod, j = variants[v]  # variants take turns every batch (~0.3 ms), the order
                        b = conss[v].read(1024)  # alternating (the second reads warm cache lines)
                        if b is None:
                            continue
                        more = True
                        t0 = time.thread_time()
                        mod.feed(b, (j,))
                        cpu[v] += time.thread_time() - t0
                        n[v] += b.count
                        b.release()
                    order.reverse()
                for v in variants:
                    rates[v].append(round(n[v] / max(cpu[v], 1e-9), 1))
            out: dict[str, Any] = {"jail": jail, "lines": {"bind": "records of libfips_syslog.so (no date)",
                                                           "dated": "file lines with a date, host and ident"}[data]}
            for v, (_mod, j) in variants.items():
                rs = sorted(rates[v])
                out[v] = {"lines_per_cpu_s": rs[len(rs) // 2], "rounds": rates[v], "matched": j.stats()["matched"]}
            # each round's two rates come from the same moments: the ratio of a round is the measure
            ratios = sorted(c / max(p, 1e-9) for c, p in zip(rates["current"], rates["previous"]))
            out["ratio_current_over_previous"] = round(ratios[len(ratios) // 2], 3)
            out["round_ratios"] = [round(c / max(p, 1e-9), 3) for c, p in zip(rates["current"], rates["previous"])]
            res[key] = out
    finally:
        for c in conss.values():
            c.close()
        prod.close()
        dom.close()
    res["instructions"] = (_instruction_counts(tmp, rev, prev_kind) if instructions
                           else {"status": "skipped", "reason": "--quick"})
    return res


COUNT_LINES = 20_000


def _prev_args(args: dict[str, Any], prev_kind: str) -> dict[str, Any]:
    """The current jail_args for a previous matcher of the new kind; one from before the prefilter
    (fipstop/ips/prefilter.py) takes each regex as a 4-tuple, without its required literals."""
    if prev_kind != "new-noreq":
        return args
    out = dict(args, failregex=[r[:4] for r in args["failregex"]], ignoreregex=[r[:4] for r in args["ignoreregex"]])
    if out["prefregex"]:
        out["prefregex"] = out["prefregex"][:4]
    return out


def _instruction_counts(tmp: Path, rev: str, prev_kind: str) -> dict[str, Any]:
    """Instructions per line inside each matcher's run_lines (valgrind --tool=callgrind)."""
    vg = shutil.which("valgrind")
    if vg is None:
        return {"status": "unavailable", "reason": "valgrind is not installed"}
    out: dict[str, Any] = {"tool": "valgrind --tool=callgrind --collect-atstart=no --toggle-collect=run_lines",
                           "lines": COUNT_LINES}
    for key, data, jail in (("bind_query_rate", "bind", "named-query-rate"),
                            ("bind_named_refused_nomatch", "bind", "named-refused"),
                            ("dated_file_query_rate", "dated", "named-query-rate")):
        row: dict[str, Any] = {}
        for variant in ("previous", "current"):
            cg = tmp / f"cg.{key}.{variant}"
            cmd = [vg, "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=run_lines",
                   f"--callgrind-out-file={cg}", sys.executable, "-m", "fipstop.bench.ips_matcher", "_count", variant,
                   str(tmp), rev, prev_kind, data, jail]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            total = None
            if r.returncode == 0 and cg.exists():
                for ln in cg.read_text().splitlines():
                    if ln.startswith("summary:"):
                        total = int(ln.split()[1])
            if total is None:
                row[variant] = {"status": "error", "reason": (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
                continue
            row[variant] = {"instructions_per_line": round(total / COUNT_LINES, 1)}
        a, b = (row.get(v, {}).get("instructions_per_line") for v in ("previous", "current"))
        if a and b:
            row["ratio_previous_over_current"] = round(a / b, 3)  # > 1: the current matcher does less
        out[key] = row
    return out


def _count_main(argv: list[str]) -> int:
    """Under callgrind: feed COUNT_LINES lines to one matcher (see _instruction_counts)."""

    variant, tmp, rev, prev_kind, data, jail = argv
    init = "_ipsfast_prev" if variant == "previous" else "_ipsfast_cur"
    mod = _load_module(init, Path(tmp) / f"{init}.so")
    from fipstop.ips.jails import BUILTIN_JAILS, jail_args

    if variant == "previous" and prev_kind == "old":
        pf = _load_module("fipstop_prev_filters", Path(tmp) / "prev_filters.py", register=True)
        pref, fail, ign = pf.BUILTIN_FILTERS[jail].compiled()
        j = mod.Jail(jail, fail, ign, pref, 10**9, 600.0, 600.0, 1 << 17, "window", [], False, 128)
    else:
        args = jail_args(BUILTIN_JAILS[jail].filter.compiled())
        j = mod.Jail(jail, maxretry=10**9, max_tracked=1 << 17,
                     **(_prev_args(args, prev_kind) if variant == "previous" else args))
    make = query_line if data == "bind" else dated_line
    lines = [make(i, i) for i in range(COUNT_LINES)]
    for k in range(0, len(lines), 1024):
        mod.feed_lines(lines[k:k + 1024], 1, (j,))
    return 0




if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_count":
        raise SystemExit(_count_main(sys.argv[2:]))
    raise SystemExit("usage: python -m fipstop.bench.ips_matcher _count ...")
