"""The peers of ``fipstop bench ring`` (issue 21), as cases of the same run:
boost::lockfree::spsc_queue (the plain SPSC reference), LTTng-UST (the tracer
a user would pick for shared-memory logging) and spdlog's async logger.

Each is built here from Debian's packages (``bench/ring/peers.cc``, one binary
per peer, cached by content like the C harness) and runs the same record and
timing loop as the ``fips_c`` case: a producer thread pinned to the producer
CPU, the peer's consumer on the consumer CPU.  A peer whose package is missing
is skipped with the package to install.  LTTng-UST needs a session daemon:
the bench starts its own ``lttng-sessiond --no-kernel`` (userspace only) and
sets up a session with one channel of 4 x 256 KiB sub-buffers (1 MiB per CPU,
as libfips' default ring), discard mode; an lttng-sessiond already running on
the machine (someone else's) is left alone and the case skipped.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import SOURCE_TREE, cc_version, source
from fipstop.bench.results import output_line
from fipstop.bench.ring.children import pin_preexec, run_to_end
from fipstop.bench.ring.spec import CONSUMER_MIN_BATCH, LAT_BATCH, CaseResult
from fipstop.bench.ring.workspace import Workspace
from fipstop.children import popen

__all__ = ["PEER_CASES", "build_peer", "peer_argv", "run_peer"]

PEER_CASES = ("boost_spsc", "lttng_ust", "spdlog_async")
CXXFLAGS = ("-O2", "-std=c++17", "-D_GNU_SOURCE", "-pthread")
_PEERS: dict[str, dict[str, Any]] = {
    "boost_spsc": {"define": "PEER_BOOST", "header": ("boost/lockfree/spsc_queue.hpp",),
                   "package": "libboost-dev", "pkg_config": None, "libs": ()},
    "spdlog_async": {"define": "PEER_SPDLOG", "header": ("spdlog/async.h",),
                     "package": "libspdlog-dev", "pkg_config": "spdlog", "libs": ()},
    "lttng_ust": {"define": "PEER_LTTNG", "header": ("lttng/tracepoint.h",),
                  "package": "liblttng-ust-dev", "pkg_config": None, "libs": ("-llttng-ust", "-ldl")},
}
#: where Debian puts headers (multiarch ones under the triplet, as liblttng-ust-dev's)
_INCLUDE_DIRS = (Path("/usr/include"), Path("/usr/include/x86_64-linux-gnu"), Path("/usr/include/aarch64-linux-gnu"),
                 Path("/usr/local/include"))
_built: dict[str, tuple[Path | None, str | None, dict[str, Any]]] = {}
_DISCARDED = re.compile(r"Discarded events:\s*(\d+)")


def _pkg_config(name: str) -> tuple[list[str], str | None]:
    exe = shutil.which("pkg-config")
    if exe is None:
        return [], "pkg-config not found (apt-get install pkg-config)"
    try:
        res = subprocess.run([exe, "--cflags", "--libs", name], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return [], f"pkg-config {name}: {exc}"
    if res.returncode != 0:
        return [], f"pkg-config {name}: {output_line(res.stderr, 160)}"
    return shlex.split(res.stdout), None


def build_peer(case: str) -> tuple[Path | None, str | None, dict[str, Any]]:
    """The peer's binary (cached by compiler, flags and sources), or (None, why it cannot be built, info)."""
    if case in _built:
        return _built[case]
    spec = _PEERS[case]
    info: dict[str, Any] = {"package": spec["package"]}
    out: tuple[Path | None, str | None, dict[str, Any]]
    if not any((d / h).is_file() for d in _INCLUDE_DIRS for h in spec["header"]):
        out = (None, f"{spec['package']} is not installed ({spec['header'][0]} not found; apt-get install "
                     f"{spec['package']})", info)
        _built[case] = out
        return out
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        out = (None, f"C++ compiler {cxx!r} not found (apt-get install g++)", info)
        _built[case] = out
        return out
    extra: list[str] = list(spec["libs"])
    if spec["pkg_config"]:
        flags, why = _pkg_config(spec["pkg_config"])
        if why:
            out = (None, why, info)
            _built[case] = out
            return out
        extra += flags
    src = source("ring/peers.cc")
    tp = source("ring/peers_tp.h")
    if not src.is_file():
        out = (None, "bench/ring/peers.cc not found (fipstop was installed without the benchmarks' sources)", info)
        _built[case] = out
        return out
    h = hashlib.sha256()
    ver = cc_version(cxx)
    for part in (ver, " ".join(CXXFLAGS), spec["define"], " ".join(extra)):
        h.update(part.encode())
    for f in (src, tp):
        if f.is_file():
            h.update(f.read_bytes())
    key = h.hexdigest()[:16]
    base = (SOURCE_TREE / "build" / "bench") if SOURCE_TREE is not None else Path(f"/tmp/fipstop-bench-{os.getuid()}")
    binary = base / f"peer-{case}-{key}"
    info.update(cxx=cxx, cxx_version=ver)
    if not binary.is_file():
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / f".peer-{case}-{key}.{os.getpid()}"
        cmd = [cxx, *CXXFLAGS, f"-D{spec['define']}", "-I", str(src.parent), str(src), "-o", str(tmp), *extra]
        info["build_command"] = shlex.join(cmd)
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            out = (None, f"{case} build failed: {exc}", info)
            _built[case] = out
            return out
        if res.returncode != 0:
            errs = [ln for ln in res.stderr.splitlines() if "error" in ln]
            out = (None, f"{case} build failed: {output_line(errs[0] if errs else res.stderr, 200)}", info)
            _built[case] = out
            return out
        os.replace(tmp, binary)
        for old in base.glob(f"peer-{case}-*"):
            if old != binary:
                old.unlink(missing_ok=True)
    info["binary"] = str(binary)
    _built[case] = (binary, None, info)
    return _built[case]


def peer_argv(ws: Workspace, binary: Path, size: int, duration: float, rate: float = 0.0,
              ring_capacity: int | None = None) -> list[str]:
    argv = [str(binary), "--size", str(size), "--duration", f"{duration:g}", "--lat-batch", str(LAT_BATCH),
            "--capacity", str(ring_capacity or ws.ring_capacity), "--min-batch", str(CONSUMER_MIN_BATCH),
            "--backoff-us", f"{ws.consumer_backoff_us:g}"]
    if rate > 0:
        argv += ["--rate", f"{rate:.0f}"]
    if ws.prod_cpu is not None:
        argv += ["--cpu", str(ws.prod_cpu)]
    if ws.cons_cpu is not None:
        argv += ["--cons-cpu", str(ws.cons_cpu)]
    return argv


def _lttng(args: list[str], env: dict[str, str], timeout: float = 60.0) -> tuple[int, str]:
    try:
        res = subprocess.run(["lttng", *args], capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return -1, str(exc)
    return res.returncode, res.stdout + res.stderr


def _run_lttng(ws: Workspace, binary: Path, size: int, duration: float,
               rate: float) -> tuple[dict[str, Any] | None, str | None, dict[str, Any]]:
    """The producer under a session of the bench's own lttng-sessiond; (producer JSON with
    ``dropped``/``delivered`` from the session's discarded count, None, detail) or (None, why, detail)."""
    detail: dict[str, Any] = {}
    if shutil.which("lttng-sessiond") is None or shutil.which("lttng") is None:
        return None, "lttng-tools is not installed (apt-get install lttng-tools)", detail
    env = dict(os.environ)
    home = ws.tmp / "lttng-home"
    home.mkdir(exist_ok=True)
    env["LTTNG_HOME"] = str(home)
    rc, _ = _lttng(["list"], env, 10)
    if rc == 0:
        return None, "an lttng-sessiond already runs on this machine (not the bench's): left alone", detail
    sd = popen(["lttng-sessiond", "--no-kernel"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env, preexec_fn=pin_preexec(ws.cons_cpu, ws.nice))
    session = f"fipsbench-{os.getpid()}-{size}"
    try:
        deadline = time.monotonic() + 15
        while _lttng(["list"], env, 10)[0] != 0:
            if sd.poll() is not None or time.monotonic() > deadline:
                err = sd.stderr.read() if sd.stderr and sd.poll() is not None else ""
                return None, f"lttng-sessiond did not come up: {output_line(err, 160) or 'timeout'}", detail
            time.sleep(0.1)
        trace = ws.tmp / f"lttng-trace-{size}"
        steps = [["create", session, f"--output={trace}"],
                 ["enable-channel", "-u", "-s", session, "ch", "--subbuf-size=256K", "--num-subbuf=4"],
                 ["enable-event", "-u", "-s", session, "-c", "ch", "fipsbench:rec"],
                 ["start", session]]
        for st in steps:
            rc, out = _lttng(st, env)
            if rc != 0:
                return None, f"lttng {st[0]}: {output_line(out, 160)}", detail
        p, why = run_to_end(peer_argv(ws, binary, size, duration, rate), duration + 60.0, env=env,
                            preexec=ws.preexec())
        _lttng(["stop", session], env, 120)
        rc, out = _lttng(["list", session], env)
        m = _DISCARDED.search(out)
        _lttng(["destroy", session], env)
        shutil.rmtree(trace, ignore_errors=True)
        if p is None:
            return None, f"producer failed: {why}", detail
        if m is None:
            return None, f"lttng list {session} gave no discarded-events count: {output_line(out, 160)}", detail
        discarded = int(m.group(1))
        p["dropped"] = discarded
        p["accepted"] = int(p["attempted"]) - discarded
        p["delivered"] = p["accepted"]
        detail.update(discarded_source="lttng list: Discarded events", delivered_source="attempted - discarded "
                      "(events the session recorded; not counted from the trace, which needs babeltrace2)")
        return p, None, detail
    finally:
        sd.terminate()
        try:
            sd.wait(timeout=20)
        except subprocess.TimeoutExpired:
            sd.kill()
            sd.wait()
        if sd.stderr:
            sd.stderr.close()


def run_peer(ws: Workspace, case: str, size: int, *, duration: float | None = None,
             rate: float = 0.0, ring_capacity: int | None = None) -> CaseResult:
    """One run of a peer at one size (``rate`` > 0: paced to that many records/s; ``ring_capacity``:
    the queue's bytes, default the cases' ring; not for lttng_ust, whose sub-buffers are its own)."""
    binary, why, info = build_peer(case)
    if binary is None:
        return ws.skip(case, size, why or "cannot build")
    dur = duration or ws.duration
    detail: dict[str, Any] = {}
    if case == "lttng_ust":
        p, why, detail = _run_lttng(ws, binary, size, dur, rate)
    else:
        p, why = run_to_end(peer_argv(ws, binary, size, dur, rate, ring_capacity), dur + 60.0,
                            preexec=ws.preexec())
    if p is None:
        reason = why or "failed"
        return ws.skip(case, size, reason, "skipped" if "already runs" in reason else "error")
    drops = int(p.get("dropped") or 0)
    detail.update(source={"boost_spsc": "push() returned false (queue full)",
                          "spdlog_async": "thread_pool overrun_counter (overrun_oldest overwrote them)",
                          "lttng_ust": "the session's discarded events"}[case],
                  build=info.get("build_command") or info.get("binary"))
    return ws.from_producer(case, size, p, delivered=p.get("delivered"), drops=drops, drop_detail=detail,
                            pinned={"producer_cpu": p.get("pinned_cpu"), "consumer_cpu": ws.cons_cpu,
                                    "consumer": p.get("consumer")},
                            notes=f"paced to {rate:.0f} records/s" if rate > 0 else "")
