"""What a source is, and the two things only some sources can do.

Every source (:class:`Source`) yields :class:`fipstop.model.snapshot.Frame`
objects and can tap the newest records of a ring; the views cannot tell a
live host from a recording.  Two capabilities are declared, never guessed:

- :class:`Seekable`: a recording can seek, draw a timeline and change speed;
  the dashboard checks for it once (``isinstance``, the protocol is
  runtime-checkable) and rings the bell for the replay keys otherwise;
- :class:`Profiling`: a live host can profile one of its processes; a source
  offers it as its ``profiling`` object, None when it cannot (a recording);
- :class:`FipsIpcTapping`: a live host can copy the newest records of a FIPS
  paper prototype ring (``--fipsipc``); a recording cannot.

``poll()``, ``seek()`` and every profiling call block (shared memory, a
file, bcc's compiler): the dashboard calls them from worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from fipstop.model.snapshot import Frame
from fipstop.probes.ring import TapResult

if TYPE_CHECKING:  # pragma: no cover
    from fipstop.probes.fipsipc import IpcTap
    from fipstop.profile.session import ProfileOptions, ProfileReport

__all__ = ["FipsIpcTapping", "Probe", "Profiling", "Seekable", "Source", "Timeline"]


class Probe(Protocol):
    """One sampler (DESIGN.md): its name keys its sample in a frame."""

    name: str

    def available(self) -> tuple[bool, str]: ...

    def sample(self) -> object: ...

    def close(self) -> None: ...


class Profiling(Protocol):
    """Profiles processes of the host a source samples (the Profile screen)."""

    def profile_start(self, pid: int, options: ProfileOptions | None = None) -> None:
        """Start profiling ``pid``; may take seconds (bcc compiles)."""

    def profile_poll(self, pid: int) -> ProfileReport | None:
        """The report of ``pid`` since its previous poll (None: not being profiled)."""

    def profile_stop(self, pid: int) -> None: ...

    def profile_phase(self, pid: int) -> str:
        """What a ``profile_start`` of ``pid`` in progress is doing ("compiling
        the eBPF program"), for a progress line; "" when none is."""


class Source(Protocol):
    """What the dashboard, the recorder and serve read from."""

    @property
    def interval_s(self) -> float:
        """Seconds between polls the reader should aim for."""

    @property
    def profiling(self) -> Profiling | None:
        """Who profiles this host's processes (None: this source cannot)."""

    def poll(self) -> Frame | None:
        """The next frame (blocking), or None when the source has no more."""

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        """The newest records of one ring (payloads raw: escape them)."""

    def close(self) -> None: ...


@runtime_checkable
class FipsIpcTapping(Protocol):
    """A source that can tap the FIPS paper's prototype rings (System V segments)."""

    def fipsipc_tap(self, shmid: int, ring: int, max_records: int = 32) -> IpcTap:
        """The newest committed records of ring ``ring`` of segment ``shmid`` (payloads raw: escape them)."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the timeline bar draws: the extent, where we are, and the marks."""

    first_t_ns: int
    last_t_ns: int
    at_t_ns: int
    marks: tuple[tuple[int, int], ...]  # (t_ns, MARK_* bits of fipstop.recording.marks)
    speed: float
    following: bool


@runtime_checkable
class Seekable(Protocol):
    """A source that plays a recording: seek, timeline, speed, follow."""

    @property
    def speed(self) -> float: ...

    @property
    def recorded_interval_s(self) -> float:
        """The interval the recording was made at (the header shows it)."""

    @property
    def following(self) -> bool:
        """True while ``poll`` returned None only because the file is still being written."""

    def seek(self, t_ns: int, *, history: int = 120) -> list[Frame]:
        """Move to the frame at ``t_ns``; the frames up to it, for the charts."""

    def timeline(self) -> Timeline: ...

    def faster(self, steps: int = 1) -> float:
        """Step the speed up (or down, ``steps`` < 0); the new speed."""

    def parse_time(self, text: str) -> int:
        """A time typed by the user (ISO 8601, HH:MM[:SS], +SECONDS) as realtime ns."""
