"""Hostile domain files: validate_header and Monitor open + snapshot + tap must
reject or survive anything, never crash the interpreter.

The in-process tests run the open for real (a crash would take pytest down
and fail loudly); one test also replays a batch of mutated files in a child
process so that a segfault is reported as such rather than as a vanished run.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fipstop
from fipstop import _fips, ring
from fipstop._fips import Consumer, Domain, FipsError, Monitor, Producer

PKG_PARENT = str(Path(fipstop.__file__).parent.parent)
HDR_FIELDS = 176  # bytes of the header that carry fields

# One valid domain image, built once per session into a private dir.
_TEMPLATE: dict[str, bytes] = {}


def template(tmp_root: Path) -> bytes:
    if "img" not in _TEMPLATE:
        d = tmp_root / "template"
        d.mkdir(exist_ok=True)
        with Domain("tpl", d, max_rings=2, max_consumers=2, ring_capacity=4096, max_record=512) as dom:
            p = Producer(dom)
            c = Consumer(dom, "c")
            for i in range(30):
                p.log(b"record %d " % i + b"x" * (i * 7 % 90))
            b = c.read(5)
            assert b is not None
            c.release(b)
            c.detach()  # keep it ACTIVE in the file
        _TEMPLATE["img"] = (d / "fips.tpl").read_bytes()
    return _TEMPLATE["img"]


@pytest.fixture(scope="module")
def tpl(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return template(tmp_path_factory.mktemp("fuzz"))


def check_validate(data: bytes, file_size: int) -> None:
    try:
        _fips.validate_header(data, file_size)
    except FipsError as e:
        assert e.code > 0 and str(e) and "\n" not in str(e)


def exercise_file(path: Path) -> None:
    """Open read-only, snapshot, tap every ring, derive: errors are fine."""
    try:
        m = Monitor(path=str(path))
    except FipsError as e:
        assert str(path) in str(e) and "\n" not in str(e)
        return
    with m:
        s = ring.take_snapshot(m)
        s.fill_fraction()
        s.lag_records()
        s.heartbeat_age_ns()
        s.ring_stats()
        s.consumer_stats()
        for r in range(s.max_rings):
            try:
                recs, lapped = m.tap(r, 64)
            except FipsError:
                continue
            for _seq, _ts, _flags, _lost, payload in recs:
                assert len(payload) <= s.max_record_bytes


mutation = st.tuples(
    st.one_of(st.integers(0, HDR_FIELDS - 1), st.integers(0, 1 << 16)),  # offset (header biased)
    st.binary(min_size=1, max_size=8),
)


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=5000), file_size=st.integers(0, (1 << 64) - 1))
def test_validate_header_random(data: bytes, file_size: int) -> None:
    check_validate(data, file_size)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(muts=st.lists(mutation, max_size=6), size_delta=st.one_of(st.just(0), st.integers(-5000, 5000)))
def test_validate_header_mutated(tpl: bytes, muts: list[tuple[int, bytes]], size_delta: int) -> None:
    img = bytearray(tpl[: _fips.HDR_SIZE])
    for off, b in muts:
        if off < len(img):
            img[off : off + len(b)] = b[: len(img) - off]
    check_validate(bytes(img), max(len(tpl) + size_delta, 0))


def test_validate_header_valid_and_exact(tpl: bytes) -> None:
    _fips.validate_header(tpl[: _fips.HDR_SIZE], len(tpl))
    _fips.validate_header(tpl, len(tpl))
    with pytest.raises(FipsError) as ei:
        _fips.validate_header(tpl[:100], 100)
    assert ei.value.code == _fips.ETRUNC and "(memory)" in str(ei.value)


def write_mutant(path: Path, tpl: bytes, muts: list[tuple[int, bytes]], size: int | None) -> None:
    img = bytearray(tpl)
    for off, b in muts:
        if off < len(img):
            img[off : off + len(b)] = b[: len(img) - off]
    if size is not None:
        img = img[:size] if size <= len(img) else img + bytes(size - len(img))
    path.write_bytes(bytes(img))


# Offsets that matter beyond the header: ring table (4096 + 256*r), consumer
# table, pos table, ring data.  Mutations land anywhere in the file.
file_mutation = st.tuples(
    st.one_of(
        st.integers(0, HDR_FIELDS - 1),
        st.integers(4096, 4096 + 2 * 256 - 1),  # ring controls: head, floor, reserved ...
        st.integers(0, 1 << 16),  # anywhere, data included
    ),
    st.one_of(
        st.binary(min_size=1, max_size=8),
        st.sampled_from([b"\xff" * 8, b"\x00" * 8, struct.pack("<Q", 1 << 63), struct.pack("<I", 0xFFFFFF)]),
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    muts=st.lists(file_mutation, max_size=8),
    size=st.one_of(st.none(), st.integers(0, 40000)),
)
def test_monitor_open_snapshot_mutated_files(
    tpl: bytes, tmp_path: Path, muts: list[tuple[int, bytes]], size: int | None
) -> None:
    path = tmp_path / "fips.fz"
    write_mutant(path, tpl, muts, size)
    exercise_file(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=9000), size=st.one_of(st.none(), st.integers(0, 1 << 20)))
def test_monitor_open_random_files(tmp_path: Path, data: bytes, size: int | None) -> None:
    path = tmp_path / "fips.rnd"
    path.write_bytes(data)
    if size is not None:
        os.truncate(path, size)
    exercise_file(path)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(muts=st.lists(file_mutation, min_size=1, max_size=8))
def test_consumer_on_hostile_ring_contents(tpl: bytes, tmp_path: Path, muts: list[tuple[int, bytes]]) -> None:
    """A consumer reading a file whose ring contents were tampered with gets
    records or FipsError, never a crash or a view outside the ring."""
    d = tmp_path / "cons"
    d.mkdir(exist_ok=True)
    path = d / "fips.tpl"
    # keep the header valid: consumers open read-write and validate it
    write_mutant(path, tpl, [(o, b) for o, b in muts if o >= HDR_FIELDS], None)
    try:
        dom = Domain("tpl", d, create=False)
    except FipsError:
        return
    with dom:
        try:
            c = Consumer(dom, "c")  # resumes the detached entry
        except FipsError:
            return
        for _ in range(50):
            try:
                b = c.read(16)
            except FipsError:
                break
            if b is None:
                break
            try:
                for r in b:
                    assert r.len <= dom.max_record
                    bytes(r)
                b.payloads()
            except FipsError:
                pass
            c.release(b)


def test_mutated_files_in_a_child_process(tpl: bytes, tmp_path: Path) -> None:
    """A few hundred deterministic mutants opened in a child: a segfault there
    shows up as a signal, not as a dead test run."""
    import random

    rnd = random.Random(1234)
    files = []
    for i in range(300):
        muts = [(rnd.choice([rnd.randrange(HDR_FIELDS), rnd.randrange(4096, 4608), rnd.randrange(len(tpl))]),
                 rnd.randbytes(rnd.randint(1, 8))) for _ in range(rnd.randint(1, 6))]
        size = rnd.choice([None, None, rnd.randrange(0, len(tpl) + 5000)])
        p = tmp_path / f"fips.m{i}"
        write_mutant(p, tpl, muts, size)
        files.append(str(p))
    code = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        sys.path.insert(0, sys.argv[1])
        from test_ring_fuzz import exercise_file
        for p in sys.argv[2:]:
            exercise_file(Path(p))
        print("ok", len(sys.argv) - 2)
        """
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code, str(Path(__file__).parent), *files],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != -signal.SIGSEGV, "segfault while opening mutated files"
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok 300"
