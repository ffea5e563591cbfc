"""``fipstop ips``: the command line of the reference IPS consumer.

The options become :class:`fipstop.ips.run.IpsOptions` and the consumer
itself is :mod:`fipstop.ips.run`; ``--check FILE`` matches the lines of a
file instead (the ``fail2ban-regex`` of fipstop ips).  The options and the
stats file (:mod:`fipstop.ips.stats`) are a stable interface: ``fipstop
demo`` and ``fipstop bench ban`` start this command as a process of its own.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from fipstop.bans import BANS_DOMAIN
from fipstop.errors import FipsError
from fipstop.textsafe import escape_text

if TYPE_CHECKING:  # pragma: no cover
    from fipstop.ips.check import JailCheck
    from fipstop.ips.jails import JailOptions
    from fipstop.ips.run import IpsOptions

#: reader threads: each is a thread with its own GIL hand-offs; more than cores x a few only costs
MAX_READERS = 64
#: --check: a line longer than this is matched on its first MAX_CHECK_LINE bytes (a file with no newline
#: - /dev/zero through a FIFO - must not be one line the size of memory)
MAX_CHECK_LINE = 1 << 16
#: addresses listed per jail by --check, and values of each captured field per address
CHECK_TOP = 10
SHOWN_DATA = 3

EPILOG = """\
jails:
  Built in: named-refused (Fail2Ban's filter: BIND's "client @0x.. ADDR#PORT (NAME):
  query (cache) 'NAME/A/IN' denied"; window, maxretry 5, findtime 600, bantime 600)
  and named-query-rate (every BIND query-log line "client @0x.. ADDR#PORT (NAME):
  query: NAME IN A +E(0) (SERVER)" counts; bucket, 50 per 1 s, bantime 600).
  --filter loads a Fail2Ban filter (name in --filter-dir, or a path; NAME[opt=val]
  for its options) as one more jail, read as Fail2Ban reads it: includes, .local,
  %(x)s / %(known/x)s / <x>, [Init], modes, prefregex, datepattern, maxlines and
  <SKIPLINES>, <F-MLFID> sessions, every <F-*> tag (README: what is refused).  A
  <HOST> that is a DNS name is never resolved (counted as dns).  --config FILE holds
  jails as [NAME] sections with filter=, failregex=, ignoreregex=, prefregex=,
  datepattern=, maxlines=, maxretry=, findtime=, bantime=, ignoreip=, mode=
  (window|bucket), enabled=.  --maxretry, --findtime, --bantime, --mode, --ignoreip
  override every selected jail.  findtime counts on the records' ring time stamps,
  never on a date in the line (--check counts on the lines' dates).

counting (per address, per jail):
  window  Fail2Ban's: ban at maxretry hits within findtime of the first one.
  bucket  CrowdSec's leaky bucket: capacity maxretry, leaks maxretry per findtime.

actions:
  dry-run  ban in memory only (default).
  nft      add the address to an nftables set with "timeout BANTIME" (one
           `nft -f -` per burst of bans; the kernel unbans).  Created if missing:
           TABLE with SET (ipv4_addr) and SET6 (ipv6_addr), flags timeout, and,
           with a new table, an input chain dropping packets from both sets.
  command  run --command for a ban (and --unban-command after bantime) without a
           shell; tags <ip> <jail> <bantime> <hits> <family> are replaced per argument.
  A failing action is counted, retried with backoff (--action-retries), never fatal.

records:
  A record libfips_syslog.so stored ("<PRI>IDENT[PID]: MSG") is matched as
  "localhost IDENT[PID]: MSG", the line a syslog daemon writes minus the date,
  which is what Fail2Ban filters expect; a record without "<PRI>" is matched
  as it is.  Truncated records are matched (an attacker cannot evade by
  padding) and counted, unless --skip-truncated.

control (--control PATH, --no-control):
  A Unix socket, owner only (and root), answering `fipstop ips-client status` and
  `fipstop ips-client unban JAIL ADDR`: the action's unban runs (nft: the element is
  deleted), the address is forgotten (new failures ban it again) and an unban event
  is published.  A stale socket of a dead IPS is replaced; a live one is not (with
  --control: the IPS does not start; by default: it runs without one, with a warning).

stats (--stats-json, rewritten atomically once per second; "-" = JSON lines on stdout):
  see fipstop/ips/stats.py: records, records_per_s, matched, ignored, not_ip, bans,
  unbans, active_bans, tracked, evictions, action_failures, time-to-ban percentiles.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ips",
        help="reference IPS: a FIPS consumer that bans (Fail2Ban-style jails)",
        description="Consume a FIPS domain with several reader threads, match records against\n"
        "Fail2Ban-style jails in C, ban offending addresses (dry-run, an nftables set or a\n"
        "command) and publish one record per ban/unban into a bans domain.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("input")
    src.add_argument("--domain", metavar="NAME", help="domain to consume (default: the only one in the shm dir)")
    src.add_argument("--consumer", metavar="NAME", help="consumer name (default: ips-PID); an existing name resumes")
    src.add_argument("--readers", type=_bits(1, MAX_READERS), default=2, metavar="N",
                     help=f"reader threads (default 2, at most {MAX_READERS})")
    src.add_argument("--batch", type=_positive, default=1024, metavar="N",
                     help="records claimed per read (default 1024)")
    src.add_argument("--skip-truncated", action="store_true",
                     help="do not match records libfips truncated (counted either way)")
    src.add_argument("--check", metavar="FILE|-",
                     help="do not consume: match the lines of FILE against the jails and print what each "
                     "jail would count (like fail2ban-regex), then exit")
    src.add_argument("--print-missed", action="store_true", help="--check: also print the lines no jail matched")
    src.add_argument("--print-ignored", action="store_true", help="--check: also print the lines ignoreregex ignored")
    jails = p.add_argument_group("jails")
    jails.add_argument("--jail", action="append", metavar="NAME", default=None,
                       help="jail to run (repeatable; default named-refused, or every jail of --config)")
    jails.add_argument("--config", metavar="FILE", help="ini file of jails ([NAME] sections)")
    jails.add_argument("--filter", action="append", metavar="NAME|PATH", default=None,
                       help="a Fail2Ban filter file as one more jail (repeatable); NAME[opt=val,...] sets "
                       "its options, e.g. sshd[mode=aggressive]")
    jails.add_argument("--filter-dir", metavar="DIR", default="/etc/fail2ban/filter.d",
                       help="where --filter NAME is looked up (default %(default)s)")
    jails.add_argument("--maxretry", type=_positive, metavar="N", help="hits that trigger a ban")
    jails.add_argument("--findtime", type=_seconds, metavar="S", help="counting window in seconds")
    jails.add_argument("--bantime", type=_seconds, metavar="S", help="ban duration in seconds")
    jails.add_argument("--mode", choices=("window", "bucket"), help="counting: window (Fail2Ban) or bucket (CrowdSec)")
    jails.add_argument("--ignoreip", action="append", metavar="CIDR", default=None,
                       help="never ban these addresses/networks (repeatable)")
    jails.add_argument("--ignoreself", choices=("yes", "no"), default=None,
                       help="yes (default): never ban loopback (127.0.0.0/8, ::1) nor this host's own addresses, "
                       "as Fail2Ban's ignoreself; no: ban them too (a test simulating clients on loopback). "
                       "Unspecified, broadcast and multicast addresses are never banned")
    jails.add_argument("--ipv6-prefix", type=int, default=128, metavar="BITS",
                       help="count and ban IPv6 addresses per /BITS network (default 128; 64 is common)")
    jails.add_argument("--max-tracked", type=_positive, default=100_000, metavar="N",
                       help="addresses tracked per jail; the oldest is evicted (counted) beyond (default 100000)")
    jails.add_argument("--no-ranges", action="store_true",
                       help="never ban whole networks: by default a jail whose address table overflows "
                       "(--max-tracked) also counts per network and bans a network as a whole")
    jails.add_argument("--range-v4-prefix", type=_bits(8, 32), default=24, metavar="BITS",
                       help="IPv4 network size of those range bans (default /24)")
    jails.add_argument("--range-v6-prefix", type=_bits(16, 128), default=64, metavar="BITS",
                       help="IPv6 network size of those range bans (default /64)")
    jails.add_argument("--range-min-addrs", type=_positive, default=4, metavar="N",
                       help="distinct addresses a network needs (with maxretry x N hits within findtime) "
                       "before it is banned as a whole (default 4)")
    act = p.add_argument_group("action")
    act.add_argument("--action", choices=("dry-run", "nft", "command"), default="dry-run",
                     help="what a ban does (default dry-run)")
    act.add_argument("--nft-set", metavar="FAMILY:TABLE:SET", default="inet:fipstop:banned",
                     help="nftables set for --action nft (default %(default)s; IPv6 go to SET6)")
    act.add_argument("--nft-via", choices=("auto", "lib", "exec"), default="auto",
                     help="how --action nft reaches the kernel: libnftables in-process (lib), a forked "
                     "`nft -f` per batch (exec), or lib when libnftables loads, else exec with a warning "
                     "(auto, the default)")
    act.add_argument("--command", dest="ban_command", metavar="CMD", help="ban command for --action command")
    act.add_argument("--unban-command", metavar="CMD", help="unban command run after bantime (--action command)")
    act.add_argument("--action-concurrency", type=_positive, default=4, metavar="N",
                     help="actions running at once (default 4)")
    act.add_argument("--action-retries", type=int, default=3, metavar="N",
                     help="retries of a failing action, with backoff (default 3)")
    act.add_argument("--action-timeout", type=_seconds, default=10.0, metavar="S",
                     help="kill an action after S seconds (default 10)")
    out = p.add_argument_group("output")
    out.add_argument("--bans-domain", metavar="NAME", default=BANS_DOMAIN,
                     help="domain ban events are published into (default %(default)s; created if absent)")
    out.add_argument("--no-bans-domain", action="store_true", help="do not publish ban events")
    out.add_argument("--stats-json", metavar="PATH|-", help="write stats once per second (atomically)")
    out.add_argument("--duration", type=_seconds, default=0.0, metavar="S", help="exit after S seconds (0: never)")
    out.add_argument("-q", "--quiet", action="store_true", help="do not print bans on stderr")
    out.add_argument("--keep", action="store_true", help="stay registered on exit (resume with --consumer)")
    ctl = p.add_argument_group("control")
    ctl.add_argument("--control", metavar="PATH",
                     help="control socket `fipstop ips-client` lifts bans through (mode 0600; default "
                     "/run/fipstop/ips-BANSDOMAIN.sock as root, $XDG_RUNTIME_DIR/fipstop/... otherwise; a shm dir "
                     "other than /dev/shm adds a hash of it)")
    ctl.add_argument("--no-control", action="store_true", help="open no control socket")
    p.set_defaults(func=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _bits(lo: int, hi: int):
    def conv(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {value}")
        return value
    return conv


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (0 <= value < 10**9):
        raise argparse.ArgumentTypeError(f"out of range: {text!r}")
    return value


def jail_options(args: argparse.Namespace) -> JailOptions:
    from fipstop.ips.jails import JailOptions

    return JailOptions(jail=tuple(args.jail or ()), config=args.config, filter=tuple(args.filter or ()),
                       filter_dir=args.filter_dir, maxretry=args.maxretry, findtime=args.findtime,
                       bantime=args.bantime, mode=args.mode, ignoreip=tuple(args.ignoreip or ()),
                       ignoreself=None if args.ignoreself is None else args.ignoreself == "yes",
                       max_tracked=args.max_tracked, skip_truncated=args.skip_truncated, ipv6_prefix=args.ipv6_prefix)


def ips_options(args: argparse.Namespace) -> IpsOptions:
    from fipstop.ips.actions import ActionOptions
    from fipstop.ips.ranges import RangeOptions
    from fipstop.ips.run import IpsOptions

    action = ActionOptions(args.action, args.nft_set, args.ban_command, args.unban_command, args.action_timeout,
                           nft_via=args.nft_via)
    return IpsOptions(jails=jail_options(args), action=action, domain=args.domain, shm_dir=args.shm_dir,
                      consumer=args.consumer, readers=args.readers, batch=args.batch,
                      action_concurrency=args.action_concurrency, action_retries=args.action_retries,
                      bans_domain=None if args.no_bans_domain else args.bans_domain, stats_json=args.stats_json,
                      duration=args.duration, quiet=args.quiet, keep=args.keep,
                      control=args.control, no_control=args.no_control,
                      ranges=RangeOptions(args.range_v4_prefix, args.range_v6_prefix, args.range_min_addrs,
                                          not args.no_ranges))


def _shown(text: str) -> str:
    """A filter's text as written (backslashes as they are), control characters escaped."""
    return text if text.isprintable() else escape_text(text)


def _print_regexes(title: str, specs: Sequence[Any], hits: Counter[int]) -> None:
    total = sum(hits.values())
    print(f"  {title}: {total} total")
    for i, r in enumerate(specs):
        print(f"  |  {i + 1:>2}) [{hits.get(i, 0)}] {_shown(r.source)}")


def _print_jail(c: JailCheck, print_missed: bool, print_ignored: bool) -> None:
    s, cf = c.spec, c.compiled
    f = cf.definition
    opts = ", ".join(f"{k}={v}" for k, v in f.init)
    dp = _shown(f.datepattern.replace("\n", " | ")) if f.datepattern else "Fail2Ban's defaults"
    print(f"jail {escape_text(s.name)}: filter {escape_text(f.source)}{f' [{escape_text(opts)}]' if opts else ''}, "
          f"maxlines {f.maxlines}, datepattern {dp}")
    for w in cf.warnings:
        print(f"  warning: {escape_text(w)}")
    if cf.prefregex:
        print(f"  Prefregex: {c.pref_hits} total")
        print(f"  |  {_shown(cf.prefregex.source)}")
    _print_regexes("Failregex", cf.failregex, c.fail_hits)
    _print_regexes("Ignoreregex", cf.ignoreregex, c.ign_hits)
    print(f"  Date template hits: {sum(c.date_hits.values())} of {c.lines} lines")
    for tmpl, n in sorted(c.date_hits.items(), key=lambda kv: -kv[1]):
        print(f"  |  [{n}] {_shown(cf.dates.templates[tmpl].name)}")
    r = c.results
    failures = r["hit"] + r["dns"] + r["not_ip"]
    missed = c.lines - failures - r["ignored"]
    print(f"  Lines: {c.lines} lines, {r['ignored']} ignored, {failures} matched, {missed} missed")
    print(f"  |  matched: {r['hit']} with an address, {r['dns']} with a DNS name (not resolved, by design), "
          f"{r['not_ip']} with a host that is not an address")
    print(f"  |  missed: {r['nofail']} not failures (<F-NOFAIL>/<F-MLFGAINED>), {r['pending']} waiting for an "
          f"address (<F-MLFID> session), {r['nomatch']} matched no failregex")
    bans = c.would_ban()
    print(f"  Addresses: {len(c.addrs)}, {sum(1 for n in c.addrs.values() if n >= s.maxretry)} at or above maxretry "
          f"{s.maxretry}; {len(bans)} would be banned (maxretry {s.maxretry} within findtime {s.findtime_s:g} s "
          "on the lines' dates)")
    for ip, n in c.addrs.most_common(CHECK_TOP):
        extra = " ".join(f"{escape_text(k)}={','.join(escape_text(v[:40]) for v, _ in vs.most_common(SHOWN_DATA))}"
                         for k, vs in sorted(c.data.get(ip, {}).items()))
        print(f"  |  {n:>8}  {ip}{'  ' + extra if extra else ''}")
    if c.dns:
        print(f"  DNS names in <HOST>: {sum(c.dns.values())} lines, {len(c.dns)} names (never resolved: "
              "resolving is a lookup an attacker controls)")
        for name, n in c.dns.most_common(CHECK_TOP):
            print(f"  |  {n:>8}  {escape_text(name)}")
    if c.not_ip:
        print(f"  Hosts that are not addresses: {sum(c.not_ip.values())} lines")
        for name, n in c.not_ip.most_common(CHECK_TOP):
            print(f"  |  {n:>8}  {escape_text(name)}")
    if print_missed:
        print(f"  Missed line(s): {len(c.missed)}")
        for ln in c.missed:
            print(f"  |  {escape_text(ln)}")
    if print_ignored:
        print(f"  Ignored line(s): {len(c.ignored)}")
        for ln in c.ignored:
            print(f"  |  {escape_text(ln)}")


def _bounded_lines(f) -> Iterator[bytes]:
    """The lines of ``f``, each cut to MAX_CHECK_LINE bytes (the rest of a longer line is skipped)."""
    while line := f.readline(MAX_CHECK_LINE):
        if len(line) == MAX_CHECK_LINE and not line.endswith(b"\n"):
            while (rest := f.readline(MAX_CHECK_LINE)) and not rest.endswith(b"\n"):
                pass
        yield line


def check_lines(args: argparse.Namespace) -> int:
    """``--check FILE``: what each jail would do with the lines of a file (fail2ban-regex's report)."""
    from fipstop.ips.check import check_stream

    try:
        f = sys.stdin.buffer if args.check == "-" else open(args.check, "rb")
    except OSError as exc:
        raise FipsError(f"ips --check: cannot read {escape_text(args.check)}: {exc.strerror}") from None
    with f:
        mode = os.fstat(f.fileno()).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):  # /dev/zero, /dev/urandom: lines for ever
            raise FipsError(f"ips --check: {escape_text(args.check)} is a device, not a file of log lines")
        n, checks = check_stream(jail_options(args), _bounded_lines(f))
    print(f"{n} lines")
    for c in checks:
        print()
        _print_jail(c, args.print_missed, args.print_ignored)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.check:
        return check_lines(args)
    from fipstop.ips.run import run_ips

    return run_ips(ips_options(args))
