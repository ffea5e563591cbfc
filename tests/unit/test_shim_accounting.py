"""The syslog shim's accounting (issue 17, item 12): every syslog() call is a delivered record or a
counted drop, with more threads than the domain has rings, and when the domain file is removed
while the program logs.

The oracle is the number of calls the test makes the program do; "delivered" is what a consumer of
the test's own reads, the drops are the ring counters and the header's records_no_ring, read from
the file at its documented offset (docs/ring-format.md: 176), not through the binding.
"""

from __future__ import annotations

import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest
from shimprog import shim_env

from fipstop._fips import Consumer, Domain
from fipstop.ring import open_monitor, snapshot_domain, take_snapshot

NO_RING_OFFSET = 176  # struct fips_layout_header.records_no_ring


def no_ring(shm: Path, name: str = "syslog") -> int:
    with open(shm / f"fips.{name}", "rb") as f:
        f.seek(NO_RING_OFFSET)
        return struct.unpack("<Q", f.read(8))[0]


class Reader:
    """A consumer draining in a thread while the program runs (so rings are drained and reused)."""

    def __init__(self, dom: Domain, name: str = "test") -> None:
        self.cons = Consumer(dom, name)
        self.got = 0
        self.payloads: list[bytes] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while True:
            b = self.cons.read(4096)
            if b is None:
                if self._stop.is_set():
                    b = self.cons.read(4096)
                    if b is None:
                        return
                else:
                    time.sleep(0.001)
                    continue
            self.got += b.count
            if len(self.payloads) < 8:
                self.payloads.extend(r.tobytes() for r in list(b)[:8])
            b.release()

    def stop(self) -> int:
        self._stop.set()
        self._t.join(30)
        self.cons.close()
        return self.got


def counters(shm: Path, name: str = "syslog") -> tuple[int, int, int]:
    snap = snapshot_domain(name, shm)
    return (int(snap.rings["records_committed"].sum()), int(snap.rings["records_dropped"].sum()),
            no_ring(shm, name))


def ring_counters(mon) -> tuple[int, int]:
    """Committed and dropped of a domain through a monitor mapped before its file was removed."""
    snap = take_snapshot(mon)
    return int(snap.rings["records_committed"].sum()), int(snap.rings["records_dropped"].sum())


@pytest.mark.parametrize("wave", [64, 4, 1], ids=["all-alive", "waves-of-4", "one-at-a-time"])
def test_64_threads_on_4_rings_every_call_delivered_or_counted(progs: dict[str, Path], shm_dir: Path,
                                                               wave: int) -> None:
    nthreads, nrec = 64, 5000
    dom = Domain("syslog", shm_dir, create=2, max_rings=4, max_consumers=4, ring_capacity=1 << 16,
                 max_record=4096)
    reader = Reader(dom)
    try:
        r = subprocess.run([str(progs["fortify"]), "waves", str(nthreads), str(nrec), str(wave)],
                           env=shim_env(shm_dir), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        time.sleep(0.2)
        delivered = reader.stop()
        committed, dropped, noring = counters(shm_dir)
        offered = nthreads * nrec
        assert delivered == committed  # every committed record reached the consumer
        assert offered == delivered + dropped + noring, (offered, delivered, dropped, noring)
        # the shim's own counter (fips_syslog_dropped) holds only what no domain counter holds: the
        # no-ring records are in the header alone, so the four counters add up without double counting
        assert r.stdout.strip().splitlines()[-1] == "dropped=0"
        if wave == 64:
            assert noring > 0  # 60 threads had no ring: the case is exercised
    finally:
        dom.close()


def _many(prog: Path, shm: Path, n: int, us: int, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(prog), "many", str(n), str(us)], env=shim_env(shm, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_domain_replaced_while_logging_moves_to_the_new_file(progs: dict[str, Path], shm_dir: Path) -> None:
    """The file is removed and a new domain made under its name while the program logs: the shim
    notices (every 64th call, at most once a second) and logs into the new one; old mapping
    (read through the test's own, still mapped) + new domain + drops = the calls."""
    n = 4000
    old = Domain("syslog", shm_dir, create=2, ring_capacity=1 << 20, max_record=512)
    r_old = Reader(old, "old")
    mon = open_monitor("syslog", shm_dir)  # the old domain's counters, read after its file is gone
    p = _many(progs["fortify"], shm_dir, n, 700)
    try:
        time.sleep(0.6)
        (shm_dir / "fips.syslog").unlink()
        new = Domain("syslog", shm_dir, create=2, ring_capacity=1 << 20, max_record=512)
        r_new = Reader(new, "new")
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        time.sleep(0.2)
        got_old, got_new = r_old.stop(), r_new.stop()
        c_new, d_new, nr_new = counters(shm_dir)
        oc, od = ring_counters(mon)
        assert got_new > n // 4, (got_old, got_new)  # it moved, within about a second
        assert got_old == oc and got_new == c_new
        assert n == got_old + got_new + od + d_new + nr_new, (got_old, got_new, od, d_new, nr_new)
        assert all(x.startswith(b"<14>") and b"many " in x for x in r_new.payloads)
        new.close()
    finally:
        if p.poll() is None:
            p.kill()
        mon.close()
        old.close()


def test_domain_removed_while_logging_is_created_again(progs: dict[str, Path], shm_dir: Path) -> None:
    """FIPS_SYSLOG_MISSING=create: the shim makes a new domain where the old one was removed (a
    consumer joining it later finds the records kept for it)."""
    n = 4000
    old = Domain("syslog", shm_dir, create=2, ring_capacity=1 << 20, max_record=512)
    r_old = Reader(old, "old")
    mon = open_monitor("syslog", shm_dir)  # the old domain's counters, read after its file is gone
    p = _many(progs["fortify"], shm_dir, n, 700, FIPS_RING_SIZE=str(1 << 20))
    try:
        time.sleep(0.5)
        (shm_dir / "fips.syslog").unlink()
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        got_old = r_old.stop()
        assert (shm_dir / "fips.syslog").is_file()  # made again by the shim
        new = Domain("syslog", shm_dir, create=False)
        try:
            assert new.header.created_realtime_ns != old.header.created_realtime_ns
            r_new = Reader(new, "late")
            time.sleep(0.3)
            got_new = r_new.stop()
            c_new, d_new, nr_new = counters(shm_dir)
            assert got_new == c_new and got_new > n // 4
            assert n == got_old + got_new + d_new + nr_new + ring_counters(mon)[1]
        finally:
            new.close()
    finally:
        if p.poll() is None:
            p.kill()
        mon.close()
        old.close()


def test_domain_removed_in_drop_mode_counts_each_call(progs: dict[str, Path], shm_dir: Path) -> None:
    """FIPS_SYSLOG_MISSING=drop: once the shim sees the file gone, each call is a counted drop
    (fips_syslog_dropped), not a record in a mapping no one can open."""
    n = 4000
    old = Domain("syslog", shm_dir, create=2, ring_capacity=1 << 20, max_record=512)
    r_old = Reader(old, "old")
    mon = open_monitor("syslog", shm_dir)  # the old domain's counters, read after its file is gone
    p = _many(progs["fortify"], shm_dir, n, 700, missing="drop")
    try:
        time.sleep(0.5)
        (shm_dir / "fips.syslog").unlink()
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        got_old = r_old.stop()
        shim_dropped = int(out.strip().splitlines()[-1].split("=")[1])
        assert not (shm_dir / "fips.syslog").exists()
        assert shim_dropped > n // 4
        assert n == got_old + shim_dropped + ring_counters(mon)[1]
    finally:
        if p.poll() is None:
            p.kill()
        mon.close()
        old.close()
