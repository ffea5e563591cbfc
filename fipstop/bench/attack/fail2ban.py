"""Fail2Ban for ``fipstop bench attack``: a private configuration whose bans really drop packets.

Debian's ``named-refused`` filter on named's log file, Debian's stock
``nftables`` action (``type=allports``, ``blocktype=drop``: the set
``addr-set-named-refused`` of table ``inet f2b-table``, hooked on input),
then a second action that appends ``<time> <ip>`` to a file: Fail2Ban runs a
jail's actions in order, so the time is taken once the nft element exists.
The server runs inside the bench's server namespace, so the table is there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fipstop.bench.attack.netns import VALID_NET


def write_config(cfg: Path, logpath: Path, marks: Path, maxretry: int, backend: str = "polling") -> None:
    cfg.mkdir(parents=True, exist_ok=True)
    shutil.copytree("/etc/fail2ban/filter.d", cfg / "filter.d", dirs_exist_ok=True)
    shutil.copytree("/etc/fail2ban/action.d", cfg / "action.d", dirs_exist_ok=True)
    (cfg / "fail2ban.conf").write_text(f"""[Definition]
loglevel = INFO
logtarget = {cfg}/fail2ban.log
socket = {cfg}/fail2ban.sock
pidfile = {cfg}/fail2ban.pid
dbfile = {cfg}/fail2ban.sqlite3
dbpurgeage = 1d
dbmaxmatches = 10
""")
    (cfg / "action.d" / "benchmark.conf").write_text("""[Definition]
actionstart =
actionstop =
actioncheck =
actionban = printf '%%s %%s\\n' "$(date +%%s.%%N)" '<ip>' >> <marks>
actionunban =

[Init]
marks = /dev/null
""")
    (cfg / "jail.conf").write_text(f"""[DEFAULT]
backend = {backend}
usedns = no
ignoreself = false
ignoreip = {VALID_NET}
maxretry = {maxretry}
findtime = 600
bantime = 3600

[named-refused]
enabled = true
filter = named-refused
logpath = {logpath}
action = nftables[type=allports, protocol="tcp,udp", blocktype=drop]
         benchmark[marks="{marks}"]
""")


def read_marks(marks: Path, want) -> dict[str, int]:
    """ip -> the time (ns) of its first ban, from the benchmark action's file."""
    out: dict[str, int] = {}
    try:
        text = marks.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and want(parts[1]):
            try:
                out.setdefault(parts[1], int(round(float(parts[0]) * 1e9)))
            except ValueError:
                pass
    return out
