"""Ban actions: dry-run, an nftables set, a command hook.

An action never raises into the IPS: ``ban``/``unban`` return one result per
job, ``"ok"`` or a one-line error; the runner (:mod:`fipstop.ips.run`) counts
failures and retries with backoff.
"""

from __future__ import annotations

import ipaddress
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from fipstop.errors import FipsError

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

    @property
    def family(self) -> str:
        return "inet6" if ":" in self.ip else "inet"


def _one_line(text: str, limit: int = 160) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "\u2026"


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
    """Elements with a timeout in a named set; one ``nft -f -`` transaction per burst.

    The kernel removes an element when its timeout ends, so unban has nothing to
    do.  ``setup`` creates TABLE, SET (ipv4_addr) and SET6 (ipv6_addr, not for
    family ip) with ``flags timeout`` and, when it created the table, a chain
    that drops packets from both sets: without that a set bans nothing.
    """

    name = "nft"
    batches = True

    def __init__(self, spec: str, timeout_s: float = 10.0, nft: str = "nft") -> None:
        parts = spec.split(":")
        if len(parts) != 3 or not all(p and p.replace("_", "").replace("-", "").isalnum() for p in parts):
            raise FipsError(f"--nft-set {spec!r}: want FAMILY:TABLE:SET (letters, digits, _ and -)")
        self.family, self.table, self.set4 = parts
        if self.family not in ("inet", "ip", "ip6"):
            raise FipsError(f"--nft-set: family {self.family!r} must be inet, ip or ip6")
        self.set6 = self.set4 + "6"
        self.timeout_s = timeout_s
        self.nft = shutil.which(nft) or nft
        self.ready = False

    def _run(self, script: str) -> str:
        try:
            p = subprocess.run([self.nft, "-f", "-"], input=script, text=True, capture_output=True,
                               timeout=self.timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            return _one_line(f"nft: {exc}")
        if p.returncode != 0:
            return _one_line(f"nft exit {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
        return OK

    def setup(self) -> str:
        f, t = self.family, self.table
        try:
            exists = subprocess.run([self.nft, "list", "table", f, t], capture_output=True,
                                    timeout=self.timeout_s).returncode == 0
        except (OSError, subprocess.SubprocessError) as exc:
            return _one_line(f"nft: {exc}")
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
        r = self._run("\n".join(lines) + "\n")
        self.ready = r == OK
        return r

    def ban(self, jobs: list[BanJob]) -> list[str]:
        if not self.ready:
            r = self.setup()
            if r != OK:
                return [r] * len(jobs)
        v4 = [j for j in jobs if ":" not in j.ip]
        v6 = [j for j in jobs if ":" in j.ip]
        lines = []
        for s, group in ((self.set4, v4), (self.set6, v6)):
            if not group:
                continue
            elems = ", ".join(f"{ipaddress.ip_address(j.ip)} timeout {max(1, int(j.bantime_s * 1000))}ms"
                              for j in group)
            lines.append(f"add element {self.family} {self.table} {s} {{ {elems} }}")
        r = self._run("\n".join(lines) + "\n")
        if r != OK and "No such file" in r:
            self.ready = False  # table deleted under us: recreate on retry
        return [r] * len(jobs)  # one transaction: all or nothing

    def unban(self, jobs: list[BanJob]) -> list[str]:
        return [OK] * len(jobs)  # the element's timeout removed it


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


def make_action(args) -> DryRun | Nft | Command:
    if args.action == "nft":
        return Nft(args.nft_set, args.action_timeout)
    if args.action == "command":
        return Command(args.ban_command, args.unban_command, args.action_timeout)
    return DryRun()
