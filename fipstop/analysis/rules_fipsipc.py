"""Diagnosis rules about the FIPS paper's prototype rings (FIPS-IPC segments).

The prototype keeps no pids and no heartbeats: fips_buf_init registers a
writer or reader in the header, only fips_buf_destroy unregisters it, so a
killed process stays registered.  The kernel knows how many processes still
have the segment attached; a registered process that is not attached is gone
(``IpcSegmentView.gone``).  Which one it was is told by the positions over
the window:

``fipsipc-reader-gone``  a process is gone and a reader released nothing while its
                         rings are full: the writer waits on it for ever (without
                         OVERWRITE) or laps it (with)
``fipsipc-writer-gone``  a process is gone, nothing was committed in the window and
                         every reader has caught up: the writer died (the prototype
                         cannot say whether an idle writer lost a caught-up reader
                         instead; the title says so)
``fipsipc-stale``        registered writers or readers and no process attached at all: all
                         of them died; a new writer is refused until the segment is removed
``fipsipc-full``         every process is there, a ring is full and the writer must
                         wait: the slowest reader is the bottleneck
``fipsipc-lapped``       OVERWRITE rings lapped a reader: records were overwritten
                         unread (an estimate: nothing counts them)
``fipsipc-lock-orphaned`` the header's assignment lock is held by a thread that no
                         longer exists (killed inside fips_buf_attach or a reader's
                         reassignment): the prototype's mutex is not robust, so every
                         later attach, detach and reassignment blocks for ever
"""

from __future__ import annotations

from collections.abc import Sequence

from fipstop.analysis.evidence import Evidence
from fipstop.analysis.findings import CRITICAL, WARNING, Finding
from fipstop.model.fipsipc import FipsIpcView, IpcSegmentView
from fipstop.textsafe import escape_text

__all__ = ["fipsipc_rules"]

#: a ring with at most this share of its slots free (or one slot) is full: the prototype's writer stops
#: within one batch (10 slots of its own programs: 0.24 % of 4096)
FULL_FREE_SHARE = 0.01


def _full_pct(slots: int) -> float:
    """The fill from which a ring of ``slots`` counts as full."""
    return 100.0 * (1.0 - max(FULL_FREE_SHARE, 1.0 / slots))


def _history(ev: Evidence, shmid: int) -> list[IpcSegmentView]:
    out: list[IpcSegmentView] = []
    for s in ev.snaps:
        if isinstance(s.fipsipc, FipsIpcView):
            out.extend(g for g in s.fipsipc.segments if g.shmid == shmid)
    return out


def fipsipc_rules(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    view = ev.last.fipsipc
    if not isinstance(view, FipsIpcView):
        return []
    out: list[Finding] = []
    for seg in view.segments:
        if seg.destroyed:
            continue
        hist = [g for g in _history(ev, seg.shmid) if g.dt_s > 0]
        name = escape_text(seg.label)
        subject = f"FIPS-IPC segment {name} (shmid {seg.shmid})"
        wrote = any(g.writer_moved for g in hist)
        released = {r.reader: any(any(x.reader == r.reader and x.moved for x in g.readers) for g in hist)
                    for r in seg.readers}
        full = [r for r in seg.rings if r.fill_pct is not None and r.fill_pct >= _full_pct(seg.slots)]
        lapped = sum(r.lapped_slots_est or 0 for g in hist for r in g.rings)
        evidence = {"shmid": seg.shmid, "writers_registered": seg.writers_registered,
                    "readers_registered": seg.readers_registered, "attached": seg.attached, "gone": seg.gone,
                    "rings_full": len(full), "rings": len(seg.rings), "window_frames": len(hist)}
        if not hist:
            continue
        # held by a dead thread in two frames of the window at least (one could be a tid read as it exited)
        orphaned = [g for g in hist if g.lock_owner is not None and g.lock_owner_alive is False
                    and g.lock_owner == seg.lock_owner]
        if seg.lock_owner is not None and seg.lock_owner_alive is False and len(orphaned) >= 2:
            out.append(Finding(
                "fipsipc-lock-orphaned", f"FIPS-IPC {name}: its assignment lock is held by thread "
                f"{seg.lock_owner}, which is gone: every attach, detach and reader reassignment now blocks for "
                "ever", CRITICAL, 3e6, subject, evidence | {"lock_owner_tid": seg.lock_owner},
                "the prototype's pthread mutex is not robust (no PTHREAD_MUTEX_ROBUST), so nothing can free it: "
                f"stop every process of the segment, remove it (`ipcrm -m {seg.shmid}`) and start again"))
        if seg.attached == 0 and seg.writers_registered + seg.readers_registered:
            out.append(Finding(
                "fipsipc-stale", f"FIPS-IPC {name}: stale segment: {seg.writers_registered} writer(s) and "
                f"{seg.readers_registered} reader(s) registered, no process attached", WARNING, 5e5, subject,
                evidence, "they were killed without fips_buf_destroy; the prototype refuses a new writer while "
                f"one is registered: remove the segment (`ipcrm -m {seg.shmid}`) before starting again"))
            continue
        stuck = [r for r, moved in released.items() if not moved
                 and any(x.reader == r and x.lag_slots > 0 for x in seg.positions)]
        if seg.gone and stuck and (full or lapped):
            what = ("the writer laps it, overwriting what it has not read" if seg.overwrite
                    else f"{len(full)} of {len(seg.rings)} rings are full and the writer must wait for ever")
            out.append(Finding(
                "fipsipc-reader-gone", f"FIPS-IPC {name}: reader {stuck[0]} is gone (killed without "
                f"fips_buf_destroy) and {what}", CRITICAL, 2e6 + len(full), subject,
                evidence | {"reader": stuck[0], "lapped_slots_est": lapped},
                "the prototype never evicts a reader: stop the writer, remove the segment (`ipcrm -m "
                f"{seg.shmid}`) and start both again; libfips evicts a dead consumer after a grace period"))
            continue
        if seg.gone and not wrote and seg.writers_registered and all(
                (r.lag_slots or 0) == 0 for r in seg.rings):
            out.append(Finding(
                "fipsipc-writer-gone", f"FIPS-IPC {name}: {seg.gone} registered process(es) gone and nothing "
                "committed: most likely its writer died (or an idle writer lost a caught-up reader: the "
                "prototype keeps no pids to tell)", WARNING, 1e6, subject, evidence,
                "the prototype refuses a new writer while the dead one stays registered (writer_count 1): stop "
                f"the readers once they have drained, remove the segment (`ipcrm -m {seg.shmid}`), start again"))
            continue
        if full and not seg.overwrite and not seg.gone:
            slow = max(full, key=lambda r: r.lag_slots or 0)
            out.append(Finding(
                "fipsipc-full", f"FIPS-IPC {name}: {len(full)} of {len(seg.rings)} rings full, the writer waits "
                f"on reader {slow.slowest_reader}", WARNING, float(len(full)), subject,
                evidence | {"reader": slow.slowest_reader},
                "the slowest reader is the bottleneck: give it threads (the prototype assigns rings to reader "
                "threads), or use libfips, which drops and counts instead of blocking the application"))
        if lapped and seg.overwrite:
            out.append(Finding(
                "fipsipc-lapped", f"FIPS-IPC {name}: readers lapped, ~{lapped} records overwritten unread "
                "in the window (estimate)", WARNING, float(lapped), subject,
                evidence | {"lapped_slots_est": lapped},
                "the prototype's OVERWRITE mode loses records silently; a faster reader or larger rings help, "
                "libfips counts every dropped record"))
    return out
