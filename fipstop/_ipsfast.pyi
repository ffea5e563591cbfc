"""Type stub of ``fipstop._ipsfast`` (fipstop/csrc/ips_match.c): the hot path of
``fipstop ips`` - match records against compiled jails and count per address,
the GIL released while matching."""

from collections.abc import Iterable, Sequence
from typing import Any

from fipstop._fips import Batch

#: ``feed_lines`` flag: the line was truncated by libfips
REC_TRUNC: int

#: (jail, ip, first_ns, trigger_ns, hits, data) of an address that crossed maxretry; data is
#: ((name, value), ...) of the filter's data groups (<F-USER> ...) at the trigger, or None
Trigger = tuple[str, str, int, int, int, tuple[Any, ...] | None]
#: one compiled regex: (PCRE2 pattern for ASCII lines, for UTF-8 lines, group-name ids, alternative pairs)
Regex = tuple[str, str, Sequence[int], Sequence[tuple[int, int]]]

class Jail:
    """Compiled regexes (PCRE2 syntax, Fail2Ban tags already expanded) and the per-address table."""

    def __init__(
        self,
        name: str,
        failregex: Sequence[Any],
        ignoreregex: Sequence[Any] = (),
        prefregex: Any = None,
        maxretry: int = 5,
        findtime_s: float = 600.0,
        bantime_s: float = 600.0,
        max_tracked: int = 100_000,
        mode: str = "window",
        ignoreip: Sequence[tuple[bytes, int]] = (),
        skip_truncated: bool = False,
        v6_prefix: int = 128,
        names: Sequence[str] | None = None,
        dates: Any = None,
        maxlines: int = 1,
        max_sessions: int = ...,
        session_s: float = 300.0,
        date_any: Any = None,
        data: tuple[int, ...] | None = None,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def capacity(self) -> int:
        """Address table slots."""
    @property
    def stateful(self) -> bool:
        """maxlines > 1 or <F-MLFID> sessions."""
    def stats(self) -> dict[str, Any]:
        """Counters, copied under the lock."""
    def expire(self, now_ns: int, slots: int = 4096, /) -> None:
        """Drop expired entries (at most ``slots`` looked at)."""
    def unban(self, ip: str, /) -> bool:
        """Forget an address's state; True if it was tracked."""
    def match(self, line: bytes | memoryview, /) -> tuple[str, str | None]:
        """(result, ip) for one line; counts nothing."""
    def check(self, line: bytes, source: int = 0, ts_ns: int = 0, nodate: bool = False) -> dict[str, Any]:
        """What fail2ban-regex reports for one line (result, ip, host, regex, ignore, groups, date, line,
        prefregex); counts nothing."""

def feed(records: Batch, jails: Sequence[Jail], /) -> list[Trigger]: ...
def feed_lines(lines: Iterable[bytes], ts_ns: int, jails: Sequence[Jail], flags: int = 0, source: int = 0,
               /) -> list[Trigger]: ...
#: triggers are Trigger tuples (bans) or (jail, ip) pairs (unbans)
def format_events(triggers: Sequence[tuple[Any, ...]], kind_prefix: bytes, jail_json: dict[str, bytes], ban_ns: int,
                  tail: bytes, /) -> list[bytes]: ...
def available() -> tuple[bool, str]:
    """(ok, reason): can PCRE2 be loaded?"""
def search(ascii: str, utf: str, subject: bytes, /) -> list[tuple[int, int] | None] | None:
    """Group spans of the first match of a compiled pattern, or None."""
