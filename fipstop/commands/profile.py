"""``fipstop profile --pid P``: where a producer's or consumer's time goes.

Headless, the same report as the Profile screen: the per-thread time split
from /proc (always), lock waits, off-/on-CPU stacks from bpf (root + bcc)
and py-spy (Python processes).  ``--json`` prints the report as JSON,
``--folded FILE`` writes folded stacks for flamegraph.pl / speedscope: on-CPU
weights are samples, off-CPU weights microseconds blocked (bcc's
``offcputime -f`` convention; the format has no unit field, so stderr says
it, with the flamegraph.pl line to draw it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from fipstop.errors import FipsError
from fipstop.probes.bpf_program import OFF_SAMPLE

DEFAULT_DURATION_S = 5.0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "profile",
        help="on/off-CPU time, lock contention and hot stacks of one process",
        description="Profile one producer or consumer process for a while and print where its threads' time "
        "went: on CPU, run queue, locks, I/O, sleep (from /proc, no root needed), the locks they waited on, "
        "and off-/on-CPU stacks from bpf (root + bcc) and py-spy (Python processes).",
    )
    p.add_argument("--pid", type=int, required=True, metavar="P", help="the process to profile")
    p.add_argument("--duration", type=float, default=DEFAULT_DURATION_S, metavar="S",
                   help=f"seconds to profile (default {DEFAULT_DURATION_S:g})")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--folded", metavar="FILE",
                   help="write folded stacks (flamegraph.pl, speedscope) to FILE ('-': stdout); weights: on-CPU "
                   "samples, off-CPU (--offcpu) microseconds as bcc's offcputime -f (flamegraph.pl --countname=us)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--oncpu", action="store_true", help="only on-CPU stacks (text and --folded)")
    which.add_argument("--offcpu", action="store_true", help="only off-CPU / idle stacks (text and --folded)")
    p.add_argument("--rate", type=int, default=100, metavar="HZ", help="py-spy samples per second (default 100)")
    p.add_argument("--hz", type=float, default=100.0, metavar="HZ",
                   help="/proc thread-state ticks per second (default 100)")
    p.add_argument("--oncpu-hz", type=float, default=49.0, metavar="HZ",
                   help="bpf on-CPU sampling frequency (default 49)")
    p.add_argument("--off-sample", type=int, default=OFF_SAMPLE, metavar="N",
                   help=f"bpf: follow 1 in N off-CPU periods and scale back (a power of two, default {OFF_SAMPLE}; "
                        "1 makes rare, long waits exact at ~9 %% of a switch-heavy target's speed)")
    p.add_argument("--nonblocking", dest="nonblocking", action="store_true", default=True,
                   help="py-spy never pauses the target (default)")
    p.add_argument("--blocking", dest="nonblocking", action="store_false",
                   help="py-spy pauses the target at each sample (exact stacks, more cost)")
    p.add_argument("--native", action="store_true", help="py-spy: include native (C) frames (implies --blocking)")
    p.add_argument("--no-idle", dest="idle", action="store_false", default=True,
                   help="py-spy: skip idle stacks (one recorder instead of two)")
    p.add_argument("--no-gil", dest="gil", action="store_false", default=True,
                   help="py-spy: no GIL share; on-CPU stacks by py-spy's own activity test")
    p.add_argument("--no-bpf", dest="bpf", action="store_false", default=True, help="do not run the bpf profiler")
    p.add_argument("--no-pyspy", dest="pyspy", action="store_false", default=True, help="do not run py-spy")
    p.add_argument("--top", type=int, default=10, metavar="N", help="stacks and locks to list (default 10)")
    p.add_argument("--proc", default="/proc", metavar="DIR", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    if args.pid <= 0:
        raise FipsError(f"--pid {args.pid}: not a process id")
    for opt, v, lo, hi in (("--duration", args.duration, 0.05, 86400), ("--hz", args.hz, 1, 1000),
                           ("--oncpu-hz", args.oncpu_hz, 1, 10000), ("--rate", args.rate, 1, 10000),
                           ("--top", args.top, 1, 10000)):
        if not math.isfinite(v) or v < lo or v > hi:
            raise FipsError(f"{opt} {v:g}: give a value between {lo:g} and {hi:g}")
    n = args.off_sample
    if n < 1 or n > 1024 or n & (n - 1):
        raise FipsError(f"--off-sample {n}: give a power of two between 1 and 1024")
    if not os.path.isdir(f"{args.proc}/{args.pid}"):
        raise FipsError(f"--pid {args.pid}: no such process")


def run(args: argparse.Namespace) -> int:
    _check(args)
    from fipstop.profile.render import render_text
    from fipstop.profile.session import ProfileOptions, folded_note, profile_once

    opts = ProfileOptions(threads_hz=args.hz, rate_hz=args.rate, nonblocking=args.nonblocking, idle=args.idle,
                          native=args.native, gil=args.gil, bpf=args.bpf, pyspy=args.pyspy,
                          oncpu_hz=args.oncpu_hz, off_sample=args.off_sample)
    report = profile_once(args.pid, args.duration, opts, procfs_root=args.proc)
    if not report.threads.available and not report.available_profiles():
        raise FipsError(f"pid {args.pid}: nothing could be profiled: {report.threads.reason}")
    which = "offcpu" if args.offcpu else "oncpu"
    if args.folded:
        lines = report.folded(which)
        text = "\n".join(lines) + ("\n" if lines else "")
        if args.folded == "-":
            sys.stdout.write(text)
        else:
            try:
                with open(args.folded, "w", encoding="utf-8") as f:
                    f.write(text)
            except OSError as e:
                raise FipsError(f"--folded {args.folded}: {e.strerror or e}") from None
            if not lines:
                print(f"fipstop: warning: no {which} stacks to write (no stack profiler ran; see probes)",
                      file=sys.stderr)
        if lines:
            print(f"fipstop: {len(lines)} {which} stacks; {folded_note(which)}", file=sys.stderr)
        if args.folded == "-":
            return 0
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(report, oncpu=not args.offcpu, offcpu=not args.oncpu, top=args.top))
    return 0
