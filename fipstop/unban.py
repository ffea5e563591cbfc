"""Lifting a ban through the source's own mechanism (the banned-addresses view's ``u``).

* Fail2Ban: ``fail2ban-client [-s SOCKET] set JAIL unbanip ADDR`` asks the server, which runs the jail's
  ``actionunban`` and removes the address from its database, exactly as an administrator would.  SOCKET
  is the one the dashboard follows (``--fail2ban-socket``), so the server asked is the one shown.
* ``fipstop ips``: its control socket (:mod:`fipstop.ips.control`, the path it publishes in its stats
  record), the request ``fipstop ips-client unban JAIL ADDR --control SOCKET`` sends: the IPS runs its
  action's unban (nft: the element is deleted), forgets the address and publishes the unban event.

The others say why not (:func:`refusal`): fipstop never writes into a ban source behind its back.

The jail and the address come from another process (a database, a ring): they are passed as separate
arguments (no shell) or JSON fields, and refused unless the address parses and (Fail2Ban) the jail is a
plain name.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess

__all__ = ["refusal", "unban_argv", "unban"]

_JAIL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}\Z")

_WHY_NOT = {
    "crowdsec": "CrowdSec's decisions are lifted with `cscli decisions delete --ip ADDR` (needs its local API "
                "credentials, which fipstop does not take)",
}
IPS = "fipstop-ips"


def _ips_refusal(jail: str, ip: str, control: str) -> str:
    if not control:
        return ("this fipstop ips publishes no control socket (started with --no-control, without "
                "$XDG_RUNTIME_DIR, or older than the socket): its bans end at bantime")
    if not jail or not jail.isprintable():
        return "the jail name is not printable"
    try:
        ipaddress.ip_network(ip, strict=True) if "/" in ip else ipaddress.ip_address(ip)
    except ValueError:
        return "not an address or network"
    try:
        st = os.stat(control)
    except FileNotFoundError:
        return f"its control socket {control} is gone (the IPS stopped?)"
    except OSError as exc:
        return f"its control socket {control}: {exc.strerror}"
    me = os.geteuid()
    if me != 0 and (me != st.st_uid or not os.access(control, os.W_OK)):
        who = "root" if st.st_uid == 0 else f"root or uid {st.st_uid}"
        return f"permission denied: its control socket {control} is for {who} only (run the dashboard as {who})"
    return ""


def refusal(source: str, jail: str, ip: str, control: str = "") -> str:
    """Why this ban cannot be lifted from here ('' if it can); ``control``: the source's socket."""
    if source == IPS:
        return _ips_refusal(jail, ip, control)
    if source != "fail2ban":
        return _WHY_NOT.get(source, f"{source}: no unban mechanism known")
    if not _JAIL.match(jail):
        return "the jail name is not a plain Fail2Ban jail name"
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return "not a single address (Fail2Ban unbans addresses)"
    return ""


def unban_argv(jail: str, ip: str, *, client: str | None = None, socket: str | None = None,
               source: str = "fail2ban") -> list[str]:
    """The command that lifts the ban (what the confirmation shows): fail2ban-client's, or for
    ``fipstop ips`` the ``fipstop ips-client`` command equivalent to the request :func:`unban` sends."""
    if source == IPS:
        return ["fipstop", "ips-client", "unban", jail, ip] + (["--control", socket] if socket else [])
    argv = [client or shutil.which("fail2ban-client") or "fail2ban-client"]
    if socket:
        argv += ["-s", socket]
    return argv + ["set", jail, "unbanip", ip]


def unban(jail: str, ip: str, *, client: str | None = None, socket: str | None = None,
          timeout_s: float = 5.0, source: str = "fail2ban") -> tuple[bool, str]:
    """Lift the ban (:func:`unban_argv`); (ok, one line saying what happened)."""
    why = refusal(source, jail, ip, socket or "")
    if why:
        return False, why
    if source == IPS:
        return _ips_unban(jail, ip, socket or "", timeout_s)
    argv = unban_argv(jail, ip, client=client, socket=socket)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"{argv[0]}: {e}"
    text = " ".join((out.stdout + " " + out.stderr).split())[:200]
    if out.returncode != 0:
        return False, f"fail2ban-client exit {out.returncode}: {text or 'no output'}"
    return True, f"unbanned {ip} in {jail} ({text or 'ok'})"


def _ips_unban(jail: str, ip: str, control: str, timeout_s: float) -> tuple[bool, str]:
    from fipstop.errors import one_line
    from fipstop.ips.control import ControlError, request

    try:
        rep = request(control, {"cmd": "unban", "jail": jail, "ip": ip}, timeout_s=timeout_s)
    except ControlError as exc:
        return False, f"fipstop ips: {one_line(str(exc), 200)}"
    if not rep["ok"]:
        return False, f"fipstop ips: {one_line(str(rep.get('error')), 200)}"
    return True, f"{one_line(str(rep.get('message') or 'unbanned'), 200)} (fipstop ips)"
