"""The raw input of the model: one poll of every probe, nothing derived.

A :class:`RawFrame` is what a recording stores and what :func:`fipstop.model.
snapshot.derive` reads: the ring probe's :class:`fipstop.probes.ring.RawSample`
and the other probes' raw samples keyed by probe name
(:mod:`fipstop.probes.names`).  A probe whose sample raised stands in the
frame as a :class:`ProbeFailure` with its one-line reason, so a frame always
comes and the views can say why a panel is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fipstop.probes.ring import RawSample

__all__ = ["ProbeFailure", "RawFrame"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ProbeFailure:
    """Stands in a frame for a probe whose sample raised (one line)."""

    probe: str
    reason: str
    taken_mono_ns: int = 0


@dataclass(frozen=True, eq=False)
class RawFrame:
    """The ring sample and the other probes' raw samples of one poll."""

    ring: RawSample
    aux: Mapping[str, Any] = field(default_factory=dict)

    def sample(self, probe: str, kind: type[T]) -> T | None:
        """The sample of ``probe`` when it is a ``kind`` (None when the probe
        did not run, failed, or a recording holds something else under its name)."""
        s = self.aux.get(probe)
        return s if isinstance(s, kind) else None

    def failure(self, probe: str) -> ProbeFailure | None:
        s = self.aux.get(probe)
        return s if isinstance(s, ProbeFailure) else None
