"""``fipstop tail``: print records as they arrive, like ``tail -f``.

It is a registered consumer (it sees every record, and a slow terminal makes
the producer drop rather than block), so drops show up here as explicit
``-- N records lost --`` lines rather than silently. Payloads are escaped:
log text is attacker-controlled.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from datetime import UTC, datetime

from fipstop.bindq import record_text
from fipstop.errors import FipsError
from fipstop.textsafe import escape_bytes, escape_text

IDLE_SLEEP_S = 0.01


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tail", help="print records as they arrive (a registered consumer)",
                              description="Follow a domain's records, escaped, as a registered consumer.")
    p.add_argument("--domain", metavar="NAME", help="domain to follow (default: the only one in the shm dir)")
    p.add_argument("--consumer", metavar="NAME", help="consumer name (default: tail-PID); an existing name resumes")
    p.add_argument("-v", "--verbose", action="store_true", help="prefix each record with ring, seq and time")
    p.add_argument("-n", "--count", type=_count, default=0, help="exit after this many records (0: never)")
    p.add_argument("--timeout", type=_seconds, default=0.0, metavar="S", help="exit after S seconds (0: never)")
    p.add_argument("--keep", action="store_true", help="stay registered on exit (resume later with --consumer)")
    p.set_defaults(func=run)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= 10**9):
        raise argparse.ArgumentTypeError(f"give seconds >= 0, got {text!r}")
    return value


def format_record(rec, ring: int, verbose: bool) -> str:
    text = escape_bytes(record_text(rec.data, rec.flags))
    if rec.truncated:
        text += " [truncated]"
    if not verbose:
        return text
    when = datetime.fromtimestamp(rec.ts_ns / 1e9, tz=UTC).strftime("%H:%M:%S.%f")
    return f"ring {ring} seq {rec.seq} {when} {text}"


def run(args: argparse.Namespace) -> int:
    from fipstop import _fips
    from fipstop.ring import domain_path, is_truncated, others_may_write, pick_domain, truncated_line

    domain_name = pick_domain(args.domain, args.shm_dir)
    consumer_name = args.consumer or f"tail-{os.getpid()}"
    if (warning := others_may_write(domain_path(domain_name, args.shm_dir))) is not None:
        print(f"fipstop: tail: {escape_text(warning)}", file=sys.stderr, flush=True)
    try:
        domain = _fips.Domain(domain_name, args.shm_dir, create=False)
        consumer = _fips.Consumer(domain, consumer_name)
    except _fips.FipsError as exc:
        raise FipsError(str(exc)) from None

    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    printed = 0
    out = sys.stdout
    try:
        while not stop:
            try:
                # With --count, never claim more than is left to print: the
                # whole batch is released, and what --keep leaves for a later
                # resume must not include records nobody printed.
                want = min(1024, args.count - printed) if args.count else 1024
                batch = consumer.read(want)
            except _fips.FipsError as exc:
                if is_truncated(exc):  # shrank under the mapping: zero pages and ETRUNC, never SIGBUS
                    line = truncated_line(domain_name, domain_path(domain_name, args.shm_dir))
                    raise FipsError(f"tail: {escape_text(line)}", exit_code=1) from None
                raise FipsError(f"tail: {escape_text(str(exc))}") from None
            if batch is None:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(IDLE_SLEEP_S)
                continue
            lines = []
            for rec in batch:
                if rec.lost:
                    lines.append(f"-- {rec.lost} records lost (ring {batch.ring} full) --")
                lines.append(format_record(rec, batch.ring, args.verbose))
                printed += 1
                if args.count and printed >= args.count:
                    stop = True
                    break
            batch.release()
            out.write("\n".join(lines) + "\n")
            out.flush()
            if deadline is not None and time.monotonic() >= deadline:
                break
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # `fipstop tail | head`: the reader went away; exit quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        if args.keep:
            consumer.detach()
        else:
            consumer.close()
        domain.close()
    return 0
