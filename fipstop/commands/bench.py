"""``fipstop bench ring|ui|bind|record|ips|ban|attack|nft|profile``: run the shipped benchmarks.

Each subcommand builds its bench's config (:mod:`fipstop.bench`) from the
options and the command line as typed (recorded in the result), and imports
the bench only when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
from pathlib import Path
from types import ModuleType

from fipstop.bench.results import Output
from fipstop.bench.ring.spec import ISSUE14_BASE
from fipstop.errors import FipsError
from fipstop.textsafe import escape_text

#: environment overrides of ``fipstop bench ring``, recorded in front of its command line
_RING_ENV = ("FIPSTOP_BENCH_DURATION", "FIPSTOP_BENCH_NICE")


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="run benchmarks",
        description="Run benchmarks; results are reported as ratios between variants.",
    )
    kinds = bench.add_subparsers(title="benchmarks", metavar="BENCH", dest="bench", required=True)

    ring = kinds.add_parser(
        "ring",
        help="libfips ring throughput and latency",
        description="Benchmark the libfips ring.",
    )
    ring.add_argument("--json", action="store_true", help="print the result as JSON")
    ring.add_argument("--quick", action="store_true", help="short run (for tests and smoke checks)")
    ring.add_argument("--out", metavar="PATH", help="also write the JSON result to PATH")
    ring.add_argument("--cases", metavar="A,B", help="only these cases (comma-separated; default all, e.g. "
                      "fips_c,fips_c_batch,fipsipc,fipsipc_batch: libfips beside the FIPS paper's prototype)")
    ring.add_argument("--sizes", metavar="N,M", help="only these record sizes in bytes (default 64,128,256)")
    ring.add_argument("--against", nargs="?", const=ISSUE14_BASE, metavar="REV",
                      help="instead of every case: fips_c of this libfips against REV's (fips.c and its bench "
                      "driver from git, built alike), interleaved A/B/B/A with an A/A control, plus fips_log's "
                      f"instructions per record under callgrind (default REV: {ISSUE14_BASE}, the code before "
                      "issue 14's fixes); writes bench/results/ring-against-DATE.json")
    ring.add_argument("--rounds", type=int, metavar="N",
                      help="rounds over every case (default 3; 1 with --quick), or of the --against "
                      "comparison (default 7; 3 with --quick)")
    ring.add_argument("--attach-pairs", type=int, metavar="N",
                      help="AB/BA pairs of the prototype writer alone, with and without fipstop attached "
                      "(default 80; 8 with --quick; needs a fipsipc case): more pairs narrow the interval that decides "
                      "the 1 %% target")
    ring.set_defaults(func=run_ring)

    ui = kinds.add_parser(
        "ui",
        help="live monitor cost: frame time with 1024 rings, sort/filter, CPU with 256 rings",
        description="Benchmark the live monitor (fipstop top): frame, sort and filter time with 1024 rings "
        "(in-process, fake source) and the CPU of the real app on a real domain of 256 rings.",
    )
    ui.add_argument("--json", action="store_true", help="print the result as JSON")
    ui.add_argument("--quick", action="store_true", help="short run (for tests and smoke checks)")
    ui.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/ui-DATE.json)")
    ui.set_defaults(func=run_ui)

    bind = kinds.add_parser(
        "bind",
        help="BIND 9 under dnsperf: no logging vs file vs syslog vs the fips shim",
        description="Run dnsperf against named on loopback once per query-logging mode, side by side, "
        "and report queries/s as ratios to no logging and log lines recorded vs queries answered.",
    )
    bind.add_argument("--json", action="store_true", help="print the result as JSON")
    bind.add_argument("--quick", action="store_true", help="short run: 3 s per mode, one round")
    bind.add_argument("--seconds", type=float, metavar="S",
                      help="seconds of load per mode (default 10; 3 with --quick)")
    bind.add_argument("--rounds", type=int, metavar="N", help="rounds over all modes (default 3; 1 with --quick)")
    bind.add_argument("--modes", metavar="M,M", help="modes to run (default none,null_syslog,file,syslog,fips,"
                      "fips_nocons,fips_bind,dnstap,none_native,fips_native; also fips_tail; with --scaling "
                      "none,fips,fips_bind,dnstap,fips_native)")
    bind.add_argument("--scaling", metavar="K-K",
                      help="instead of the rounds: the client scaling, 2^K distinct source addresses for each K "
                      "(e.g. 10-16; bench/results/bind-clients-DATE.json)")
    bind.add_argument("--callgrind", action="store_true",
                      help="instead of the rounds: named's instructions per query under callgrind, mode by mode "
                      "(deterministic; bench/results/bind-callgrind-DATE.json)")
    bind.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    bind.add_argument("--calm-wait", type=float, metavar="S",
                      help="before each run wait up to S s for other load to settle (default 60; 0 with --quick)")
    bind.add_argument("--keep", action="store_true", help="keep the temp dirs (configs, logs) for inspection")
    bind.set_defaults(func=run_bind)

    rec = kinds.add_parser(
        "record",
        help="recording size per hour (64 rings, 4 consumers, 1 s) vs raw and zlib-only, write and seek time",
        description="Record a real domain of 64 producer threads and 4 consumers with the real recorder and report "
        "bytes per frame and MB per hour beside the raw snapshot size and plain zlib, plus write and seek time.",
    )
    rec.add_argument("--json", action="store_true", help="print the result as JSON")
    rec.add_argument("--quick", action="store_true", help="short run (4 s at 0.5 s)")
    rec.add_argument("--seconds", type=float, metavar="S", help="how long to record (default 120)")
    rec.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    rec.set_defaults(func=run_record)

    ips = kinds.add_parser(
        "ips",
        help="fipstop ips: lines/s on one core and time-to-ban with 2^16 attackers, vs Fail2Ban's matcher",
        description="Throughput of the IPS hot path (one thread, one jail) side by side with Fail2Ban's own "
        "regex matcher and a naive per-line Python loop; time-to-ban of the real `fipstop ips` process with "
        "2^16 attackers side by side with a naive per-line Python consumer.",
    )
    ips.add_argument("--json", action="store_true", help="print the result as JSON")
    ips.add_argument("--quick", action="store_true", help="short run: 200 k lines, 4096 attackers, no calm wait")
    ips.add_argument("--attackers", type=int, metavar="N", help="attackers for time-to-ban (default 65536)")
    ips.add_argument("--rate", type=float, metavar="LINES_S", help="producer rate for time-to-ban (default 100000)")
    ips.add_argument("--nice", type=int, metavar="N",
                     help="run producer and consumers at nice N (default -10 as root, else unchanged)")
    ips.add_argument("--calm-wait", type=float, metavar="S",
                     help="before measuring wait up to S s for other load to settle (default 60; 0 with --quick)")
    ips.add_argument("--baseline", metavar="REV", help="git revision of the previous matcher to compare with "
                     "(default: where this branch left main)")
    ips.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    ips.set_defaults(func=run_ips)

    ban = kinds.add_parser(
        "ban",
        help="time-to-ban under a DNS attack: named -> file -> Fail2Ban vs named under wrap -> fipstop ips",
        description="The same attack (refused queries from 2^k loopback addresses, with dnsperf load) against "
        "(a) named logging to a file read by a real fail2ban-server and (b) named under `fipstop wrap` read by "
        "`fipstop ips`; reports time until every attacker is banned, share banned, time-to-ban percentiles, "
        "records dropped and named's queries/s, as ratios.",
    )
    ban.add_argument("--json", action="store_true", help="print the result as JSON")
    ban.add_argument("--quick", action="store_true", help="short run: 2^8 attackers, lower rates")
    ban.add_argument("--attackers-log2", type=int, metavar="K", help="2^K attackers (default 12; 8 with --quick)")
    ban.add_argument("--rate", type=float, metavar="Q_S", help="attack queries/s at the end of the ramp "
                     "(default 10000; 5000 with --quick)")
    ban.add_argument("--timeout", type=float, metavar="S", help="give up waiting for bans after S s (default 300)")
    ban.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    ban.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs) for inspection")
    ban.set_defaults(func=run_ban)

    atk = kinds.add_parser(
        "attack",
        help="the attack end to end: valid clients' response rate while FIPS, Fail2Ban and CrowdSec ban for real",
        description="named in a network namespace of the bench's own; 2^K attackers flood it with spoofed-source "
        "queries through a veth while valid clients measure their response rate every 100 ms; an nftables set in "
        "the input path drops what the IPS banned. Pipelines, each from a cold start: named under `fipstop wrap` "
        "-> `fipstop ips --action nft`; named's query log file -> fail2ban-server (nftables action); the same "
        "file -> crowdsec (offline bind9 collection) -> nft; no IPS. Reports per pipeline the response-rate "
        "series (a chart here and an SVG/PNG beside the JSON), time to 99 % and 99.5 %, mean valid response "
        "before it, attackers banned, time-to-ban p50/p99/max, records dropped, IPS CPU; for each attack length. "
        "Needs root.",
    )
    atk.add_argument("--json", action="store_true", help="print the result as JSON")
    atk.add_argument("--quick", action="store_true", help="short run: 2^10 attackers, 20000 q/s, one 4 s attack")
    atk.add_argument("--attackers-log2", type=int, metavar="K", help="2^K attackers (default 16; 10 with --quick)")
    atk.add_argument("--rate", type=float, metavar="Q_S", help="attack queries/s (default 100000; 20000 with --quick)")
    atk.add_argument("--lengths", metavar="S,S", help="attack lengths in seconds (default 30,60; 4 with --quick)")
    atk.add_argument("--pipelines", metavar="P,P", help="pipelines to run (default fips,fail2ban,crowdsec,none)")
    atk.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    atk.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs) for inspection")
    atk.add_argument("--nft-via", choices=("auto", "lib", "exec"), default="auto",
                     help="the FIPS pipeline's `fipstop ips --nft-via` (default auto: libnftables)")
    atk.add_argument("--ips-rt", type=int, metavar="PRIO",
                     help="run every IPS (fipstop ips; fail2ban-server; crowdsec and its bouncer) under "
                     "SCHED_FIFO PRIO (`chrt -f PRIO`, 1..99): the kernel then never preempts them for named or "
                     "the load generators (default: the normal scheduler)")
    atk.set_defaults(func=run_attack)

    nftb = kinds.add_parser(
        "nft",
        help="the nft ban action's reaction time: the old engine + nft -f per batch vs libnftables vs nft -i",
        description="The real ban engine and nft action in a network namespace of the bench's own: N ban "
        "decisions paced as the IPS's readers make them, then all at once; reaction time (decision -> "
        "transaction committed) p50/p99/max per back-end, interleaved rounds; checks every ban reached the "
        "set exactly once. Needs root.",
    )
    nftb.add_argument("--json", action="store_true", help="print the result as JSON")
    nftb.add_argument("--quick", action="store_true", help="short run: 2000 bans, one round")
    nftb.add_argument("--bans", type=int, metavar="N", help="bans per run (default 10000)")
    nftb.add_argument("--rate", type=float, metavar="BANS_S", help="paced decisions per second (default 2000)")
    nftb.add_argument("--rounds", type=int, metavar="N", help="rounds over the back-ends (default 2)")
    nftb.add_argument("--backends", metavar="B,B", help="back-ends (default old,exec,lib,interactive)")
    nftb.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    nftb.set_defaults(func=run_nft)

    prof = kinds.add_parser(
        "profile",
        help="what profiling costs a contended producer: none vs ThreadSampler vs bpf vs py-spy",
        description="Run a contended C producer (threads logging through libfips under one mutex) with no "
        "profiler, with the procfs ThreadSampler and with the bpf profiler at their defaults, and a Python "
        "producer (fipstop._fips) with and without py-spy, in alternating rounds; report throughput ratios "
        "with a 95 % confidence interval (target: each drop <= 5 %).",
    )
    prof.add_argument("--json", action="store_true", help="print the result as JSON")
    prof.add_argument("--quick", action="store_true", help="short run: 1 s per run, 2 rounds")
    prof.add_argument("--seconds", type=float, metavar="S", help="seconds per run (default 5)")
    prof.add_argument("--rounds", type=int, metavar="N", help="rounds over all variants (default 6)")
    prof.add_argument("--variants", metavar="V,V", help="variants (default none,threads,bpf,py_none,py_pyspy)")
    prof.add_argument("--calm-wait", type=float, metavar="S",
                      help="before each run wait up to S s for other load to settle (default 20; 0 with --quick)")
    prof.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    prof.set_defaults(func=run_profile)


def _load(module: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise FipsError(f"{what} is not built") from None
        if exc.name == "fipstop._fips":
            raise FipsError(
                f"{what} is not built: fipstop._fips is missing (run `make lib` or `pip install -e .`)"
            ) from None
        raise


def _command_line(env: tuple[str, ...] = ()) -> str:
    """The command as typed (``python -m fipstop`` when run so), with ``env``'s overrides in front."""
    a0 = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "fipstop"
    head = [Path(sys.executable).name, "-m", "fipstop"] if a0 == "__main__.py" else ["fipstop"]
    over = [f"{k}={os.environ[k]}" for k in env if os.environ.get(k)]
    return shlex.join([*over, *head, *sys.argv[1:]])


def _output(args: argparse.Namespace, env: tuple[str, ...] = ()) -> Output:
    return Output(json=args.json, out=args.out, command=_command_line(env))


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


def run_ring(args: argparse.Namespace) -> int:
    _load("fipstop.bench.ring.run", "bench ring")
    from fipstop.bench.ring.run import main
    from fipstop.bench.ring.spec import CASES, RingConfig

    cases = tuple(_names(args.cases) or ())
    bad = [c for c in cases if c not in CASES]
    if bad:
        raise FipsError(f"--cases {escape_text(bad[0])!r}: not a case (one of {', '.join(CASES)})")
    sizes: tuple[int, ...] = ()
    if args.sizes:
        try:
            sizes = tuple(int(x) for x in args.sizes.split(",") if x.strip())
        except ValueError:
            raise FipsError(f"--sizes {escape_text(args.sizes)!r}: give record sizes in bytes, e.g. 64,128") from None
        if any(not 32 <= z <= 65535 for z in sizes):
            raise FipsError(f"--sizes {escape_text(args.sizes)!r}: sizes must be 32..65535 bytes")
    if args.rounds is not None and args.rounds < 1:
        raise FipsError(f"bench ring: --rounds must be at least 1, not {args.rounds}")
    if args.attach_pairs is not None:
        # 6 pairs at least: below that the order-statistic "~95 %" interval of the median is not one
        if not 6 <= args.attach_pairs <= 10000:
            raise FipsError(f"bench ring: --attach-pairs must be 6..10000, not {args.attach_pairs}")
        if args.against or (cases and not {"fipsipc", "fipsipc_batch"} & set(cases)):
            raise FipsError("bench ring: --attach-pairs needs the prototype cases (fipsipc or fipsipc_batch) "
                            "and no --against")
    return main(RingConfig(_output(args, _RING_ENV), quick=args.quick, shm_dir=args.shm_dir, reps=args.rounds,
                           against=args.against, cases=cases, sizes=sizes, attach_pairs=args.attach_pairs))


def run_ui(args: argparse.Namespace) -> int:
    _load("fipstop.bench.ui", "bench ui")
    from fipstop.bench.ui import main

    return main(_output(args), quick=args.quick)


def run_bind(args: argparse.Namespace) -> int:
    _load("fipstop.bench.bind.run", "bench bind")
    from fipstop.bench.bind.modes import BindConfig
    from fipstop.bench.bind.run import main

    if args.callgrind:
        from fipstop.bench.bind import callgrind

        return callgrind.main(BindConfig(_output(args), modes=_names(args.modes), keep=args.keep,
                                         shm_dir=args.shm_dir))
    if args.scaling:
        from fipstop.bench.bind import scaling

        try:
            exponents = scaling.parse_exponents(args.scaling)
        except ValueError as exc:
            raise FipsError(f"bench bind: {exc}") from None
        return scaling.main(BindConfig(_output(args), quick=args.quick, seconds=args.seconds,
                                       modes=_names(args.modes), calm_wait=args.calm_wait, keep=args.keep,
                                       shm_dir=args.shm_dir, scaling=exponents))
    return main(BindConfig(_output(args), quick=args.quick, seconds=args.seconds, rounds=args.rounds,
                           modes=_names(args.modes), calm_wait=args.calm_wait, keep=args.keep,
                           shm_dir=args.shm_dir))


def run_record(args: argparse.Namespace) -> int:
    _load("fipstop.bench.record", "bench record")
    from fipstop.bench.record import main

    return main(_output(args), quick=args.quick, seconds=args.seconds)


def run_ips(args: argparse.Namespace) -> int:
    _load("fipstop.bench.ips", "bench ips")
    from fipstop.bench.ips import IpsBenchConfig, main

    return main(IpsBenchConfig(_output(args), quick=args.quick, attackers=args.attackers, rate=args.rate,
                               nice=args.nice, calm_wait=args.calm_wait, baseline=args.baseline))


def run_ban(args: argparse.Namespace) -> int:
    _load("fipstop.bench.ban", "bench ban")
    from fipstop.bench.ban import BanConfig, main

    return main(BanConfig(_output(args), quick=args.quick, attackers_log2=args.attackers_log2, rate=args.rate,
                          timeout=args.timeout, keep=args.keep))


def run_attack(args: argparse.Namespace) -> int:
    _load("fipstop.bench.attack.run", "bench attack")
    from fipstop.bench.attack.run import AttackConfig, main

    try:
        lengths = tuple(float(x) for x in _names(args.lengths))
    except ValueError:
        raise FipsError(f"--lengths {escape_text(args.lengths)!r}: give seconds, e.g. 30,60") from None
    if args.ips_rt is not None and not 1 <= args.ips_rt <= 99:
        raise FipsError(f"bench attack: --ips-rt must be a SCHED_FIFO priority 1..99, not {args.ips_rt}")
    return main(AttackConfig(_output(args), quick=args.quick, attackers_log2=args.attackers_log2, rate=args.rate,
                             lengths=lengths, pipelines=_names(args.pipelines), keep=args.keep,
                             nft_via=args.nft_via, ips_rt=args.ips_rt))


def run_nft(args: argparse.Namespace) -> int:
    from fipstop.bench.nft import BACKENDS, NftBenchConfig, main

    quick = args.quick
    return main(NftBenchConfig(_output(args), bans=args.bans or (2000 if quick else 10_000),
                               rate=args.rate or 2000.0, rounds=args.rounds or (1 if quick else 2),
                               backends=_names(args.backends) or BACKENDS))


def run_profile(args: argparse.Namespace) -> int:
    _load("fipstop.bench.profile", "bench profile")
    from fipstop.bench.profile import ProfileBenchConfig, main

    return main(ProfileBenchConfig(_output(args), quick=args.quick, seconds=args.seconds, rounds=args.rounds,
                                   variants=_names(args.variants), calm_wait=args.calm_wait))
