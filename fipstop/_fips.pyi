"""Typed stub of fipstop._fips, the CPython binding of libfips (fips.h)."""

import os
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Final, Literal, NamedTuple, Self, final

from typing_extensions import Buffer

StrPath = str | os.PathLike[str]
Payload = bytes | str | Buffer

# ---- errors -------------------------------------------------------------------

class FipsError(Exception):
    """A libfips error.  str(e) is a one-line reason, naming the file where
    there is one; ``code`` is the positive error code (an ``E*`` constant
    below, or an errno value such as ``errno.ENOENT``)."""

    code: int

EFULL: Final[int]
ETOOBIG: Final[int]
EMAGIC: Final[int]
EVERSION: Final[int]
ELAYOUT: Final[int]
ETRUNC: Final[int]
EOWNER: Final[int]
ENOTREADY: Final[int]
ENORING: Final[int]
ENOCONSUMER: Final[int]
EEVICTED: Final[int]
ECORRUPT: Final[int]
EBUSY: Final[int]
ECLOSED: Final[int]
EAGAIN: Final[int]
ELAPPED: Final[int]
ETORN: Final[int]
EREENTER: Final[int]

# ---- layout constants -----------------------------------------------------------

VERSION_MAJOR: Final[int]
VERSION_MINOR: Final[int]
MAGIC: Final[int]
LAYOUT_VERSION: Final[int]
HDR_SIZE: Final[int]
RING_CTL_SIZE: Final[int]
CONSUMER_SIZE: Final[int]
POS_SIZE: Final[int]
REC_HDR_SIZE: Final[int]
REC_ALIGN: Final[int]
NAME_MAX: Final[int]
THREAD_NAME_MAX: Final[int]
MAX_RINGS_LIMIT: Final[int]
MAX_CONSUMERS_LIMIT: Final[int]
MIN_CAPACITY: Final[int]
MAX_CAPACITY: Final[int]
RING_FREE: Final[int]
RING_ACTIVE: Final[int]
RING_CLOSED: Final[int]
CONS_FREE: Final[int]
CONS_JOINING: Final[int]
CONS_ACTIVE: Final[int]
CONS_EVICTED: Final[int]
EVICTED_BY_OPERATOR: Final[int]  # a consumer's evicted_by_ring after Domain.evict_consumer
CONS_CLOSED: Final[int]
REC_PAD: Final[int]
REC_TRUNC: Final[int]
REC_BIND_QUERY: Final[int]
REC_USER_MASK: Final[int]
REC_LEN_MASK: Final[int]

# (field name, byte offset, numpy type string such as "<u8" or "S32"), in
# declaration order; fipstop.ring builds numpy dtypes from them.
RING_STAT_FIELDS: Final[list[tuple[str, int, str]]]
RING_STAT_SIZE: Final[int]
CONSUMER_STAT_FIELDS: Final[list[tuple[str, int, str]]]
CONSUMER_STAT_SIZE: Final[int]
POS_STAT_FIELDS: Final[list[tuple[str, int, str]]]
POS_STAT_SIZE: Final[int]

# ---- header ----------------------------------------------------------------------

@final
class Header(NamedTuple):
    """A copy of a domain header (sizes in bytes, times in ns)."""

    name: str
    version: int
    hdr_size: int
    file_size: int
    max_rings: int
    max_consumers: int
    ring_capacity: int
    max_record: int
    ready: int
    ring_table_off: int
    consumer_table_off: int
    pos_table_off: int
    data_off: int
    created_realtime_ns: int
    created_mono_ns: int
    grace_ns: int
    creator_pid: int
    flags: int

# ---- domain ----------------------------------------------------------------------

@final
class Domain:
    """A domain opened read-write for producing and consuming.

    ``create``: False = must exist, True = create if absent, 2 = must create.
    ``close()`` closes the consumers opened on it and the calling thread's
    ring; unmapping waits until no record view is alive.
    """

    def __new__(
        cls,
        name: str,
        shm_dir: StrPath | None = None,
        *,
        create: bool | Literal[0, 1, 2] = True,
        max_rings: int = 256,
        max_consumers: int = 16,
        ring_capacity: int = 1 << 20,
        max_record: int = 4096,
        grace_s: float = 5.0,
        mode: int = 0o640,
        gid: int = -1,
        block_us: int = 0,
        any_owner: bool = False,
    ) -> Self: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    @classmethod
    def unlink(cls, name: str, shm_dir: StrPath | None = None) -> None: ...
    def evict_consumer(self, index: int, generation: int, /) -> None:
        """Evict consumer `index` if still ACTIVE with `generation` (FipsError code ESRCH otherwise)."""
    @property
    def header(self) -> Header: ...
    @property
    def name(self) -> str: ...
    @property
    def max_rings(self) -> int: ...
    @property
    def max_consumers(self) -> int: ...
    @property
    def ring_capacity(self) -> int: ...
    @property
    def max_record(self) -> int: ...
    @property
    def closed(self) -> bool: ...

# ---- producer --------------------------------------------------------------------

@final
class Producer:
    """Logs into the calling thread's own ring (created on first use, closed
    when the thread exits); one Producer may be shared by several threads."""

    def __new__(cls, domain: Domain) -> Self: ...
    def log(self, data: Payload, /) -> bool:
        """False if the record was dropped (ring full; counted).  Raises
        FipsError(code=ETOOBIG) if longer than max_record (never truncates)."""
    def log_batch(self, records: Iterable[Payload], /) -> int:
        """Log with one commit; returns how many were logged."""
    def set_name(self, name: str, /) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    @property
    def ring(self) -> int:
        """The calling thread's ring index (created if needed)."""
    @property
    def domain(self) -> Domain: ...
    @property
    def closed(self) -> bool: ...

# ---- consumer --------------------------------------------------------------------

@final
class Record:
    """One record of a Batch.  Supports the buffer protocol (``bytes(rec)``
    copies, ``memoryview(rec)`` is zero-copy).  Views are valid until the batch
    is released; afterwards the producer may overwrite the bytes."""

    @property
    def seq(self) -> int: ...
    @property
    def ts_ns(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def lost(self) -> int:
        """Records dropped just before this one."""
    @property
    def len(self) -> int: ...
    @property
    def data(self) -> memoryview:
        """Zero-copy, read-only view of the payload in the shared ring."""
    @property
    def truncated(self) -> bool: ...
    def tobytes(self) -> bytes: ...
    def __bytes__(self) -> bytes: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class Batch:
    """Records claimed by Consumer.read().  A batch dropped unreleased is
    released when it is garbage-collected; a released batch refuses iteration."""

    @property
    def ring(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def first_seq(self) -> int: ...
    @property
    def next_seq(self) -> int: ...
    @property
    def lost(self) -> int: ...
    @property
    def released(self) -> bool: ...
    @property
    def consumer(self) -> Consumer: ...
    def __iter__(self) -> Iterator[Record]: ...
    def __len__(self) -> int: ...
    def payloads(self) -> list[bytes]: ...
    def release(self) -> None:
        """Release the batch.  Raises FipsError(code=EEVICTED) if the consumer
        was evicted while holding it (its records were intact: reopen the
        consumer by name to rejoin), or FipsError(code=ETORN) if the producer
        may have overwritten it meanwhile: discard whatever was parsed from
        its records.  Check before acting on them.  A batch released while
        another reader thread still holds an earlier batch of its ring is
        queued: it takes effect when that one is released, and is undone with
        it if the consumer is evicted first (fips_consumer_release returns 1)."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

@final
class BatchIterator(Iterator[Record]):
    def __next__(self) -> Record: ...

@final
class Consumer:
    """A named consumer: sees every record, at its own pace.  Opening a name
    that is registered to a dead process (or that this process detached)
    resumes it; a name a live handle holds raises FipsError(code=EBUSY)."""

    def __new__(cls, domain: Domain, name: str) -> Self: ...
    def read(self, max: int = 256) -> Batch | None: ...
    def release(self, batch: Batch, /) -> None:
        """Same as batch.release(), including its EEVICTED / ETORN errors."""
    def heartbeat(self) -> None: ...
    def close(self) -> None:
        """Unregister (state CLOSED)."""
    def detach(self) -> None:
        """Drop the handle but stay registered, as a crash would."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    @property
    def index(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def domain(self) -> Domain: ...
    @property
    def closed(self) -> bool: ...

# ---- monitor ---------------------------------------------------------------------

RawSnapshot = tuple[int, int, bytes, bytes, bytes]

@final
class Monitor:
    """Read-only (PROT_READ) attach; never registers or writes.  Give either
    ``name`` (+ ``shm_dir``) or ``path``."""

    def __new__(
        cls,
        name: str | None = None,
        shm_dir: StrPath | None = None,
        path: StrPath | None = None,
        *,
        any_owner: bool = False,
    ) -> Self: ...
    def snapshot(self) -> RawSnapshot:
        """(taken_realtime_ns, taken_mono_ns, rings, consumers, pos): raw
        fips_ring_stat[max_rings], fips_consumer_stat[max_consumers],
        fips_pos_stat[max_consumers][max_rings]; see fipstop.ring."""
    def no_ring(self) -> int:
        """The header's records_no_ring now (records dropped because the ring
        table was full); ``header`` is a copy taken at attach."""
    def tap(self, ring: int, max: int = 16) -> tuple[list[tuple[int, int, int, int, bytes]], int]:
        """([(seq, ts_ns, flags, lost, payload), ...] oldest first, lapped)."""
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    def _mapping_address(self) -> int: ...
    @property
    def header(self) -> Header: ...
    @property
    def name(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def max_rings(self) -> int: ...
    @property
    def max_consumers(self) -> int: ...
    @property
    def ring_capacity(self) -> int: ...
    @property
    def max_record(self) -> int: ...
    @property
    def closed(self) -> bool: ...

# ---- functions -------------------------------------------------------------------

def shm_dir(dir: StrPath | None = None) -> str: ...
def strerror(code: int, /) -> str: ...
def now_ns() -> int: ...
def mono_ns() -> int: ...
def validate_header(data: Buffer, file_size: int, /) -> None: ...
def format_bind_query(data: Buffer, /) -> bytes | None: ...
