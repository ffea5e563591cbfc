"""Ban actions: dry-run, an nftables set, a command hook.

An action never raises into the IPS: ``ban``/``unban`` return one result per
job, ``"ok"`` or a one-line error; the runner (:mod:`fipstop.ips.run`) counts
failures and retries with backoff.
"""

from __future__ import annotations

import ipaddress
import shlex
import shutil
import socket
import subprocess
from dataclasses import dataclass, field

from fipstop.errors import FipsError
from fipstop.ips.nftlib import ExecNft, LibNft, one_line

OK = "ok"


@dataclass(slots=True)
class BanJob:
    jail: str
    ip: str
    first_ns: int
    trigger_ns: int
    hits: int
    bantime_s: float
    kind: str = "ban"  # ban | unban
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    #: the failure's data ((name, value) pairs: user, ...), carried into the ban event
    data: tuple[tuple[str, str], ...] | None = None
    #: when the reader handed the trigger to the engine (wall clock ns; 0: not known): splits the reaction
    queued_ns: int = 0

    @property
    def family(self) -> str:
        return "inet6" if ":" in self.ip else "inet"


_one_line = one_line


class DryRun:
    name = "dry-run"
    batches = True

    def setup(self) -> str:
        return OK

    def ban(self, jobs: list[BanJob]) -> list[str]:
        return [OK] * len(jobs)

    def unban(self, jobs: list[BanJob]) -> list[str]:
        return [OK] * len(jobs)


class Nft:
    """Elements with a timeout in a named set; one nft transaction per burst.

    The kernel removes an element when its timeout ends, so a ban that ends at
    bantime needs no unban; ``unban`` (a ban lifted by hand through the control
    socket, :mod:`fipstop.ips.control`) deletes the element.  ``setup`` creates
    TABLE, SET (ipv4_addr) and SET6 (ipv6_addr, not for family ip) with
    ``flags timeout`` and, when it created the table, a chain that drops
    packets from both sets: without that a set bans nothing.
    Networks (range bans, :mod:`fipstop.ips.ranges`) go to SET_net and
    SET6_net (``flags interval, timeout``), each with its drop rule added
    when the set is created.

    The transaction goes through libnftables in this process when it loads
    (``backend="auto"``): forking ``nft -f`` per burst was most of the reaction
    time under load (``fipstop bench nft`` measures both).  An explicit ``nft``
    binary (a test's wrapper) or ``backend="exec"`` forks ``nft -f -``;
    ``fallback`` then says why, for the IPS's one start-up line.
    """

    name = "nft"
    batches = True

    def __init__(self, spec: str, timeout_s: float = 10.0, nft: str = "nft", backend: str = "auto") -> None:
        parts = spec.split(":")
        if len(parts) != 3 or not all(p and p.replace("_", "").replace("-", "").isalnum() for p in parts):
            raise FipsError(f"--nft-set {spec!r}: want FAMILY:TABLE:SET (letters, digits, _ and -)")
        self.family, self.table, self.set4 = parts
        if self.family not in ("inet", "ip", "ip6"):
            raise FipsError(f"--nft-set: family {self.family!r} must be inet, ip or ip6")
        if backend not in ("auto", "lib", "exec"):
            raise FipsError(f"nft backend {backend!r}: want auto, lib or exec")
        self.set6 = self.set4 + "6"
        self.net4, self.net6 = self.set4 + "_net", self.set6 + "_net"
        self.timeout_s = timeout_s
        self.nft = shutil.which(nft) or nft
        self.ready = False
        self.fallback = ""
        self.runner: LibNft | ExecNft
        if backend == "exec" or (backend == "auto" and nft != "nft"):
            self.runner = ExecNft(self.nft, timeout_s)
        else:
            try:
                self.runner = LibNft()
            except (OSError, AttributeError) as exc:
                if backend == "lib":
                    raise FipsError(f"libnftables: {_one_line(str(exc))}") from None
                self.fallback = f"libnftables not usable ({_one_line(str(exc), 100)}): forking nft -f per ban batch"
                self.runner = ExecNft(self.nft, timeout_s)

    @property
    def backend(self) -> str:
        return self.runner.name

    def _run(self, script: str) -> str:
        return self.runner.run(script)

    def _exists(self, *what: str) -> bool | str:
        """Whether ``list WHAT`` succeeds; a string when nft itself could not run."""
        r, _ = self.runner.query("list " + " ".join(what))
        if r.startswith("nft: "):
            return r
        return r == OK

    def setup(self) -> str:
        f, t = self.family, self.table
        exists = self._exists("table", f, t)
        if isinstance(exists, str):
            return exists
        lines = [f"add table {f} {t}"]
        if f != "ip6":
            lines.append(f"add set {f} {t} {self.set4} {{ type ipv4_addr; flags timeout; }}")
        if f != "ip":
            lines.append(f"add set {f} {t} {self.set6} {{ type ipv6_addr; flags timeout; }}")
        if not exists:
            lines.append(f"add chain {f} {t} input {{ type filter hook input priority -10; policy accept; }}")
            if f != "ip6":
                lines.append(f"add rule {f} {t} input ip saddr @{self.set4} drop")
            if f != "ip":
                lines.append(f"add rule {f} {t} input ip6 saddr @{self.set6} drop")
        for fam, name, typ, match in (("ip", self.net4, "ipv4_addr", "ip"), ("ip6", self.net6, "ipv6_addr", "ip6")):
            if f not in ("inet", fam):
                continue
            have = exists and self._exists("set", f, t, name)
            if isinstance(have, str):
                return have
            if not have:
                lines.append(f"add set {f} {t} {name} {{ type {typ}; flags interval, timeout; }}")
                lines.append(f"add chain {f} {t} input {{ type filter hook input priority -10; policy accept; }}")
                lines.append(f"add rule {f} {t} input {match} saddr @{name} drop")
        r = self._run("\n".join(lines) + "\n")
        self.ready = r == OK
        return r

    def ban(self, jobs: list[BanJob]) -> list[str]:
        if not self.ready:
            r = self.setup()
            if r != OK:
                return [r] * len(jobs)
        lines = []
        groups: dict[str, list[str]] = {}
        pton = socket.inet_pton
        for j in jobs:
            # the address goes into an nft script: only what inet_pton / ipaddress accepts gets there
            # (inet_pton is ~10x faster than ipaddress, which a 10 000-ban burst notices)
            tmo = f" timeout {max(1, int(j.bantime_s * 1000))}ms"
            if "/" not in j.ip:
                try:
                    pton(socket.AF_INET6 if ":" in j.ip else socket.AF_INET, j.ip)
                except (OSError, ValueError):
                    raise ValueError(f"not an IP address: {_one_line(j.ip, 60)!r}") from None
                groups.setdefault(self.set6 if ":" in j.ip else self.set4, []).append(j.ip + tmo)
                continue
            net = ipaddress.ip_network(j.ip)
            groups.setdefault(self.net6 if net.version == 6 else self.net4, []).append(f"{net}{tmo}")
        for s, items in groups.items():
            elems = ", ".join(items)
            lines.append(f"add element {self.family} {self.table} {s} {{ {elems} }}")
        r = self._run("\n".join(lines) + "\n")
        if r != OK and "No such file" in r:
            self.ready = False  # table deleted under us: recreate on retry
        return [r] * len(jobs)  # one transaction: all or nothing

    def unban(self, jobs: list[BanJob]) -> list[str]:
        """Delete the elements now (a ban lifted by hand, ``fipstop ips-client unban``); a ban that
        ends at bantime never comes here: the element's timeout removed it.  An element already gone
        (timed out, or deleted by someone else) is unbanned all the same."""
        out = []
        for j in jobs:  # one transaction per element: one that is gone must not fail the others
            if "/" in j.ip:
                net = ipaddress.ip_network(j.ip)  # only a parsed address or network reaches the script
                key, name = str(net), self.net6 if net.version == 6 else self.net4
            else:
                addr = ipaddress.ip_address(j.ip)
                key, name = str(addr), self.set6 if addr.version == 6 else self.set4
            r = self._run(f"delete element {self.family} {self.table} {name} {{ {key} }}\n")
            out.append(OK if r == OK or "No such file or directory" in r else r)
        return out


class Command:
    """Runs a command per ban (and per unban), without a shell.  Tags in any
    argument: ``<ip>``, ``<jail>`` (= Fail2Ban's ``<name>``), ``<bantime>``,
    ``<hits>`` (= ``<failures>``), ``<family>`` (inet / inet6)."""

    name = "command"
    batches = False

    def __init__(self, ban_cmd: str | None, unban_cmd: str | None, timeout_s: float = 10.0) -> None:
        if not ban_cmd:
            raise FipsError("--action command needs --command CMD")
        try:
            self.ban_argv = shlex.split(ban_cmd)
            self.unban_argv = shlex.split(unban_cmd) if unban_cmd else None
        except ValueError as exc:
            raise FipsError(f"--command: {exc}") from None
        if not self.ban_argv:
            raise FipsError("--command is empty")
        self.timeout_s = timeout_s

    @staticmethod
    def expand(argv: list[str], job: BanJob) -> list[str]:
        tags = {"<ip>": job.ip, "<jail>": job.jail, "<name>": job.jail, "<bantime>": f"{job.bantime_s:g}",
                "<hits>": str(job.hits), "<failures>": str(job.hits), "<family>": job.family}
        out = []
        for a in argv:
            for k, v in tags.items():
                a = a.replace(k, v)
            out.append(a)
        return out

    def _run(self, argv: list[str], job: BanJob) -> str:
        try:
            p = subprocess.run(self.expand(argv, job), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            return f"command timed out after {self.timeout_s:g} s"
        except OSError as exc:
            return _one_line(f"command: {exc.strerror or exc}: {argv[0]}")
        if p.returncode != 0:
            err = p.stderr.decode("utf-8", "replace").strip()
            return _one_line(f"command exit {p.returncode}" + (f": {err}" if err else ""))
        return OK

    def setup(self) -> str:
        return OK

    def ban(self, jobs: list[BanJob]) -> list[str]:
        return [self._run(self.ban_argv, j) for j in jobs]

    def unban(self, jobs: list[BanJob]) -> list[str]:
        if self.unban_argv is None:
            return [OK] * len(jobs)
        return [self._run(self.unban_argv, j) for j in jobs]


@dataclass(frozen=True)
class ActionOptions:
    """What a ban does (``fipstop ips --action ...``)."""

    action: str = "dry-run"  # dry-run | nft | command
    nft_set: str = "inet:fipstop:banned"
    ban_command: str | None = None
    unban_command: str | None = None
    action_timeout: float = 10.0
    nft_via: str = "auto"  # auto | lib | exec (Nft's backend)


def make_action(args: ActionOptions) -> DryRun | Nft | Command:
    if args.action == "nft":
        return Nft(args.nft_set, args.action_timeout, backend=args.nft_via)
    if args.action == "command":
        return Command(args.ban_command, args.unban_command, args.action_timeout)
    return DryRun()
