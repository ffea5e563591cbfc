"""The bans probe: follows the ban events an IPS publishes into a FIPS domain.

``fipstop ips`` writes one :class:`fipstop.bans.BanEvent` per ban / unban into
a domain of its own (``fipstop.bans.BANS_DOMAIN``).  This probe attaches
read-only (a ``Monitor``: it never registers, never releases, so it cannot
slow the IPS down) and, at every sample, copies the records committed since
the last sequence number it saw on each ring (``Monitor.tap``).  When the
IPS published more than the ring kept between two samples the probe was
lapped: it counts what it missed instead of pretending it saw everything.

The IPS's own cumulative counters (:class:`fipstop.bans.IpsTally`) come
through the same domain, on a ring of their own: the newest one is kept in
``BansSample.ips``, so totals, bans in force and time-to-ban percentiles are
exact even when the probe was lapped.  Rings with the fewest new records are
read first, so the tally's ring is never left out by the per-sample budget.

Records come from another process: each is decoded with
:func:`fipstop.bans.decode_record` and a record that is neither a ban event
nor a tally is counted in ``bad_records``, never raised.  The first time a ring is seen, the records
it still holds are read (bans that happened before the dashboard started).

Never imports textual.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fipstop.bans import BANS_AUTO, BANS_DOMAIN, BanEvent, IpsTally, decode_record
from fipstop.errors import one_line

if TYPE_CHECKING:  # pragma: no cover
    from fipstop._fips import Monitor

__all__ = ["BansProbe", "BansSample"]

#: at most this many bytes copied per tap (max records * max record size)
TAP_BUDGET_BYTES = 8 << 20
#: never more events in one sample than this (the rest count as missed)
MAX_EVENTS_PER_SAMPLE = 65536


@dataclass(frozen=True, eq=False)
class BansSample:
    """New ban events since the previous sample, plus cumulative counters.

    The same shape for every source (``fipstop-ips`` rings, ``fail2ban``):
    ``active`` is the number of bans in force when the source knows it
    itself (Fail2Ban's database), None when it must be derived from the
    ban / unban events.  ``unavailable`` says why nothing could be read.
    """

    source: str
    taken_mono_ns: int
    taken_realtime_ns: int
    events: tuple[BanEvent, ...] = ()
    records_seen: int = 0  # cumulative: records read (decoded or not)
    bad_records: int = 0  # cumulative: records that were not ban events
    missed_records: int = 0  # cumulative: published but overwritten before read
    records_published: int = 0  # cumulative: committed into the source (all rings)
    active: int | None = None
    unavailable: str = ""
    probe: str = "bans"
    #: the newest tally the IPS published (its own cumulative counters), None if none was seen
    ips: IpsTally | None = None
    #: where the source takes commands ('' when it has none or does not say): fail2ban-server's socket
    #: (fail2ban-client -s), ``fipstop ips``'s control socket (from its tally, ``ips.control``)
    control: str = ""


def _one_line(text: object) -> str:
    return one_line(text, 300)


#: ``BansProbe(domain=AUTO)``: find the bans domain without being told
AUTO = BANS_AUTO
#: what a bans domain is called: ``fipstop ips``'s default, or ``<domain>-bans`` (``fipstop demo``)
BANS_SUFFIX = "-bans"


class BansProbe:
    """Follows ``domain`` in ``shm_dir`` read-only.

    With ``domain=AUTO`` (plain ``fipstop`` and ``fipstop record`` when no
    ``--bans-domain`` is given) it follows ``fips-bans`` when it exists, else
    the first domain (by name) whose name ends in ``-bans``, looked up again at
    every sample, so a dashboard started beside ``fipstop demo`` shows its bans.
    """

    name = "bans"
    source = "fipstop-ips"

    def __init__(self, shm_dir: str | os.PathLike[str] | None = None, domain: str = BANS_DOMAIN, *,
                 any_owner: bool = False) -> None:
        from fipstop.ring import resolve_shm_dir

        self.shm_dir = resolve_shm_dir(shm_dir)
        self.auto = domain == AUTO
        self.domain = BANS_DOMAIN if self.auto else domain
        self.any_owner = any_owner
        self._mon: Monitor | None = None
        self._ident: tuple[int, int] | None = None
        self._next_seq: dict[tuple[int, int, int], int] = {}  # (slot, generation, created_ns) -> next seq
        self._seen = 0
        self._bad = 0
        self._missed = 0
        self._published_base = 0  # committed on rings that went away (their counters are gone)
        self._committed: dict[tuple[int, int, int], int] = {}
        self._tally: IpsTally | None = None
        self._lock = threading.Lock()

    def _path(self) -> str:
        from fipstop.ring import domain_path

        return str(domain_path(self.domain, self.shm_dir))

    def _resolve(self) -> None:
        """AUTO: the bans domain to follow now."""
        from fipstop.ring import list_domains

        if not self.auto:
            return
        try:
            names = list_domains(self.shm_dir)
        except OSError:
            return
        if BANS_DOMAIN in names:
            self.domain = BANS_DOMAIN
            return
        found = sorted(n for n in names if n.endswith(BANS_SUFFIX))
        if found:
            self.domain = found[0]

    def available(self) -> tuple[bool, str]:
        try:
            import fipstop._fips  # noqa: F401
        except ImportError as exc:
            return False, f"fipstop._fips is not built ({_one_line(exc)}): run `make lib`"
        self._resolve()
        if not os.path.exists(self._path()):
            if self.auto:
                return False, (f"no ban domain ({BANS_DOMAIN} or NAME{BANS_SUFFIX}) in {self.shm_dir} "
                               "(is `fipstop ips` running?)")
            return False, f"no ban domain {self.domain!r} in {self.shm_dir} (is `fipstop ips` running?)"
        return True, ""

    def _empty(self, reason: str) -> BansSample:
        return BansSample(self.source, time.monotonic_ns(), time.time_ns(), (), self._seen, self._bad,
                          self._missed, self._published(), None, reason, ips=self._tally)

    def _published(self) -> int:
        return self._published_base + sum(self._committed.values())

    def _reopen_if_needed(self) -> None:
        from fipstop.ring import open_monitor

        st = os.stat(self._path())
        ident = (st.st_dev, st.st_ino)
        if self._mon is not None and self._ident == ident:
            return
        self._close()
        self._mon = open_monitor(self.domain, self.shm_dir, any_owner=self.any_owner)
        self._ident = ident
        # a new domain under the same name: every ring starts over
        self._published_base += sum(self._committed.values())
        self._committed.clear()
        self._next_seq.clear()
        self._tally = None

    def sample(self) -> BansSample:
        with self._lock:
            ok, reason = self.available()
            if not ok:
                self._close()
                return self._empty(reason)
            try:
                self._reopen_if_needed()
                return self._read()
            except FileNotFoundError:
                self._close()
                return self._empty(f"ban domain {self.domain!r} vanished")
            except Exception as exc:  # a damaged or foreign file: say why, keep going
                self._close()
                return self._empty(_one_line(f"{self.domain}: {exc}") or type(exc).__name__)

    def _read(self) -> BansSample:
        from fipstop import _fips
        from fipstop.ring import DomainSnapshot

        mon = self._mon
        assert mon is not None
        snap = DomainSnapshot.from_raw(mon.snapshot(), mon.header, mon.path)
        rings = snap.rings
        per = 16 + ((int(mon.max_record) + 7) & ~7)
        cap = max(1, min(65536, TAP_BUDGET_BYTES // per))
        events: list[BanEvent] = []
        alive: set[tuple[int, int, int]] = set()
        order = sorted((i for i in range(rings.size) if int(rings[i]["state"]) != _fips.RING_FREE),
                       key=lambda i: int(rings[i]["records_committed"]) - self._next_seq.get(
                           (int(rings[i]["index"]), int(rings[i]["generation"]), int(rings[i]["created_ns"])), 0))
        for i in order:
            r = rings[i]
            key = (int(r["index"]), int(r["generation"]), int(r["created_ns"]))
            alive.add(key)
            committed = int(r["records_committed"])
            self._committed[key] = committed
            first_sight = key not in self._next_seq
            nxt = self._next_seq.get(key, 0)
            if committed <= nxt:
                continue
            want = committed - nxt
            budget = MAX_EVENTS_PER_SAMPLE - len(events)
            if budget <= 0:
                if not first_sight:
                    self._missed += want
                self._next_seq[key] = committed
                continue
            n = min(want * 2 + 64, cap, budget)
            recs, lapped = mon.tap(int(r["index"]), n)
            if not first_sight:
                self._missed += int(lapped)
            got_first = None
            last = nxt - 1
            for seq, _ts, _flags, _lost, payload in recs:
                if seq < nxt:
                    continue
                if got_first is None:
                    got_first = seq
                last = max(last, seq)
                self._seen += 1
                try:
                    rec = decode_record(payload)
                except ValueError:
                    self._bad += 1
                    continue
                if isinstance(rec, IpsTally):
                    if self._tally is None or (rec.started_ns, rec.taken_ns) >= (self._tally.started_ns,
                                                                                 self._tally.taken_ns):
                        self._tally = rec
                else:
                    events.append(rec)
            if not first_sight:
                if got_first is None:
                    self._missed += want
                else:
                    self._missed += max(0, got_first - nxt)
            self._next_seq[key] = max(last + 1, committed if got_first is None else last + 1)
        for gone in set(self._next_seq) - alive:
            self._next_seq.pop(gone, None)
            self._published_base += self._committed.pop(gone, 0)
        return BansSample(self.source, int(snap.taken_mono_ns), int(snap.taken_realtime_ns), tuple(events),
                          self._seen, self._bad, self._missed, self._published(), None, "", ips=self._tally,
                          control=self._tally.control if self._tally is not None else "")

    def _close(self) -> None:
        if self._mon is not None:
            try:
                self._mon.close()
            except Exception:
                pass
        self._mon = None
        self._ident = None

    def close(self) -> None:
        with self._lock:
            self._close()
