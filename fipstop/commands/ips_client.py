"""``fipstop ips-client``: talk to a running ``fipstop ips`` through its control socket
(:mod:`fipstop.ips.control`), as ``fail2ban-client`` talks to fail2ban-server.

    fipstop ips-client status
    fipstop ips-client unban JAIL ADDR

Exit status as fail2ban-client's: 0 done, 255 not done (no IPS answering, permission denied, or the
IPS's refusal: "ADDR is not banned in JAIL"), 2 a usage error.  Every failure is one line on stderr.
"""

from __future__ import annotations

import argparse
import json

from fipstop.bans import BANS_DOMAIN
from fipstop.errors import FipsError, one_line
from fipstop.textsafe import escape_text

#: fail2ban-client's exit status when a command did not succeed
FAILED = 255

EPILOG = """\
The socket: --control PATH, else the default path of an IPS publishing into
--bans-domain (default fips-bans) in the --shm-dir given before the command:
/run/fipstop/ips-BANSDOMAIN.sock as root, $XDG_RUNTIME_DIR/fipstop/... otherwise
(what `fipstop ips` prints at start, and publishes in its stats record).  Only root
and the IPS's own user may use it.

exit status: 0 done, 255 not done (as fail2ban-client), 2 usage error.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ips-client",
        help="ask a running `fipstop ips` for its status, or to lift a ban (like fail2ban-client)",
        description="Talk to a running `fipstop ips` through its control socket.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    sub = p.add_subparsers(title="commands", metavar="COMMAND", dest="ips_command")
    fmt = {"epilog": EPILOG, "formatter_class": argparse.RawDescriptionHelpFormatter}
    st = sub.add_parser("status", **fmt, help="jails, bans in force (total and per jail)")
    _common(st, suppress=True)
    st.set_defaults(func=run)
    ub = sub.add_parser("unban", **fmt,
                        help="lift the ban of ADDR in JAIL now (fail2ban-client set JAIL unbanip ADDR)")
    ub.add_argument("jail", metavar="JAIL")
    ub.add_argument("addr", metavar="ADDR")
    _common(ub, suppress=True)
    ub.set_defaults(func=run)
    p.set_defaults(func=run)


def _common(p: argparse.ArgumentParser, suppress: bool = False) -> None:
    """The options, before or after the command (after it, they do not reset what was given before)."""
    def d(v):
        return argparse.SUPPRESS if suppress else v
    p.add_argument("--control", metavar="PATH", default=d(None), help="the IPS's control socket (default: see below)")
    p.add_argument("--bans-domain", metavar="NAME", default=d(BANS_DOMAIN),
                   help=f"the IPS's bans domain, which names its default socket (default {BANS_DOMAIN})")
    p.add_argument("--json", action="store_true", default=d(False),
                   help="print the IPS's reply as it came (one JSON object)")
    p.add_argument("--timeout", type=float, default=d(10.0), metavar="S", help="wait at most S seconds (default 10)")


def socket_path(args: argparse.Namespace) -> str:
    from fipstop.ips.control import default_path

    if args.control:
        return str(args.control)
    path = default_path(args.bans_domain, getattr(args, "shm_dir", None))
    if path is None:
        raise FipsError("ips-client: $XDG_RUNTIME_DIR is not set, so there is no default socket: give --control PATH",
                        exit_code=FAILED)
    return path


def _status_text(rep: dict) -> list[str]:
    raw = rep.get("jails")
    jails: dict = raw if isinstance(raw, dict) else {}
    out = [f"fipstop ips pid {rep.get('pid')}, action {escape_text(str(rep.get('action')))}, "
           f"consuming {escape_text(str(rep.get('domain')))}",
           f"bans in force: {rep.get('active')}",
           f"jails: {len(jails)}"]
    for name, c in sorted(jails.items()):
        c = c if isinstance(c, dict) else {}
        out.append(f"  {escape_text(str(name))}: {c.get('active')} in force, {c.get('bans')} banned, "
                   f"{c.get('failed')} failed")
    return out


def run(args: argparse.Namespace) -> int:
    from fipstop.ips.control import ControlError, request

    if not getattr(args, "ips_command", None):
        raise FipsError("ips-client: give a command: status, or unban JAIL ADDR (see --help)")
    if not args.timeout > 0:
        raise FipsError("ips-client: --timeout must be more than 0")
    path = socket_path(args)
    req = {"cmd": "status"} if args.ips_command == "status" else {"cmd": "unban", "jail": args.jail, "ip": args.addr}
    try:
        rep = request(path, req, timeout_s=args.timeout)
    except ControlError as exc:
        raise FipsError(f"ips-client: {escape_text(one_line(str(exc), 300))}", exit_code=FAILED) from None
    if args.json:
        print(json.dumps(rep, separators=(",", ":"), ensure_ascii=True))
        return 0 if rep["ok"] else FAILED
    if not rep["ok"]:
        raise FipsError(f"ips-client: {escape_text(one_line(str(rep.get('error')), 300))}", exit_code=FAILED)
    if args.ips_command == "status":
        print("\n".join(_status_text(rep)))
    else:
        print(escape_text(one_line(str(rep.get("message")), 300)))
    return 0
