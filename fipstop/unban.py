"""Lifting a ban through the source's own mechanism (the banned-addresses view's ``u``).

Only Fail2Ban has one a monitor may call: ``fail2ban-client set JAIL unbanip ADDR`` asks the server, which
runs the jail's ``actionunban`` and removes the address from its database, exactly as an administrator would.
The others say why not (:func:`refusal`): fipstop never writes into a ban source behind its back.

The jail and the address come from another process (a database, a ring): they are passed as separate
arguments (no shell), and refused unless the address parses and the jail is a plain name.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess

__all__ = ["refusal", "unban_argv", "unban"]

_JAIL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}\Z")

_WHY_NOT = {
    "fipstop-ips": "fipstop ips has no unban interface: its bans end at bantime (restart it to clear them, "
                   "or delete the element from its nftables set)",
    "crowdsec": "CrowdSec's decisions are lifted with `cscli decisions delete --ip ADDR` (needs its local API "
                "credentials, which fipstop does not take)",
}


def refusal(source: str, jail: str, ip: str) -> str:
    """Why this ban cannot be lifted from here ('' if it can)."""
    if source != "fail2ban":
        return _WHY_NOT.get(source, f"{source}: no unban mechanism known")
    if not _JAIL.match(jail):
        return "the jail name is not a plain Fail2Ban jail name"
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return "not a single address (Fail2Ban unbans addresses)"
    return ""


def unban_argv(jail: str, ip: str, *, client: str | None = None, socket: str | None = None) -> list[str]:
    """The command that asks fail2ban-server to lift the ban (what the confirmation shows)."""
    argv = [client or shutil.which("fail2ban-client") or "fail2ban-client"]
    if socket:
        argv += ["-s", socket]
    return argv + ["set", jail, "unbanip", ip]


def unban(jail: str, ip: str, *, client: str | None = None, socket: str | None = None,
          timeout_s: float = 5.0) -> tuple[bool, str]:
    """Run :func:`unban_argv`; (ok, one line saying what happened)."""
    why = refusal("fail2ban", jail, ip)
    if why:
        return False, why
    argv = unban_argv(jail, ip, client=client, socket=socket)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"{argv[0]}: {e}"
    text = " ".join((out.stdout + " " + out.stderr).split())[:200]
    if out.returncode != 0:
        return False, f"fail2ban-client exit {out.returncode}: {text or 'no output'}"
    return True, f"unbanned {ip} in {jail} ({text or 'ok'})"
