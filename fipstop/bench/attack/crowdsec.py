"""CrowdSec for ``fipstop bench attack``: Debian's crowdsec 1.4.6, offline, with bans that drop packets.

Everything is the bench's own and lives in one directory, run inside the
server namespace (whose loopback is its own, so the local API's default
127.0.0.1:8080 and the metrics port collide with nothing on the host):

- ``config.yaml``: the local API on 127.0.0.1:8080, no online API (no
  ``online_client`` section, ``-no-capi``), an SQLite database in the
  directory, file acquisition (``acquis.yaml``: named's log, live tail);
- the hub items enabled by linking the offline hub's files
  (/usr/share/crowdsec/hub) into the directory, as Debian's post-install does
  (``cscli collections install`` would try to download): the collection
  mstilkerich/bind9 (parser mstilkerich/bind9-logs, scenario
  mstilkerich/bind9-refused: a leaky bucket of capacity 5, leak 10 s, ban on
  overflow), crowdsecurity/dateparse-enrich, and a two-line s00-raw parser
  of the bench's own that does what upstream's ``non-syslog`` does (program
  = the acquisition's type, message = the line; 1.4.6's hub lacks it):
  named writes its file without a syslog header;
- the decisions reach nftables through Debian's crowdsec-firewall-bouncer
  (mode nftables, table ``ip crowdsec``, set ``crowdsec-blacklists``, drop),
  registered with ``cscli bouncers add``, polling the decision stream every
  :data:`BOUNCER_POLL`.

When a ban is in force: the bouncer records no time, so a thread of the
bench lists the set every :data:`SET_POLL_S` and stamps each element when
first seen (the resolution is in the result).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from fipstop.bench.attack.fail2ban import read_marks
from fipstop.bench.attack.netns import NFT, VALID_NET, Topology
from fipstop.children import popen

HUB = Path("/usr/share/crowdsec/hub")
PATTERNS = Path("/etc/crowdsec/patterns")
HUB_ITEMS = {
    "collections/bind9.yaml": "collections/mstilkerich/bind9.yaml",
    "parsers/s01-parse/bind9-logs.yaml": "parsers/s01-parse/mstilkerich/bind9-logs.yaml",
    "scenarios/bind9-refused.yaml": "scenarios/mstilkerich/bind9-refused.yaml",
    "parsers/s02-enrich/dateparse-enrich.yaml": "parsers/s02-enrich/crowdsecurity/dateparse-enrich.yaml",
}
RAW_PARSER = """filter: "evt.Line.Labels.type != 'syslog'"
onsuccess: next_stage
name: fipstop/non-syslog
description: "a line without a syslog header: program = the acquisition's type, message = the line"
statics:
  - parsed: message
    expression: evt.Line.Raw
  - parsed: program
    expression: evt.Line.Labels.type
"""
BOUNCER_POLL = "100ms"
SET_POLL_S = 0.25
LAPI = "127.0.0.1:8080"
TABLE, SET = "crowdsec", "crowdsec-blacklists"

__all__ = ["CrowdSec", "missing", "read_marks"]


def missing() -> str | None:
    for prog in ("crowdsec", "cscli"):
        if shutil.which(prog) is None:
            return f"{prog} not found (Debian: crowdsec)"
    if shutil.which("crowdsec-firewall-bouncer") is None:
        return "crowdsec-firewall-bouncer not found (Debian: crowdsec-firewall-bouncer)"
    if not PATTERNS.is_dir():
        return f"{PATTERNS} missing (Debian's crowdsec ships its grok patterns there)"
    for rel in HUB_ITEMS.values():
        if not (HUB / rel).is_file():
            return f"{HUB / rel} missing (Debian's crowdsec ships the offline hub there)"
    return None


def config_yaml(d: Path) -> str:
    return f"""common:
  daemonize: false
  log_media: file
  log_level: info
  log_dir: {d}/
  working_dir: {d}
config_paths:
  config_dir: {d}/
  data_dir: {d}/data/
  simulation_path: {d}/simulation.yaml
  hub_dir: {d}/hub/
  index_path: {HUB}/.index.json
  notification_dir: {d}/notifications/
  plugin_dir: /usr/lib/crowdsec/plugins/
crowdsec_service:
  acquisition_path: {d}/acquis.yaml
  parser_routines: 1
cscli:
  output: human
db_config:
  log_level: info
  type: sqlite
  db_path: {d}/data/crowdsec.db
  use_wal: true
plugin_config:
  user: nobody
  group: nogroup
api:
  client:
    insecure_skip_verify: false
    credentials_path: {d}/local_api_credentials.yaml
  server:
    log_level: info
    listen_uri: {LAPI}
    profiles_path: {d}/profiles.yaml
    trusted_ips:
      - 127.0.0.1
prometheus:
  enabled: true
  level: full
  listen_addr: 127.0.0.1
  listen_port: 6060
"""


def bouncer_yaml(d: Path, api_key: str) -> str:
    return f"""mode: nftables
pid_dir: {d}/
update_frequency: {BOUNCER_POLL}
daemonize: false
log_mode: file
log_dir: {d}/
log_level: info
api_url: http://{LAPI}/
api_key: {api_key}
insecure_skip_verify: false
disable_ipv6: true
deny_action: DROP
deny_log: false
supported_decisions_types:
  - ban
blacklists_ipv4: {SET}
blacklists_ipv6: crowdsec6-blacklists
nftables:
  ipv4:
    enabled: true
    set-only: false
    table: {TABLE}
    chain: crowdsec-chain
  ipv6:
    enabled: false
    set-only: false
    table: crowdsec6
    chain: crowdsec6-chain
prometheus:
  enabled: false
  listen_addr: 127.0.0.1
  listen_port: 60601
"""


def write_config(d: Path, logpath: Path) -> Path:
    """The whole configuration in ``d``; returns config.yaml."""
    for sub in ("data", "hub", "notifications", "parsers/s00-raw", "parsers/s01-parse", "parsers/s02-enrich",
                "scenarios", "collections", "postoverflows"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for item in ("blockers", "collections", "parsers", "postoverflows", "scenarios", ".index.json"):
        if (HUB / item).exists() and not (d / "hub" / item).exists():
            (d / "hub" / item).symlink_to(HUB / item)
    for dst, src in HUB_ITEMS.items():
        link = d / dst
        if not link.exists():
            link.symlink_to(HUB / src)
    if not (d / "patterns").exists():
        (d / "patterns").symlink_to(PATTERNS)  # the grok patterns Debian ships as configuration
    (d / "parsers" / "s00-raw" / "non-syslog.yaml").write_text(RAW_PARSER)
    (d / "parsers" / "s02-enrich" / "whitelist-valid.yaml").write_text(f"""name: fipstop/valid-clients
description: "the bench's valid clients are never banned (as Fail2Ban's ignoreip)"
whitelist:
  reason: "valid clients of the bench"
  cidr:
    - "{VALID_NET}"
""")
    (d / "simulation.yaml").write_text("simulation: false\n")
    (d / "profiles.yaml").write_text("""name: default_ip_remediation
filters:
 - Alert.Remediation == true && Alert.GetScope() == "Ip"
decisions:
 - type: ban
   duration: 4h
on_success: break
""")
    (d / "acquis.yaml").write_text(f"filenames:\n  - {logpath}\nlabels:\n  type: named\n")
    cfg = d / "config.yaml"
    cfg.write_text(config_yaml(d))
    return cfg


class CrowdSec:
    """crowdsec + the firewall bouncer in the server namespace, and the set poller."""

    def __init__(self, net: Topology, d: Path, logpath: Path, maxretry: int, prefix: list[str] | None = None) -> None:
        self.net, self.d, self.logpath = net, d, logpath
        self.prefix = list(prefix or ())  # e.g. chrt -f PRIO: how the bench runs every IPS
        self.maxretry = maxretry  # the scenario's own capacity decides; kept for the record
        self.procs: list[subprocess.Popen] = []
        self.seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.poll_errors = 0

    @property
    def pid(self) -> int | None:
        return self.procs[0].pid if self.procs else None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _cscli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.net.in_server(["cscli", "-c", str(self.d / "config.yaml"), *args]),
                              capture_output=True, text=True, timeout=60)

    def start(self) -> None:
        self.d.mkdir(parents=True, exist_ok=True)
        self.logpath.touch()
        cfg = write_config(self.d, self.logpath)
        r = self._cscli("machines", "add", "fipstop-bench", "--auto", "--force", "-f",
                        str(self.d / "local_api_credentials.yaml"))
        if r.returncode != 0:
            raise RuntimeError(f"cscli machines add: {(r.stderr or r.stdout).strip()[-200:]}")
        r = self._cscli("bouncers", "add", "fipstop-bench-fw", "-o", "raw")
        key = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else ""
        if not key:
            raise RuntimeError(f"cscli bouncers add: {(r.stderr or r.stdout).strip()[-200:]}")
        (self.d / "bouncer.yaml").write_text(bouncer_yaml(self.d, key))
        with open(self.d / "crowdsec.out", "wb") as out:
            self.procs.append(popen(self.net.in_server([*self.prefix, "crowdsec", "-c", str(cfg), "-no-capi", "-info"]),
                                               stdin=subprocess.DEVNULL, stdout=out, stderr=out))
        deadline = time.monotonic() + 60
        while True:
            if self.procs[0].poll() is not None:
                raise RuntimeError(f"crowdsec exited {self.procs[0].returncode}: {self._tail('crowdsec.out')}")
            if self._cscli("lapi", "status").returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"crowdsec's local API not up after 60 s: {self._tail('crowdsec.out')}")
            time.sleep(0.3)
        with open(self.d / "bouncer.out", "wb") as out:
            self.procs.append(popen(self.net.in_server([*self.prefix, "crowdsec-firewall-bouncer", "-c",
                                                                   str(self.d / "bouncer.yaml")]),
                                               stdin=subprocess.DEVNULL, stdout=out, stderr=out))
        deadline = time.monotonic() + 30
        while not self._set_elements(probe=True):
            if self.procs[1].poll() is not None:
                raise RuntimeError(f"crowdsec-firewall-bouncer exited {self.procs[1].returncode}: "
                                   f"{self._tail('bouncer.out')} {self._tail('crowdsec-firewall-bouncer.log')}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bouncer made no set {TABLE}/{SET} in 30 s: "
                                   f"{self._tail('crowdsec-firewall-bouncer.log')}")
            time.sleep(0.3)
        self._thread = threading.Thread(target=self._poll, name="crowdsec-set", daemon=True)
        self._thread.start()

    def _tail(self, name: str) -> str:
        try:
            return " | ".join((self.d / name).read_text(errors="replace").splitlines()[-3:])[-300:]
        except OSError:
            return "(no output)"

    def _set_elements(self, probe: bool = False) -> list[str] | None:
        r = subprocess.run(self.net.in_server([NFT, "-j", "list", "set", "ip", TABLE, SET]), capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            return None
        if probe:
            return ["ok"]
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            return None
        out: list[str] = []
        for item in doc.get("nftables", []):
            st = item.get("set") if isinstance(item, dict) else None
            for e in (st or {}).get("elem") or []:
                v = e.get("elem", {}).get("val") if isinstance(e, dict) else e
                if isinstance(v, str):
                    out.append(v)
        return out

    def _poll(self) -> None:
        marks = self.d / "bans.txt"
        with open(marks, "a", encoding="utf-8") as f:
            while not self._stop.is_set():
                t0 = time.time_ns()
                els = self._set_elements()
                now = time.time_ns()
                if els is None:
                    self.poll_errors += 1
                else:
                    for ip in els:
                        if ip not in self.seen:
                            # stamped halfway between the listings that did not and did show it
                            self.seen[ip] = now
                            f.write(f"{(t0 + now) / 2e9:.6f} {ip}\n")
                    f.flush()
                self._stop.wait(SET_POLL_S)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"set_poll_s": SET_POLL_S, "bouncer_poll": BOUNCER_POLL, "poll_errors": self.poll_errors,
                               "scenario": "mstilkerich/bind9-refused (leaky, capacity 5, leakspeed 10s)"}
        r = self._cscli("decisions", "list", "-o", "json", "--limit", "0") if self.procs and \
            self.procs[0].poll() is None else None
        if r is not None and r.returncode == 0:
            try:
                alerts = json.loads(r.stdout or "null") or []
                out["decisions"] = sum(len(a.get("decisions") or []) for a in alerts)
            except ValueError:
                pass
        r = self._cscli("metrics", "-o", "json") if self.procs and self.procs[0].poll() is None else None
        if r is not None and r.returncode == 0:
            try:
                # 1.4.6 prints one JSON object per table, back to back: acquisition first
                acq, _end = json.JSONDecoder().raw_decode(r.stdout.lstrip())
                if not isinstance(acq, dict):
                    raise ValueError("acquisition table is not an object")
                out["lines_read"] = sum(int(v.get("reads", 0)) for v in acq.values() if isinstance(v, dict))
                out["lines_parsed"] = sum(int(v.get("parsed", 0)) for v in acq.values() if isinstance(v, dict))
            except (ValueError, TypeError, AttributeError):
                out["lines_read"] = None  # unknown, said so
        return out


