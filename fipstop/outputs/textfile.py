"""The check's report for node_exporter's textfile collector (``fipstop check --textfile DIR``).

``DIR/fipstop.prom`` holds each check's status, the plugin's exit status,
the performance data in the units /metrics uses (fill a 0-1 ratio, rates per
second; unknown is NaN) and when the check ran; it is written to a
temporary file in DIR and renamed, so the collector never reads half a file.
"""

from __future__ import annotations

import math
import os
import tempfile

from fipstop.analysis.check import CHECK_NAMES, OK, Report

__all__ = ["textfile", "write_textfile"]


#: perfdata label -> (metric, type, factor, help): units as /metrics has them (fill a 0-1 ratio, per second)
_PERF_METRICS: dict[str, tuple[str, str, float, str]] = {
    "drops_per_s": ("fipstop_check_drops_per_second", "gauge", 1, "Records dropped per second because a ring was "
                    "full or there was no ring (ring table full), over the check's window (NaN: one sample, no "
                    "rate)."),
    "dropped_total": ("fipstop_check_dropped_records_total", "counter", 1, "Records dropped because a ring was "
                      "full (every ring of the checked domains) or there was no ring (the domains' ring table "
                      "full); NaN when the no-ring part is unknown."),
    "fill_max": ("fipstop_check_fill_max_ratio", "gauge", 0.01, "Fill of the fullest open ring (0-1)."),
    "lag_max_records": ("fipstop_check_lag_max_records", "gauge", 1, "Largest consumer lag, in records."),
    "lag_max_seconds": ("fipstop_check_lag_max_seconds", "gauge", 1, "Largest consumer lag, in seconds."),
    "consumers_alive": ("fipstop_check_consumers_alive", "gauge", 1, "Consumers registered with a recent "
                        "heartbeat."),
    "rings": ("fipstop_check_rings", "gauge", 1, "Rings in use (open or closed)."),
    "backend_losses_per_s": ("fipstop_check_backend_losses_per_second", "gauge", 1, "Records the other logging "
                             "backends lost per second (audit, UDP, syslog sockets, rsyslog queues)."),
}


def textfile(rep: Report, now_s: float) -> str:
    """The report as the node_exporter textfile collector reads it (Prometheus text format 0.0.4)."""
    lines = ["# HELP fipstop_check_status Status of each fipstop check: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.",
             "# TYPE fipstop_check_status gauge"]
    # every check on every run (0 when it found nothing), so the series do not come and go; backends with --backends
    with_backends = any(p.label == "backend_losses_per_s" for p in rep.perf)
    worst: dict[str, int] = {n: OK for n in CHECK_NAMES if n != "backends" or with_backends}
    for r in rep.results:
        if r.name != "summary":
            worst[r.name] = max(worst.get(r.name, OK), r.status)
    for name, st in sorted(worst.items()):
        lines.append(f'fipstop_check_status{{check="{name}"}} {st}')
    lines += ["# HELP fipstop_check_overall_status The plugin's exit status.",
              "# TYPE fipstop_check_overall_status gauge", f"fipstop_check_overall_status {rep.status}"]
    for p in rep.perf:
        metric, kind, factor, help_ = _PERF_METRICS.get(
            p.label, ("fipstop_check_" + "".join(ch if ch.isalnum() else "_" for ch in p.label), "gauge", 1,
                      f"The check's perfdata {p.label}."))
        value = "NaN" if p.value is None or not math.isfinite(p.value) else repr(round(float(p.value) * factor, 9))
        lines += [f"# HELP {metric} {help_}", f"# TYPE {metric} {kind}", f"{metric} {value}"]
    lines += ["# HELP fipstop_check_last_run_timestamp_seconds When the check ran.",
              "# TYPE fipstop_check_last_run_timestamp_seconds gauge",
              f"fipstop_check_last_run_timestamp_seconds {now_s:.3f}"]
    return "\n".join(lines) + "\n"


def write_textfile(directory: str, text: str) -> str:
    """Write then rename, in the same directory: the collector never reads half a file."""
    path = os.path.join(directory, "fipstop.prom")
    fd, tmp = tempfile.mkstemp(prefix=".fipstop.prom.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
