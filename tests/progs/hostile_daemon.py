"""A daemon that turns on its own domain: run it under `fipstop wrap`.

It logs BIND's "denied" lines through syslog(3) (the preloaded shim puts them
in the wrapped domain), then waits for "go" on stdin, drops root for the
given uid/gid (setgroups, setgid, setuid: a real privilege drop, as named -u
does) and tries to shrink the domain file under every reader's mapping:

  fd    ftruncate() on every descriptor it holds (the shim used to keep its
        O_RDWR descriptor on the root-owned domain), then truncate(PATH)
  path  truncate(PATH, 4096): the domain is group-writable for this daemon,
        so the unprivileged producer can

It prints one JSON line with what it found and did, keeps logging (the shim
must survive its own domain shrinking), and exits 0 on "stop".
"""

from __future__ import annotations

import json
import os
import sys
import syslog


def denied(ip: str) -> str:
    return f"client @0x7f00aa {ip}#5353 (example.com): query (cache) 'example.com/A/IN' denied"


def main() -> int:
    mode, path, uid, gid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    addrs = sys.argv[5].split(",")
    syslog.openlog("named", 0, syslog.LOG_DAEMON)
    for ip in addrs:
        for _ in range(5):
            syslog.syslog(syslog.LOG_INFO, denied(ip))
    # what the process holds on the domain, while it is still root and may look
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(path):
                held.append(int(fd))
        except OSError:
            pass
    print(json.dumps({"ready": True, "fds_on_domain": held}), flush=True)
    if sys.stdin.readline().strip() != "go":
        return 2
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    out: dict[str, object] = {"uid": os.getuid(), "euid": os.geteuid(), "ftruncated": [], "truncate": ""}
    if mode == "fd":
        for fd in range(3, 1024):
            try:
                os.ftruncate(fd, 4096)
            except OSError:
                continue
            out["ftruncated"].append(fd)  # type: ignore[union-attr]
    try:
        os.truncate(path, 4096)
        out["truncate"] = "ok"
    except OSError as exc:
        out["truncate"] = exc.strerror or str(exc)
    out["size_after"] = os.stat(path).st_size
    print(json.dumps(out), flush=True)
    # keep logging into the shrunk domain: the shim gets ETRUNC, never SIGBUS
    for i in range(200):
        syslog.syslog(syslog.LOG_INFO, f"after the truncation {i}")
    print(json.dumps({"logged_after": True}), flush=True)
    return 0 if sys.stdin.readline().strip() == "stop" else 3


if __name__ == "__main__":
    sys.exit(main())
