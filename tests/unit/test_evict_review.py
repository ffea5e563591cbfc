"""Review findings on fipstop.evict (da3a015)."""

from __future__ import annotations

from pathlib import Path

from fipstop import _fips, evict
from fipstop.ring import DomainSnapshot, open_monitor


def _snap(shm: Path) -> DomainSnapshot:
    m = open_monitor("ev", shm)
    try:
        return DomainSnapshot.from_raw(m.snapshot(), m.header, path=str(shm / "fips.ev"))
    finally:
        m.close()


def _dom(shm: Path) -> _fips.Domain:
    return _fips.Domain("ev", shm, create=2, max_rings=2, max_consumers=4, ring_capacity=4096, max_record=100)


def test_a_stale_snapshot_of_a_recreated_domain_does_not_evict_another_consumer(tmp_path: Path) -> None:
    # The operator sees consumer "stuck" (slot 0, generation 1) ...
    dom = _dom(tmp_path)
    stuck = _fips.Consumer(dom, "stuck")
    seen_index = stuck.index
    snap = _snap(tmp_path)
    seen = snap.consumer_stat(seen_index)
    created = snap.created_realtime_ns
    # ... the service restarts before the y: the domain file is recreated, and an unrelated consumer
    # "archiver" registers first, in slot 0, with generation 1 (generations start again in a new file).
    stuck.close()
    dom.close()
    _fips.Domain.unlink("ev", shm_dir=str(tmp_path))
    dom = _dom(tmp_path)
    other = _fips.Consumer(dom, "archiver")
    try:
        now = _snap(tmp_path).consumer_stat(other.index)
        assert (other.index, now.generation) == (seen_index, seen.generation)  # the same (index, generation)
        ok, what = evict.evict(str(tmp_path / "fips.ev"), "ev", seen_index, seen.generation, "stuck", created)
        after = _snap(tmp_path).consumer_stat(other.index)
        # wanted: "archiver" is not evicted in the place of "stuck" (and no "evicted stuck" message)
        assert after.state == _fips.CONS_ACTIVE, f"archiver evicted instead of stuck: {ok} {what!r}"
        assert not ok and "recreated" in what
    finally:
        other.close()
        dom.close()
