"""``fipstop ips``: the command line of the reference IPS consumer.

Only argument definitions live here (``fipstop --help`` stays fast); the
consumer itself is :mod:`fipstop.ips.run`.  The options and the stats file
(:mod:`fipstop.ips.stats`) are a stable interface: ``fipstop demo`` and
``fipstop bench ban`` start this command as a process of its own.
"""

from __future__ import annotations

import argparse

from fipstop.bans import BANS_DOMAIN

EPILOG = """\
jails:
  Built in: named-refused (Fail2Ban's filter: BIND's "client @0x.. ADDR#PORT (NAME):
  query (cache) 'NAME/A/IN' denied"; window, maxretry 5, findtime 600, bantime 600)
  and named-query-rate (every BIND query-log line "client @0x.. ADDR#PORT (NAME):
  query: NAME IN A +E(0) (SERVER)" counts; bucket, 50 per 1 s, bantime 600).
  --filter loads a Fail2Ban [Definition] filter (name in --filter-dir, or a path) as
  one more jail: [INCLUDES] before/after, .local files, %(x)s and <x> interpolation,
  prefregex with <F-CONTENT>, <HOST> <ADDR> <IP4> <IP6> <SUBNET> <F-*> tags; not
  <SKIPLINES>/maxlines.  A <HOST> that is a DNS name is never resolved (counted as
  not_ip).  --config FILE holds jails as [NAME] sections with filter=, failregex=,
  ignoreregex=, prefregex=, maxretry=, findtime=, bantime=, ignoreip=, mode=,
  enabled=.  --maxretry, --findtime, --bantime, --mode, --ignoreip override every
  selected jail.

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
    src.add_argument("--readers", type=_positive, default=2, metavar="N", help="reader threads (default 2)")
    src.add_argument("--batch", type=_positive, default=1024, metavar="N",
                     help="records claimed per read (default 1024)")
    src.add_argument("--skip-truncated", action="store_true",
                     help="do not match records libfips truncated (counted either way)")
    src.add_argument("--check", metavar="FILE|-",
                     help="do not consume: match the lines of FILE against the jails and print what each "
                     "jail would count (like fail2ban-regex), then exit")
    jails = p.add_argument_group("jails")
    jails.add_argument("--jail", action="append", metavar="NAME", default=None,
                       help="jail to run (repeatable; default named-refused, or every jail of --config)")
    jails.add_argument("--config", metavar="FILE", help="ini file of jails ([NAME] sections)")
    jails.add_argument("--filter", action="append", metavar="NAME|PATH", default=None,
                       help="a Fail2Ban filter file as one more jail (repeatable)")
    jails.add_argument("--filter-dir", metavar="DIR", default="/etc/fail2ban/filter.d",
                       help="where --filter NAME is looked up (default %(default)s)")
    jails.add_argument("--maxretry", type=_positive, metavar="N", help="hits that trigger a ban")
    jails.add_argument("--findtime", type=_seconds, metavar="S", help="counting window in seconds")
    jails.add_argument("--bantime", type=_seconds, metavar="S", help="ban duration in seconds")
    jails.add_argument("--mode", choices=("window", "bucket"), help="counting: window (Fail2Ban) or bucket (CrowdSec)")
    jails.add_argument("--ignoreip", action="append", metavar="CIDR", default=None,
                       help="never ban these addresses/networks (repeatable)")
    jails.add_argument("--ipv6-prefix", type=int, default=128, metavar="BITS",
                       help="count and ban IPv6 addresses per /BITS network (default 128; 64 is common)")
    jails.add_argument("--max-tracked", type=_positive, default=100_000, metavar="N",
                       help="addresses tracked per jail; the oldest is evicted (counted) beyond (default 100000)")
    act = p.add_argument_group("action")
    act.add_argument("--action", choices=("dry-run", "nft", "command"), default="dry-run",
                     help="what a ban does (default dry-run)")
    act.add_argument("--nft-set", metavar="FAMILY:TABLE:SET", default="inet:fipstop:banned",
                     help="nftables set for --action nft (default %(default)s; IPv6 go to SET6)")
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
    p.set_defaults(func=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (0 <= value < 10**9):
        raise argparse.ArgumentTypeError(f"out of range: {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    if args.check:
        from fipstop.ips.check import check_lines

        return check_lines(args)
    from fipstop.ips.run import run_ips

    return run_ips(args)
