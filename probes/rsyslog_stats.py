"""rsyslog impstats: rsyslog's own queue counters, read from the file it writes.

The simplest real path: rsyslog configured with

    module(load="impstats" interval="1" format="json" log.file="/var/log/rsyslog-stats.json"
           log.syslog="off" resetCounters="off")

appends one JSON object per counter set per interval.  This probe reads the
tail of that file (bounded) and keeps the newest object of every queue
(``"origin": "core.queue"``): size, enqueued, full, discarded.full,
discarded.nf, maxqsize.  ``@cee:`` prefixes (format="cee") and syslog headers
before the ``{`` are skipped; a line that is not JSON is counted, not fatal.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

TAIL_BYTES = 512 << 10


@dataclass(frozen=True, slots=True)
class QueueStats:
    name: str  # from rsyslog's config: escape before showing
    size: int
    enqueued: int
    full: int
    discarded_full: int
    discarded_nf: int
    maxqsize: int


@dataclass(frozen=True, slots=True)
class RsyslogStatsSample:
    path: str
    ok: bool
    reason: str = ""
    queues: tuple[QueueStats, ...] = ()
    file_age_ns: int = -1  # since the file was last written
    bad_lines: int = 0
    taken_mono_ns: int = 0


def _int(d: dict, key: str) -> int:
    v = d.get(key, 0)
    if isinstance(v, bool):
        return 0
    if isinstance(v, int):
        return v
    try:
        return int(str(v))
    except ValueError:
        return 0


def parse_impstats(text: str) -> tuple[dict[str, QueueStats], int]:
    """The newest stats of each queue in impstats output, and the unparsable line count."""
    queues: dict[str, QueueStats] = {}
    bad = 0
    for line in text.splitlines():
        i = line.find("{")
        if i < 0:
            if line.strip():
                bad += 1
            continue
        try:
            obj = json.loads(line[i:])
        except ValueError:
            bad += 1
            continue
        if not isinstance(obj, dict) or obj.get("origin") != "core.queue" or not isinstance(obj.get("name"), str):
            continue
        queues[obj["name"]] = QueueStats(obj["name"], _int(obj, "size"), _int(obj, "enqueued"), _int(obj, "full"),
                                         _int(obj, "discarded.full"), _int(obj, "discarded.nf"),
                                         _int(obj, "maxqsize"))
    return queues, bad


class RsyslogStatsProbe:
    name = "rsyslog_stats"

    def __init__(self, path: str, *, tail_bytes: int = TAIL_BYTES) -> None:
        self.path = path
        self.tail_bytes = tail_bytes

    def available(self) -> tuple[bool, str]:
        s = self.sample()
        return s.ok, s.reason

    def sample(self) -> RsyslogStatsSample:
        now = time.monotonic_ns()
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                start = max(st.st_size - self.tail_bytes, 0)
                f.seek(start)
                raw = f.read(self.tail_bytes)
        except FileNotFoundError:
            return RsyslogStatsSample(self.path, False, "no impstats file (is impstats configured with log.file?)",
                                      taken_mono_ns=now)
        except OSError as e:
            return RsyslogStatsSample(self.path, False, e.strerror or str(e), taken_mono_ns=now)
        text = raw.decode("utf-8", "replace")
        if start:  # the first line is probably cut
            text = text.partition("\n")[2]
        queues, bad = parse_impstats(text)
        age = max(int((time.time() - st.st_mtime) * 1e9), 0)
        if not queues:
            return RsyslogStatsSample(self.path, False, "no queue statistics in the file yet", (), age, bad, now)
        return RsyslogStatsSample(self.path, True, "", tuple(queues[k] for k in sorted(queues)), age, bad, now)
