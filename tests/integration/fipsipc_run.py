"""Running the FIPS paper's prototype producer and consumer, and reading their own reports.

The prototype's test programs (src/programs/test_fips_buf_{producer,consumer}.c,
16 threads each) report on their own:

- the producer, on stderr, every time a ring is full: ``get write buffer
  failed 13 tries N thread_index: T`` - thread T (which owns writer segment T)
  has committed N batches of 10 records so far;
- the consumer, on stdout, ``read N`` after every batch of 10 it released
  (one line per batch, any thread), ``attach 0`` per thread.

:class:`Run` starts them on a configuration of its own (a tmp shm_name file,
so its ftok key is unique), keeps the last of those reports in a thread per
pipe, and removes the segment and the semaphore the prototype leaves behind.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from fipstop.bench.fipsipc_proto import build_program, write_config
from fipstop.model.fipsipc import derive_fipsipc
from fipstop.probes.fipsipc import FipsIpcProbe, ftok, read_sysvipc

BATCH = 10
THREADS = 16
_FAILED = re.compile(rb"get write buffer failed \d+ tries (\d+) thread_index: (\d+)")

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]


class Reports:
    """Reads a program's pipe in a thread and keeps what its reports say."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.lock = threading.Lock()
        self.tries: dict[int, int] = {}  # producer thread -> batches committed, at its last full ring
        self.failed_at: dict[int, float] = {}
        self.reads = 0  # consumer "read" lines: batches released
        self.attached = 0
        self._t = threading.Thread(target=self._run, args=(pipe,), daemon=True)
        self._t.start()

    def _run(self, pipe: IO[bytes]) -> None:
        for line in pipe:
            with self.lock:
                if line.startswith(b"read "):
                    self.reads += 1
                elif line.startswith(b"attach "):
                    self.attached += 1
                else:
                    m = _FAILED.match(line)
                    if m:
                        t = int(m.group(2))
                        self.tries[t] = int(m.group(1))
                        self.failed_at[t] = time.monotonic()


class Run:
    """One prototype segment with its producer and consumer processes."""

    def __init__(self, tmp: Path, *, exp: int = 12, line_size: int = 30, overwrite: bool = False) -> None:
        self.dir = tmp
        self.shm_name = str(tmp / f"fipsipc-{os.getpid()}-{tmp.name}")
        Path(self.shm_name).touch()
        self.slots = 1 << exp
        self.conf = write_config(tmp / "fips_buf.conf", self.shm_name, line_size=line_size, line_count_exp=exp,
                                 segments=THREADS, readers=2, reader_threads=THREADS, overwrite=overwrite)
        self.key = ftok(self.shm_name)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.reports: dict[str, Reports] = {}

    def start(self, which: str) -> None:
        binary, why = build_program(which)
        assert binary is not None, why
        env = {**os.environ, "FIPS_BUF_CONF": str(self.conf)}
        if which == "consumer":  # its reports on stdout, one line per batch, as they happen
            p = subprocess.Popen(["stdbuf", "-oL", str(binary)], env=env, cwd=self.dir, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            assert p.stdout is not None
            self.reports[which] = Reports(p.stdout)
        else:  # its reports on stderr (unbuffered)
            p = subprocess.Popen([str(binary)], env=env, cwd=self.dir, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            assert p.stderr is not None
            self.reports[which] = Reports(p.stderr)
        self.procs[which] = p

    def signal(self, which: str, sig: int) -> None:
        self.procs[which].send_signal(sig)

    def stop(self, which: str) -> None:
        self.signal(which, signal.SIGSTOP)
        time.sleep(0.05)

    def kill(self, which: str) -> None:
        p = self.procs[which]
        p.kill()
        p.wait(10)

    def wait_for(self, cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def wait_attached(self, which: str, n: int = THREADS) -> None:
        r = self.reports[which]
        self.wait_for(lambda: r.attached >= n, f"{which}: {n} threads attached")

    def wait_writers_running(self) -> None:
        """Until every producer thread has committed a batch, so each has finished ``fips_buf_attach``.

        The prototype's attach holds ``assignment_lock``, a process-shared mutex that is not robust (no
        PTHREAD_MUTEX_ROBUST): a producer killed while one of its threads attaches would leave it locked and
        every reader thread blocked in ``update_cached_reader_values``.  Not seen here, but a test that kills the
        producer to see what a dead writer looks like must not depend on where the kill lands."""
        def running() -> bool:
            s = FipsIpcProbe([self.shm_name], discover=False).sample()
            v = derive_fipsipc(None, s)
            return bool(v.segments) and sum(r.writer == "in use" and r.committed_pos > 0
                                            for r in v.segments[0].rings) == THREADS
        self.wait_for(running, "every producer thread attached and writing")

    def release_race(self) -> str:
        """What shows that the prototype's own release accounting broke, or "".

        The consumer's 16 threads hold at most one batch of 10 each, so no reader can have more than
        THREADS * BATCH slots taken and not released.  More means its commit_offset moved wrongly: the
        prototype's fips_buf_list_add_sqe advances it outside the SQE list's lock on the in-order path (and its
        list's read_index steps by sizeof(sqe)), so two reader threads sharing a segment while the readers are
        reassigned (each writer thread's attach) can release a batch twice.  Seen here about once in 50 runs on
        a loaded machine: released 6 slots past the writer's commit, taken 4090, and the consumer never drains
        the ring again."""
        s = FipsIpcProbe([self.shm_name], discover=False).sample()
        v = derive_fipsipc(None, s)
        bad = [q for seg in v.segments for q in seg.positions if q.taken_slots > THREADS * BATCH]
        return "; ".join(f"reader {q.reader} ring {q.ring}: {q.taken_slots} slots taken, released at "
                         f"{q.released_pos}" for q in bad)

    def wait_producer_blocked(self, quiet_s: float = 0.3) -> dict[int, int]:
        """Until every producer thread reports a full ring and its count stays
        put for ``quiet_s``: the batches each thread committed."""
        r = self.reports["producer"]

        def settled() -> bool:
            with r.lock:
                if len(r.tries) < THREADS:
                    return False
                snap = dict(r.tries)
            time.sleep(quiet_s)
            with r.lock:
                return snap == r.tries
        self.wait_for(settled, "every producer thread blocked on a full ring")
        with r.lock:
            return dict(r.tries)

    def settled_reads(self, quiet_s: float = 0.3) -> int:
        """The consumer's "read" lines once no new one came for ``quiet_s`` (the pipe is drained)."""
        r = self.reports["consumer"]
        last = -1
        while True:
            with r.lock:
                now = r.reads
            if now == last:
                return now
            last = now
            time.sleep(quiet_s)

    def shmid(self) -> int | None:
        for s in read_sysvipc():
            if s.key == self.key:
                return s.shmid
        return None

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait(10)
        sid = self.shmid()
        if sid is not None:
            _libc.shmctl(sid, 0, None)  # IPC_RMID
        sem = Path("/dev/shm") / f"sem.{Path(self.shm_name).name}_sem_open"
        try:
            sem.unlink()
        except FileNotFoundError:
            pass
