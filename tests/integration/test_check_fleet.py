"""``fipstop check --prometheus URL`` against a real Prometheus (Debian's) scraping two ``fipstop serve``.

Host A is healthy; host B has a ring its consumer does not release, filled and
dropping, and a world-writable domain file. The check must name B's trouble
and only B's, count both hosts, and after A's exporter is stopped say that A
does not answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from promapi import free_port, query, wait

from fipstop._fips import Consumer, Domain, Producer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
FIPSTOP = [sys.executable, "-m", "fipstop"]


def _check(base: str, *extra: str) -> tuple[int, str]:
    r = subprocess.run([*FIPSTOP, "check", "--prometheus", base, *extra], capture_output=True, text=True,
                       timeout=60, cwd=REPO)
    assert r.stderr == "" and r.stdout.count("\n") == 1, r.stderr + r.stdout
    return r.returncode, r.stdout


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian) is not installed")
def test_check_over_a_fleet_of_two(tmp_path: Path) -> None:
    assert PROMETHEUS is not None
    shm_a, shm_b = tmp_path / "a", tmp_path / "b"
    shm_a.mkdir()
    shm_b.mkdir()
    port_a, port_b, prom_port = free_port(), free_port(), free_port()
    dom_a = Domain("named", shm_a, max_rings=2, max_consumers=1, ring_capacity=1 << 16, max_record=256)
    Producer(dom_a).log(b"fine")
    dom_b = Domain("named", shm_b, max_rings=2, max_consumers=1, ring_capacity=4096, max_record=256)
    cons_b = Consumer(dom_b, "ips")  # registered, never releases: the ring fills and drops
    os.chmod(shm_b / "fips.named", 0o666)
    stop = threading.Event()

    def flood() -> None:
        p = Producer(dom_b)
        while not stop.is_set():
            for _ in range(100):
                p.log(b"x" * 100)
            cons_b.heartbeat()
            time.sleep(0.05)
        p.close()

    flooder = threading.Thread(target=flood)
    flooder.start()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 900ms}\n"
        "scrape_configs:\n"
        "  - job_name: fipstop\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port_a}', '127.0.0.1:{port_b}']}}]\n")
    serves = {name: subprocess.Popen([*FIPSTOP, "--shm-dir", str(shm), "serve", "--listen", f"127.0.0.1:{port}",
                                      "--interval", "0.5"], stderr=subprocess.DEVNULL, cwd=REPO)
              for name, shm, port in (("a", shm_a, port_a), ("b", shm_b, port_b))}
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{prom_port}"
    a, b = f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"
    try:
        wait(lambda: len(query(base, 'up{job="fipstop"} == 1')) == 2, 40, "both targets up")
        wait(lambda: query(base, 'rate(fips_ring_dropped_records_total{job="fipstop"}[1m]) > 0'), 30,
              "two scrapes of B's drops")
        code, out = _check(base)
        print(out, end="")
        assert code == 2, out
        status, perf = out.rstrip("\n").split(" | ")
        assert f"{b}: " in status and f"{a}:" not in status
        assert "records/s dropped" in status and "% full" in status
        assert "'hosts'=2;" in perf and "'hosts_down'=0;" in perf and "'fill_max'=100%" in perf
        code, out = _check(base, "--json")
        doc = json.loads(out)
        names = {c["name"] for c in doc["checks"] if c["status"]}
        assert {"drops", "fill", "permissions"} <= names, doc["checks"]
        assert all(b in c["message"] for c in doc["checks"] if c["status"])

        serves["a"].terminate()
        serves["a"].wait(10)
        wait(lambda: query(base, f'up{{instance="{a}"}} == 0'), 30, "Prometheus to see A down")
        code, out = _check(base)
        assert code == 2 and f"{a}: fipstop serve does not answer Prometheus" in out and "'hosts_down'=1;" in out

        code, out = _check(base, "--job", "nothing")
        assert code == 3 and "scrapes no target of job nothing" in out
        code, out = _check(f"http://127.0.0.1:{free_port()}", "-t", "3")  # nobody listens there
        assert code == 3 and out.startswith("FIPS UNKNOWN - Prometheus at")
    finally:
        stop.set()
        flooder.join()
        prom.terminate()
        for p in serves.values():
            p.terminate()
        prom.wait(10)
        for p in serves.values():
            p.wait(10)
        cons_b.close()
        dom_a.close()
        dom_b.close()
