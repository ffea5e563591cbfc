"""The ring probe: read-only snapshots of every libfips domain in a shm dir.

``RingProbe(shm_dir=..., domains=None).sample()`` returns a :class:`RawSample`:
the raw :class:`fipstop.ring.DomainSnapshot` of each domain (numpy views of
the counters libfips keeps in shared memory), the monotonic and realtime
clocks when the sample was taken, and one :class:`DomainError` per domain
that could not be read (bad file, wrong owner, vanished ...).  Nothing is
derived here: rates, lags and states come from ``fipstop.model.rings.derive_rings``, so a
recording of raw samples replays to the very same numbers.

The probe keeps one read-only ``Monitor`` per domain open between samples
and re-opens it when the file behind the name is replaced (a domain
re-created under the same name is a different inode).  It degrades instead of
failing: a missing shm dir makes ``available()`` return ``(False, reason)``
and ``sample()`` return an empty sample carrying that reason.

:meth:`RingProbe.tap` copies the newest records of one ring (for the ring
detail screen's message tap).  Payloads are returned as raw bytes: whoever
shows them escapes them (``fipstop.textsafe.escape_bytes``).

Never imports textual.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fipstop.probes import names

if TYPE_CHECKING:  # pragma: no cover
    from fipstop._fips import Monitor
    from fipstop.ring import DomainSnapshot

__all__ = ["DomainError", "RawSample", "RingProbe", "TapRecord", "TapResult"]

#: Bumped when a field of RawSample / DomainError changes meaning (the
#: recorder stores raw samples with this version).
SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class DomainError:
    """A domain the probe could not read, with a one-line reason."""

    domain: str
    reason: str


@dataclass(frozen=True, eq=False)
class RawSample:
    """What the ring probe read at one moment; nothing derived.

    ``domains`` are sorted by name.  ``unavailable`` is the probe-level
    reason when nothing could be read at all (shm dir missing), else "".
    """

    host: str
    shm_dir: str
    taken_mono_ns: int
    taken_realtime_ns: int
    domains: tuple[DomainSnapshot, ...] = ()
    errors: tuple[DomainError, ...] = ()
    unavailable: str = ""
    #: domains read, with a warning about them: a world-writable file (fipstop.ring.others_may_write)
    warnings: tuple[DomainError, ...] = ()
    probe: str = "ring"
    schema_version: int = SCHEMA_VERSION

    def domain(self, name: str) -> DomainSnapshot | None:
        for d in self.domains:
            if d.name == name:
                return d
        return None


@dataclass(frozen=True, slots=True)
class TapRecord:
    """A copy of one record (payload as raw bytes: escape before showing)."""

    seq: int
    ts_ns: int  # realtime
    flags: int
    lost: int  # records dropped just before this one
    payload: bytes


@dataclass(frozen=True)
class TapResult:
    """The newest records of one ring, oldest first."""

    domain: str
    ring: int
    records: tuple[TapRecord, ...] = ()
    lapped: bool = False  # the producer overwrote some while they were copied
    error: str = ""


@dataclass
class _Open:
    monitor: Monitor
    ident: tuple[int, int]  # (st_dev, st_ino) of the file when opened
    path: str = ""
    mapped_bytes: int = 0  # the file's size when mapped (what a truncation took away from)


class _Truncated(Exception):
    """A domain that shrank under its mapping; str() is the one line to report."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class RingProbe:
    """Samples every domain in ``shm_dir`` (or only ``domains``)."""

    name = names.RING

    def __init__(
        self,
        shm_dir: str | os.PathLike[str] | None = None,
        domains: list[str] | tuple[str, ...] | None = None,
        *,
        any_owner: bool = False,
        host: str | None = None,
    ) -> None:
        from fipstop.ring import resolve_shm_dir

        self.shm_dir = resolve_shm_dir(shm_dir)
        self.domains = tuple(domains) if domains is not None else None  # (): no domain at all
        self.any_owner = any_owner
        self.host = host if host is not None else socket.gethostname()
        self._open: dict[str, _Open] = {}
        # domains that shrank under their mapping: (st_dev, st_ino) -> the one line said,
        # repeated while that file stays; a file replaced under the name is opened afresh
        self._truncated: dict[str, tuple[tuple[int, int], str]] = {}
        self.last_sample: RawSample | None = None
        # sample() and tap() may run in different worker threads.
        self._lock = threading.Lock()

    # -- protocol ---------------------------------------------------------------

    def available(self) -> tuple[bool, str]:
        try:
            import fipstop._fips  # noqa: F401
        except ImportError as exc:
            return False, f"fipstop._fips is not built ({_one_line(exc)}): run `make lib`"
        if not os.path.exists(self.shm_dir):
            return False, f"{self.shm_dir}: no such directory"
        if not os.path.isdir(self.shm_dir):
            return False, f"{self.shm_dir}: not a directory"
        if not os.access(self.shm_dir, os.R_OK | os.X_OK):
            return False, f"{self.shm_dir}: permission denied"
        return True, ""

    def sample(self) -> RawSample:
        from fipstop.ring import list_domains, others_may_write

        with self._lock:
            ok, reason = self.available()
            if not ok:
                self._close_all()
                return self._empty(unavailable=reason)
            if self.domains is not None:
                wanted = list(self.domains)
                explicit = True
            else:
                try:
                    wanted = list_domains(self.shm_dir)
                except OSError as exc:
                    self._close_all()
                    return self._empty(unavailable=f"{self.shm_dir}: {exc.strerror or exc}")
                explicit = False
            snaps: list[DomainSnapshot] = []
            errors: list[DomainError] = []
            warnings: list[DomainError] = []
            for name in sorted(set(wanted)):
                try:
                    snap = self._snapshot(name)
                except FileNotFoundError:
                    self._forget(name)
                    if explicit:
                        errors.append(DomainError(name, "no such domain"))
                    continue
                except _Truncated as exc:
                    errors.append(DomainError(name, str(exc)))
                    continue
                except Exception as exc:  # FipsError, OSError, ValueError: report, go on
                    self._forget(name)
                    errors.append(DomainError(name, _one_line(exc) or type(exc).__name__))
                    continue
                snaps.append(snap)
                if (warning := others_may_write(snap.path)) is not None:
                    warnings.append(DomainError(name, warning))
            for gone in set(self._open) - set(wanted):
                self._forget(gone)
            for gone in set(self._truncated) - set(wanted):
                del self._truncated[gone]
            from fipstop import _fips

            sample = RawSample(
                host=self.host,
                shm_dir=self.shm_dir,
                taken_mono_ns=_fips.mono_ns(),
                taken_realtime_ns=_fips.now_ns(),
                domains=tuple(snaps),
                errors=tuple(errors),
                warnings=tuple(warnings),
            )
            self.last_sample = sample
            return sample

    def pids(self) -> set[int]:
        """Producer and consumer pids of the last sample (what the CPU probe follows)."""
        s = self.last_sample
        out: set[int] = set()
        for d in s.domains if s is not None else ():
            out.update(int(p) for p in d.rings["pid"][d.active_ring_indices()])
            out.update(int(p) for p in d.consumers["pid"][d.active_consumer_indices()])
        out.discard(0)
        return out

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        """Copy the newest ``max_records`` records of one ring (oldest first)."""
        with self._lock:
            try:
                entry = self._monitor(domain)
            except FileNotFoundError:
                self._forget(domain)
                return TapResult(domain, ring, error="no such domain")
            except Exception as exc:
                return TapResult(domain, ring, error=_one_line(exc) or type(exc).__name__)
            try:
                recs, lapped = entry.monitor.tap(int(ring), int(max_records))
            except Exception as exc:
                from fipstop.ring import is_truncated

                if is_truncated(exc):
                    self._cut(domain, entry)
                    return TapResult(domain, ring, error=self._truncated[domain][1])
                return TapResult(domain, ring, error=_one_line(exc) or type(exc).__name__)
        return TapResult(
            domain,
            ring,
            records=tuple(TapRecord(int(s), int(t), int(f), int(lost), bytes(p)) for s, t, f, lost, p in recs),
            lapped=bool(lapped),
        )

    def close(self) -> None:
        with self._lock:
            self._close_all()

    def __enter__(self) -> RingProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------

    def _empty(self, unavailable: str = "") -> RawSample:
        return RawSample(
            host=self.host,
            shm_dir=self.shm_dir,
            taken_mono_ns=time.monotonic_ns(),
            taken_realtime_ns=time.time_ns(),
            unavailable=unavailable,
        )

    def _monitor(self, name: str) -> _Open:
        """The open monitor for ``name``, (re)opened if the file changed."""
        from fipstop.ring import domain_path, open_monitor

        path = domain_path(name, self.shm_dir)
        st = os.stat(path)  # FileNotFoundError: the domain is gone
        ident = (st.st_dev, st.st_ino)
        cut = self._truncated.get(name)
        if cut is not None:
            if cut[0] == ident:
                raise _Truncated(cut[1])
            del self._truncated[name]  # replaced: a new domain under the name
        entry = self._open.get(name)
        if entry is not None and entry.ident != ident:
            self._forget(name)
            entry = None
        if entry is None:
            mon = open_monitor(name, self.shm_dir, any_owner=self.any_owner)
            entry = _Open(mon, ident, str(mon.path), int(mon.header.file_size))
            self._open[name] = entry
        return entry

    def _snapshot(self, name: str) -> DomainSnapshot:
        from fipstop.ring import DomainSnapshot, is_truncated, oldest_unreleased_ts

        entry = self._monitor(name)
        try:
            raw = entry.monitor.snapshot()
            return DomainSnapshot.from_raw(raw, entry.monitor.header, entry.path,
                                           oldest_unreleased_ts(entry.monitor, raw),
                                           records_no_ring=entry.monitor.no_ring())
        except Exception as exc:
            if not is_truncated(exc):
                raise
            self._cut(name, entry)
            raise _Truncated(self._truncated[name][1]) from None

    def _cut(self, name: str, entry: _Open) -> None:
        """``name`` shrank under its mapping (libfips gave zero pages and
        ETRUNC, not SIGBUS): close it and remember the one line to say while
        that file stays."""
        from fipstop.ring import truncated_line

        self._truncated[name] = (entry.ident, truncated_line(name, entry.path, entry.mapped_bytes))
        self._forget(name)

    def _forget(self, name: str) -> None:
        entry = self._open.pop(name, None)
        if entry is not None:
            try:
                entry.monitor.close()
            except Exception:
                pass

    def _close_all(self) -> None:
        for name in list(self._open):
            self._forget(name)
