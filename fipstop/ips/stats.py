"""Stats of a running ``fipstop ips``: what ``--stats-json`` writes.

The file is rewritten atomically (temp file + rename) once per second, so a
reader (``fipstop demo``, ``fipstop bench ban``, a test) never sees half a
document.  Schema version ``v`` = 1; fields (counters are cumulative since
start; times in the field's unit):

    v, pid, domain, consumer, action, started_ns, updated_ns, uptime_s,
    records, bytes, records_per_s, lost (records the producers dropped before
    we saw them), truncated, matched, ignored, not_ip (a host that is no
    address, DNS names included), dns (<HOST> matched a DNS name: never
    resolved), nofail (<F-NOFAIL>/<F-MLFGAINED> lines), pending (failures
    waiting for their <F-MLFID> session's address), dated (records whose
    date was found and cut out), nomatch,
    bans, unbans, active_bans, bans_failed, duplicate_triggers,
    tracked, evictions, expired, max_tracked,
    action_failures, action_retries, action_pending, last_action_error,
    events_published, events_dropped,
    range_bans, range_tracked, range_evictions, range_refused  (networks banned as a whole once a
                        jail's address table overflowed; networks counted; evicted; refused: ignoreip)
    domain_truncations (the domain shrank under the mapping), domain_reopens,
    findings            [one line each, newest last, at most 8]: what went wrong that the IPS survived
    control             the control socket's path ("" when none; fipstop/ips/control.py)
    time_to_ban_ms      {count, p50, p90, p99, max}  first offending record -> ban
    reaction_ms         {count, p50, p90, p99, max}  record that crossed maxretry -> ban
    reaction_read_ms    {count, p50, p90, p99, max}  the first part of it: that record -> read, matched
                        and handed to the ban engine (the consumer's lag, the matching, the wait for the
                        engine's lock)
    reaction_action_ms  {count, p50, p90, p99, max}  the second part: handed to the engine -> ban in force
                        (the wait in the action queue, the action's own run, retries' back-off); a ban
                        whose parts come out negative (the wall clock stepped) is in neither part
    jails               {NAME: {matched, ignored, not_ip, dns, nofail, pending, bans, tracked, evictions,
                                sessions, maxretry, findtime_s, bantime_s, mode, failregex_hits}}

Percentiles are over every ban since start, within 2 % (a log histogram), except a latency that comes out
negative (the wall clock stepped back between its two stamps): it is unknown and left out of its histogram, whose
``count`` may then be below ``bans``; nothing is counted as 0 ms.  :func:`read_stats` loads the file into
:class:`IpsStats`.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

STATS_VERSION = 1


@dataclass(frozen=True, slots=True)
class Percentiles:
    count: int = 0
    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    max: float = 0.0


@dataclass(frozen=True, slots=True)
class JailStats:
    matched: int = 0
    ignored: int = 0
    not_ip: int = 0
    dns: int = 0
    nofail: int = 0
    pending: int = 0
    bans: int = 0
    tracked: int = 0
    evictions: int = 0
    sessions: int = 0
    maxretry: int = 0
    findtime_s: float = 0.0
    bantime_s: float = 0.0
    mode: str = "window"
    failregex_hits: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class IpsStats:
    v: int = STATS_VERSION
    pid: int = 0
    domain: str = ""
    consumer: str = ""
    action: str = ""
    started_ns: int = 0
    updated_ns: int = 0
    uptime_s: float = 0.0
    records: int = 0
    bytes: int = 0
    records_per_s: float = 0.0
    lost: int = 0
    truncated: int = 0
    matched: int = 0
    ignored: int = 0
    not_ip: int = 0
    dns: int = 0
    nofail: int = 0
    pending: int = 0
    dated: int = 0
    nomatch: int = 0
    bans: int = 0
    unbans: int = 0
    active_bans: int = 0
    bans_failed: int = 0
    duplicate_triggers: int = 0
    tracked: int = 0
    evictions: int = 0
    expired: int = 0
    max_tracked: int = 0
    action_failures: int = 0
    action_retries: int = 0
    action_pending: int = 0
    last_action_error: str = ""
    events_published: int = 0
    events_dropped: int = 0
    range_bans: int = 0
    range_tracked: int = 0
    range_evictions: int = 0
    range_refused: int = 0
    domain_truncations: int = 0
    domain_reopens: int = 0
    findings: tuple[str, ...] = ()
    control: str = ""
    time_to_ban_ms: Percentiles = field(default_factory=Percentiles)
    reaction_ms: Percentiles = field(default_factory=Percentiles)
    reaction_read_ms: Percentiles = field(default_factory=Percentiles)
    reaction_action_ms: Percentiles = field(default_factory=Percentiles)
    jails: dict[str, JailStats] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


#: the fields that hold latency percentiles (a JSON object each), found from the dataclass, not listed again
_PERCENTILE_FIELDS = tuple(f.name for f in fields(IpsStats) if f.default_factory is Percentiles)


def read_stats(path: str | Path) -> IpsStats:
    """Load a ``--stats-json`` file (unknown keys are ignored: newer writers may add fields)."""
    d = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(d, dict) or d.get("v") != STATS_VERSION:
        raise ValueError(f"{path}: not a fipstop ips stats file (v={d.get('v') if isinstance(d, dict) else None})")
    names = set(IpsStats.__dataclass_fields__)
    kw = {k: v for k, v in d.items() if k in names}
    for k in _PERCENTILE_FIELDS:
        if isinstance(kw.get(k), dict):
            kw[k] = Percentiles(**{a: b for a, b in kw[k].items() if a in Percentiles.__dataclass_fields__})
    kw["findings"] = tuple(str(x) for x in kw.get("findings") or ())
    jn = set(JailStats.__dataclass_fields__)
    kw["jails"] = {n: JailStats(**{a: (tuple(b) if a == "failregex_hits" else b)  # type: ignore[arg-type]
                                   for a, b in j.items() if a in jn})
                   for n, j in (d.get("jails") or {}).items()}
    return IpsStats(**kw)


class LatencyWindow:
    """Latencies (ms) in a log-scale histogram: O(1) per value, percentiles in
    O(buckets) once a second, never a sort of 65536 values with the GIL held
    while reader threads wait.  Buckets grow by 2 %, so a percentile is
    reported within 2 % (the upper edge of its bucket, capped at the exact max).
    """

    LO_MS = 1e-3
    RATIO = 1.02
    NBUCKETS = 1100  # 1 µs .. > 1e6 ms

    def __init__(self) -> None:
        import math

        self._log = math.log
        self._k = 1.0 / math.log(self.RATIO)
        self._h = [0] * self.NBUCKETS
        self.count = 0
        self.max = 0.0

    def add(self, ms: float) -> None:
        i = int(self._log(ms / self.LO_MS) * self._k) + 1 if ms > self.LO_MS else 0
        self._h[i if i < self.NBUCKETS else self.NBUCKETS - 1] += 1
        self.count += 1
        if ms > self.max:
            self.max = ms

    def add_many(self, values: list[float]) -> None:
        h, log, k, lo, top = self._h, self._log, self._k, self.LO_MS, self.NBUCKETS - 1
        for ms in values:
            i = int(log(ms / lo) * k) + 1 if ms > lo else 0
            h[i if i < top else top] += 1
        if values:
            self.count += len(values)
            m = max(values)
            if m > self.max:
                self.max = m

    def percentiles(self) -> Percentiles:
        if not self.count:
            return Percentiles()
        h, n = list(self._h), self.count
        want = {p: max(1, int(p * n + 0.999999)) for p in (0.5, 0.9, 0.99)}
        out, acc, i = {}, 0, 0
        for p in (0.5, 0.9, 0.99):
            while acc < want[p] and i < len(h):
                acc += h[i]
                i += 1
            edge = self.LO_MS * self.RATIO ** (i - 1) if i > 0 else self.LO_MS
            out[p] = round(min(edge, self.max), 3)
        return Percentiles(count=n, p50=out[0.5], p90=out[0.9], p99=out[0.99], max=round(self.max, 3))


def write_atomic(path: str | Path, text: str) -> None:
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=str(p.parent) or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
