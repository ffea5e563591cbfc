"""Evicting a stuck consumer by hand (fipstop.evict, the dashboard's Ctrl-K / F9), on real domains.

The oracle is the ring itself: a consumer that heartbeats but never reads holds a full ring, so the producer's
records are refused (it is told so); after the eviction the producer's records are accepted again, the consumer's
own next read says EEVICTED, the domain's snapshot says EVICTED by an operator, and its rejoin by name counts as lost
exactly the records it never got.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fipstop import _fips, evict
from fipstop.outputs.jsondoc import domain_json
from fipstop.ring import DomainSnapshot, open_monitor


def _stuck(shm: Path, grace_s: float = 3600.0):
    dom = _fips.Domain("ev", shm, create=2, max_rings=2, max_consumers=4, ring_capacity=4096, max_record=100,
                       grace_s=grace_s)
    cons = _fips.Consumer(dom, "stuck")
    prod = _fips.Producer(dom)
    kept = 0
    while prod.log(b"x" * 100):
        kept += 1
    cons.heartbeat()
    assert not prod.log(b"x" * 100)  # held by a live consumer: no producer evicts it (grace 1 h)
    return dom, cons, prod, kept


def _snap(shm: Path) -> DomainSnapshot:
    m = open_monitor("ev", shm)
    try:
        return DomainSnapshot.from_raw(m.snapshot(), m.header, path=str(shm / "fips.ev"))
    finally:
        m.close()


def test_evict_a_consumer_that_heartbeats_but_holds_a_full_ring(tmp_path: Path) -> None:
    dom, cons, prod, kept = _stuck(tmp_path)
    try:
        s = _snap(tmp_path)
        c = s.consumer_stat(cons.index)
        assert c.state == _fips.CONS_ACTIVE
        ok, what = evict.evict(str(tmp_path / "fips.ev"), "ev", cons.index, c.generation + 1, "stuck")
        assert not ok and "left or was replaced" in what  # not the one we saw
        ok, what = evict.evict(str(tmp_path / "fips.ev"), "ev", cons.index, c.generation, "stuck")
        assert ok, what
        assert "evicted stuck from ev" in what
        ok, what = evict.evict(str(tmp_path / "fips.ev"), "ev", cons.index, c.generation, "stuck")
        assert not ok and "left or was replaced" in what  # once
        after = _snap(tmp_path).consumer_stat(cons.index)
        assert after.state == _fips.CONS_EVICTED
        assert after.evicted_by_ring == _fips.EVICTED_BY_OPERATOR and after.evicted_ns > 0
        doc = next(x for x in domain_json(_snap(tmp_path))["consumers"] if x["index"] == cons.index)
        assert doc["evicted_by"] == "operator" and doc["evicted_by_ring"] is None  # never the sentinel
        # the ring lets go: logging goes on
        extra = 0
        for _ in range(kept):
            extra += bool(prod.log(b"y" * 100))
        assert extra == kept
        with pytest.raises(_fips.FipsError) as ei:
            cons.read()
        assert ei.value.code == _fips.EEVICTED
        cons.close()
        again = _fips.Consumer(dom, "stuck")  # rejoin by name
        got = told = 0
        while (b := again.read(1000)) is not None:
            got += len(b)
            told += b.lost
            again.release(b)
        lost_seen = _snap(tmp_path).pos_stat(again.index, prod.ring).lost_seen
        assert got + lost_seen - told == 2 * kept  # every record: read, or counted lost
        assert lost_seen - told >= kept  # what it held was overwritten
        again.close()
    finally:
        prod.close()
        dom.close()


def test_evict_refuses_without_write_access(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run the evicting process as nobody")
    shm = tmp_path / "shm"
    shm.mkdir()
    shm.chmod(0o755)
    tmp_path.chmod(0o755)
    dom, cons, prod, _kept = _stuck(shm)
    try:
        os.chmod(shm / "fips.ev", 0o644)  # others may read (a monitor), not write
        gen = _snap(shm).consumer_stat(cons.index).generation
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the evicting process, as nobody (the interpreter and fipstop already loaded)
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                ok, what = evict.evict(str(shm / "fips.ev"), "ev", cons.index, gen, "stuck")
                os.write(w, f"{int(ok)} {what}".encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            answer = f.read().decode()
        os.waitpid(pid, 0)
        assert answer == (f"0 no write access to {shm / 'fips.ev'}: evicting needs a producer's rights "
                          "on the domain")
        assert _snap(shm).consumer_stat(cons.index).state == _fips.CONS_ACTIVE  # nothing changed
    finally:
        cons.close()
        prod.close()
        dom.close()


def test_evict_refuses_a_path_that_is_not_the_domain_and_a_missing_domain(tmp_path: Path) -> None:
    ok, what = evict.evict(str(tmp_path / "fips.other"), "ev", 0, 1, "c")
    assert not ok and what == f"{tmp_path / 'fips.other'}: not the file of domain ev"
    ok, what = evict.evict(str(tmp_path / "fips.ev"), "ev", 0, 1, "c")
    assert not ok and what.startswith(f"cannot open {tmp_path / 'fips.ev'} for writing")


def test_refusal_reasons() -> None:
    assert evict.refusal(replay=True, health="alive") == "a recording: nothing to evict (this is the past)"
    assert evict.refusal(replay=False, health="evicted") == "it is evicted already"
    assert evict.refusal(replay=False, health="closed") == "it is closed already"
    assert evict.refusal(replay=False, health="stale") == ""
    assert evict.refusal(replay=False, health="alive") == ""
