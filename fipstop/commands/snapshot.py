"""``fipstop snapshot``: a one-shot dump of every FIPS domain in the shm dir.

Per domain: its geometry, then per ring in use the producer (pid, tid,
thread name), state, records committed/dropped, fill and high-water, then
per consumer its state, heartbeat age and lag, then every (consumer, ring)
position.  ``--json`` prints one JSON document with stable keys and integer
numbers instead.  ``--backends`` adds the other logging backends, derived
from two samples ``--backends-window`` apart; ``--fipsipc`` the FIPS paper's
prototype rings (docs/fipsipc.md), likewise.  ``--prometheus URL`` prints
the fleet a Prometheus server scrapes instead (hosts, rings, consumers, with
Prometheus' rates; :mod:`fipstop.outputs.fleet`).

A bad domain file prints ``fipstop: <file>: <reason>`` on stderr and the dump
goes on with the next domain; the exit status is then 2, else 0.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any, TextIO

from fipstop.commands.options import (
    add_backend_options,
    add_prometheus_options,
    backends_config,
    fipsipc_config_of,
    fleet_config_of,
)
from fipstop.config import ProbeConfig
from fipstop.errors import FipsError
from fipstop.textsafe import escape_text

if TYPE_CHECKING:  # pragma: no cover
    from fipstop.model.backends import BackendsView
    from fipstop.model.fipsipc import FipsIpcView
    from fipstop.probes.fipsipc import IpcTap

PROG = "fipstop"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "snapshot",
        help="one-shot dump of the rings and consumers of every domain",
        description="Print every domain's rings (producer, fill, drops) and consumers "
        "(state, heartbeat, lag) once, as tables or as JSON.",
    )
    p.add_argument("--domain", metavar="NAME", help="only this domain (file fips.NAME in the shm dir)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--backends", action="store_true",
                   help="also the other logging backends (files, syslog sockets, UDP, journald, audit, rsyslog): "
                   "a \"backends\" key in --json, a section in the text")
    p.add_argument("--backends-window", type=float, metavar="S", default=0.5,
                   help="seconds between the two backend (and --fipsipc) samples that give rates (default 0.5; "
                   "0: no rates)")
    p.add_argument("--fipsipc-tap", type=int, metavar="N", default=0,
                   help="with --fipsipc: also copy the newest N records of every ring in use (escaped; the "
                   "prototype has no sequence numbers: a copy the writer may have overwritten is flagged)")
    add_backend_options(p)
    add_prometheus_options(p)
    p.set_defaults(func=run)


def _fleet(args: argparse.Namespace, out: TextIO) -> int:
    """``--prometheus URL``: the fleet that server scrapes, once (exit 0; a host that is down is shown so)."""
    from fipstop.outputs.fleet import fleet_json, format_fleet
    from fipstop.sources.prometheus import PrometheusFleet

    if args.domain is not None or vars(args).get("backends") or vars(args).get("fipsipc"):
        raise FipsError("--prometheus shows every host: --domain, --backends and --fipsipc do not apply")
    view = PrometheusFleet(fleet_config_of(args)).poll().only(args.host)
    if args.json:
        json.dump(fleet_json(view), out, sort_keys=True, indent=2)
        out.write("\n")
    else:
        out.write(format_fleet(view) + "\n")
    out.flush()
    return 0


def _backends(args: argparse.Namespace) -> BackendsView:
    """The other backends, derived from two samples ``--backends-window`` apart."""
    from fipstop.model.raw import ProbeFailure
    from fipstop.sources.live import LiveSource, poll_window
    from fipstop.sources.probeset import build_probes

    window = args.backends_window
    if window is None or not math.isfinite(window) or not 0 <= window <= 60:
        raise FipsError("--backends-window: give seconds between 0 and 60")
    config = ProbeConfig(shm_dir=args.shm_dir, domains=(), backends=backends_config(args), bans_domain=None,
                         cpu=False)
    source = LiveSource(build_probes(config), 1.0)
    try:
        _, frame = poll_window(source, window)
    finally:
        source.close()
    view = frame.snapshot.backends
    if isinstance(view, ProbeFailure):
        raise FipsError(f"backends: {escape_text(view.reason)}")
    if view is None:  # pragma: no cover - the probe set has the backends probe
        raise FipsError("backends: not sampled")
    return view


def _fipsipc_taps(args: argparse.Namespace, view: FipsIpcView) -> list[IpcTap]:
    """``--fipsipc-tap N``: the newest N records of every ring a writer uses or used."""
    from fipstop.probes.fipsipc import FipsIpcProbe

    n = int(vars(args).get("fipsipc_tap") or 0)
    if n <= 0:
        return []
    if n > 4096:
        raise FipsError(f"--fipsipc-tap {n}: give at most 4096 records")
    probe = FipsIpcProbe()
    return [probe.tap(s.shmid, r.ring, n) for s in view.segments for r in s.rings
            if r.writer != "free" or r.committed_pos]


def _fipsipc(args: argparse.Namespace) -> FipsIpcView | None:
    """The FIPS paper's prototype rings (``--fipsipc``), from two samples
    ``--backends-window`` apart (their rates are estimates)."""
    from fipstop.model.fipsipc import FipsIpcView
    from fipstop.model.raw import ProbeFailure
    from fipstop.sources.live import LiveSource, poll_window
    from fipstop.sources.probeset import build_probes

    cfg = fipsipc_config_of(args)
    if cfg is None:
        return None
    window = args.backends_window
    if window is None or not math.isfinite(window) or not 0 <= window <= 60:
        raise FipsError("--backends-window: give seconds between 0 and 60")
    config = ProbeConfig(shm_dir=args.shm_dir, domains=(), backends=None, bans_domain=None, cpu=False, fipsipc=cfg)
    source = LiveSource(build_probes(config), 1.0)
    try:
        _, frame = poll_window(source, window)
    finally:
        source.close()
    view = frame.snapshot.fipsipc
    if isinstance(view, ProbeFailure):
        raise FipsError(f"fipsipc: {escape_text(view.reason)}")
    return view if isinstance(view, FipsIpcView) else None


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from fipstop import _fips
    from fipstop.outputs.fipsipc import fipsipc_json, format_fipsipc, format_taps, taps_json
    from fipstop.outputs.jsondoc import backends_json, domain_json
    from fipstop.outputs.text import format_backends, format_human, no_domains_hint
    from fipstop.ring import domain_path, list_domains, others_may_write, resolve_shm_dir, snapshot_domain

    out = out or sys.stdout
    err = err or sys.stderr
    if vars(args).get("prometheus"):
        return _fleet(args, out)
    shm_dir = resolve_shm_dir(args.shm_dir)
    want = args.domain
    as_json = bool(args.json)

    if want is not None:
        names = [want]
    else:
        try:
            names = list_domains(shm_dir)
        except FileNotFoundError:
            raise FipsError(f"{escape_text(shm_dir)}: no such directory") from None
        except NotADirectoryError:
            raise FipsError(f"{escape_text(shm_dir)}: not a directory") from None
        except OSError as exc:
            raise FipsError(f"{escape_text(shm_dir)}: {exc.strerror or exc}") from None

    backends = _backends(args) if vars(args).get("backends") else None
    ipc = _fipsipc(args)
    taps = _fipsipc_taps(args, ipc) if ipc is not None else []
    snaps = []
    bad = 0
    for name in names:
        if (warning := others_may_write(domain_path(name, shm_dir))) is not None:
            print(f"{PROG}: {escape_text(warning)}", file=err)
        try:
            snaps.append(snapshot_domain(name, shm_dir))
        except _fips.FipsError as exc:
            bad += 1
            print(f"{PROG}: {escape_text(str(exc))}", file=err)
            err.flush()

    if as_json:
        doc: dict[str, Any] = {"domains": [domain_json(s) for s in snaps]}
        if backends is not None:
            doc["backends"] = backends_json(backends)
        if ipc is not None:
            doc["fipsipc"] = fipsipc_json(ipc)
            if taps:
                doc["fipsipc"]["taps"] = taps_json(taps)
        json.dump(doc, out, sort_keys=True, indent=2)
        out.write("\n")
    elif not names:
        if ipc is None or not ipc.segments:
            print(no_domains_hint(shm_dir), file=out)
    else:
        first = True
        for s in snaps:
            if not first:
                out.write("\n")
            first = False
            out.write(format_human(s) + "\n")
    if backends is not None and not as_json:
        out.write("\n" + format_backends(backends) + "\n")
    if ipc is not None and not as_json:
        out.write(("\n" if names else "") + format_fipsipc(ipc) + "\n")
        if taps:
            out.write(format_taps(taps) + "\n")
    out.flush()
    return 2 if bad else 0
