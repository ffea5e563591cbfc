"""The control socket of ``fipstop ips``: lift a ban (like ``fail2ban-client set JAIL unbanip``) and ask its status.

A Unix stream socket, created mode 0600 (owner only), at ``--control PATH`` or by default
:func:`default_path` (``/run/fipstop/ips-BANSDOMAIN.sock`` as root, ``$XDG_RUNTIME_DIR/fipstop/...``
otherwise).  A peer whose ``SO_PEERCRED`` uid is neither 0 nor the IPS's own is answered
``permission denied`` and hung up on, whatever the file's mode says.  A socket file left by a dead
IPS (connecting is refused) is replaced; one a live process answers on is not.

Protocol: one JSON object per line each way, a request at most :data:`MAX_REQUEST` bytes::

    {"cmd":"status"}
      -> {"ok":true,"pid":N,"action":"nft","bans_domain":"fips-bans","active":N,
          "jails":{"NAME":{"bans":N,"active":N,"failed":N},...}}
    {"cmd":"unban","jail":"NAME","ip":"ADDR"}
      -> {"ok":true,"message":"unbanned ADDR in NAME"}
    anything else
      -> {"ok":false,"error":"one line"}

A request comes from another process: every field is type-checked, the address must parse
(:mod:`ipaddress`, an address or a network the IPS banned as a whole), the jail must be one the IPS
runs; a malformed request gets an error reply and never reaches the engine.  An over-long request
is answered and the connection closed.  The server never raises into the IPS.

:func:`request` is the client side (``fipstop ips-client``, the banned-addresses view's ``u``).
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import json
import os
import socket
import stat
import struct
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from fipstop.errors import FipsError, one_line

__all__ = ["MAX_REQUEST", "ControlError", "ControlServer", "Controller", "default_path", "handle_line", "request"]

#: a request line is at most this many bytes (newline included)
MAX_REQUEST = 4096
#: a reply line is at most this many bytes (the client refuses a longer one)
MAX_REPLY = 1 << 16
#: connections served at once; one more is answered "busy" and closed
MAX_CLIENTS = 8
#: a client that sends nothing for this long is hung up on
IDLE_S = 5.0
#: requests served per connection
MAX_REQUESTS_PER_CONN = 64
COMMANDS = ("status", "unban")
_SUN_PATH_MAX = 107


class Controller(Protocol):
    """What the socket asks of the IPS (:class:`fipstop.ips.run.Engine` + its runner)."""

    def control_status(self) -> dict[str, Any]: ...

    def control_unban(self, jail: str, ip: str) -> tuple[bool, str]: ...


def default_path(bans_domain: str | None, shm_dir: str | None = None, *, uid: int | None = None,
                 env: dict[str, str] | None = None) -> str | None:
    """Where an IPS publishing into ``bans_domain`` (in ``shm_dir``) listens without ``--control``:
    ``/run/fipstop`` as root, ``$XDG_RUNTIME_DIR/fipstop`` otherwise (None when that is unset).
    A shm dir other than /dev/shm is part of the name (a test's private domains get their own socket)."""
    from fipstop.ring import resolve_shm_dir

    uid = os.getuid() if uid is None else uid
    env = dict(os.environ) if env is None else env
    if uid == 0:
        base = "/run"
    else:
        base = env.get("XDG_RUNTIME_DIR", "")
        if not base or not os.path.isabs(base):
            return None
    name = bans_domain or "no-bans"
    shm = os.path.abspath(resolve_shm_dir(shm_dir))
    if shm != "/dev/shm":
        name += "-" + hashlib.sha256(shm.encode()).hexdigest()[:8]
    return os.path.join(base, "fipstop", f"ips-{name}.sock")


class ControlError(Exception):
    """The client could not get an answer: ``kind`` is ``absent`` (no IPS there), ``denied``, ``protocol``."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


# -- protocol ------------------------------------------------------------------------------------------

def _reply(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def error_reply(message: str) -> bytes:
    return _reply({"ok": False, "error": one_line(message, 300)})


def _shown(v: object) -> str:
    """A client's value in an error message: JSON-escaped and cut (never raw control characters)."""
    return json.dumps(str(v)[:64], ensure_ascii=True)


def canonical_ip(text: str) -> str:
    """The address (or network) as the IPS keys it; ValueError when it is neither."""
    if "/" in text:
        return str(ipaddress.ip_network(text, strict=True))
    return str(ipaddress.ip_address(text))


def handle_line(line: bytes, ctl: Controller) -> bytes:
    """One request line -> one reply line; never raises."""
    if len(line) > MAX_REQUEST:
        return error_reply(f"request longer than {MAX_REQUEST} bytes")
    try:
        req = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return error_reply("not a JSON request (one object per line)")
    if not isinstance(req, dict):
        return error_reply("not a JSON object")
    cmd = req.get("cmd")
    if not isinstance(cmd, str) or cmd not in COMMANDS:
        return error_reply(f"unknown command {_shown(cmd)}: want one of {', '.join(COMMANDS)}")
    try:
        if cmd == "status":
            return _reply({"ok": True, **ctl.control_status()})
        jail, ip = req.get("jail"), req.get("ip")
        if not isinstance(jail, str) or not jail:
            return error_reply("unban: 'jail' must be a non-empty string")
        if not isinstance(ip, str) or not ip:
            return error_reply("unban: 'ip' must be a non-empty string")
        try:
            addr = canonical_ip(ip)
        except ValueError:
            return error_reply(f"unban: {_shown(ip)} is not an IP address or network")
        ok, msg = ctl.control_unban(jail, addr)
        return _reply({"ok": True, "message": one_line(msg, 300)}) if ok else error_reply(msg)
    except Exception as exc:  # a bug in the IPS must not kill the server thread, nor the IPS
        return error_reply(f"internal error: {type(exc).__name__}: {exc}")


# -- server ----------------------------------------------------------------------------------------------

def peer_uid(conn: socket.socket) -> int | None:
    try:
        cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return struct.unpack("3i", cred)[1]


def _live(path: str) -> bool:
    """True when a process accepts connections on the socket at ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError as exc:
        return exc.errno not in (errno.ECONNREFUSED, errno.ENOENT)
    finally:
        s.close()


def _hang_up(conn: socket.socket, drain: int = 1 << 20) -> None:
    """End our side, then read (and drop) at most ``drain`` bytes for at most a second: closing with unread
    bytes would reset the connection and lose the reply just sent."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1.0)
        while drain > 0 and (chunk := conn.recv(65536)):
            drain -= len(chunk)
    except OSError:
        pass


class ControlServer:
    """Listens on ``path`` in a thread of its own, one thread per connection (at most MAX_CLIENTS)
    reading requests; every request is carried out on one long-lived thread: the unban event it
    publishes goes into that thread's ring of the bans domain, which a connection's thread, gone a
    moment later, would close before a dashboard read it."""

    def __init__(self, path: str, ctl: Controller, log: Callable[[str], None]) -> None:
        if len(path.encode()) > _SUN_PATH_MAX:
            raise FipsError(f"--control {path}: longer than {_SUN_PATH_MAX} bytes (a Unix socket path)")
        self.path = path
        self.ctl = ctl
        self.log = log
        self.uid = os.getuid()
        self.served = self.refused = 0
        self._clients = threading.BoundedSemaphore(MAX_CLIENTS)
        self._stop = threading.Event()
        self._sock = self._bind(path)
        self._ident = self._stat_ident(path)
        self._thread = threading.Thread(target=self._accept_loop, name="ips-control", daemon=True)
        self._exec = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ips-control-exec")

    @staticmethod
    def _stat_ident(path: str) -> tuple[int, int] | None:
        try:
            st = os.lstat(path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _bind(self, path: str) -> socket.socket:
        d = os.path.dirname(path) or "."
        try:
            os.makedirs(d, mode=0o755 if self.uid == 0 else 0o700, exist_ok=True)
        except OSError as exc:
            raise FipsError(f"control socket {path}: cannot create {d}: {exc.strerror}") from None
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise FipsError(f"control socket {path}: {exc.strerror}") from None
        if st is not None:
            if not stat.S_ISSOCK(st.st_mode):
                raise FipsError(f"control socket {path}: exists and is not a socket (not replaced)")
            if _live(path):
                raise FipsError(f"control socket {path}: another process answers on it (another fipstop ips?); "
                                "give --control PATH or --no-control")
            try:
                os.unlink(path)  # a dead IPS's socket
            except OSError as exc:
                raise FipsError(f"control socket {path}: stale, and cannot remove it: {exc.strerror}") from None
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # created 0600: no moment when others could connect
        try:
            s.bind(path)
            os.chmod(path, 0o600)
            s.listen(16)
        except OSError as exc:
            s.close()
            raise FipsError(f"control socket {path}: {exc.strerror}") from None
        finally:
            os.umask(old)
        s.settimeout(0.2)
        return s

    def start(self) -> None:
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            try:
                self._admit(conn)
            except Exception:  # never stops the server
                conn.close()

    def _admit(self, conn: socket.socket) -> None:
        uid = peer_uid(conn)
        if uid is None or uid not in (0, self.uid):
            self.refused += 1
            self._send_close(conn, error_reply(f"permission denied: uid {uid} may not control this fipstop ips "
                                               f"(only root and uid {self.uid})"))
            return
        if not self._clients.acquire(blocking=False):
            self._send_close(conn, error_reply(f"busy: {MAX_CLIENTS} clients already connected"))
            return
        threading.Thread(target=self._serve, args=(conn,), name="ips-control-client", daemon=True).start()

    @staticmethod
    def _send_close(conn: socket.socket, data: bytes) -> None:
        try:
            conn.settimeout(1.0)
            conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(IDLE_S)
            buf = b""
            for _ in range(MAX_REQUESTS_PER_CONN):
                while b"\n" not in buf:
                    if len(buf) > MAX_REQUEST:
                        break
                    chunk = conn.recv(MAX_REQUEST + 1)
                    if not chunk:
                        if buf.strip():  # a last request without its newline
                            conn.sendall(self._handle(buf))
                        return
                    buf += chunk
                line, nl, rest = buf.partition(b"\n")
                if not nl or len(line) + 1 > MAX_REQUEST:
                    conn.sendall(error_reply(f"request longer than {MAX_REQUEST} bytes"))
                    _hang_up(conn)  # the rest of it is not served
                    return
                buf = rest
                if line.strip():
                    self.served += 1
                    conn.sendall(self._handle(line))
        except (OSError, TimeoutError):
            pass
        finally:
            conn.close()
            self._clients.release()

    def _handle(self, line: bytes) -> bytes:
        try:
            return self._exec.submit(handle_line, line, self.ctl).result()
        except RuntimeError:  # shut down: the IPS is stopping
            return error_reply("fipstop ips is stopping")

    def close(self) -> None:
        self._stop.set()
        self._exec.shutdown(wait=True, cancel_futures=True)
        try:
            self._sock.close()
        except OSError:
            pass
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        if self._ident is not None and self._stat_ident(self.path) == self._ident:
            try:
                os.unlink(self.path)  # ours still: another IPS's replacement is left alone
            except OSError:
                pass


# -- client ----------------------------------------------------------------------------------------------

def request(path: str, req: dict[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    """Send one request, return the reply object; :class:`ControlError` when there is no answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        try:
            s.connect(path)
        except FileNotFoundError:
            raise ControlError(f"no fipstop ips is running there: {path} does not exist", "absent") from None
        except ConnectionRefusedError:
            raise ControlError(f"no fipstop ips is running there: {path} refuses connections (stale socket)",
                               "absent") from None
        except PermissionError:
            raise ControlError(f"permission denied: {path} (owner only: run as root or as the IPS's user)",
                               "denied") from None
        except OSError as exc:
            raise ControlError(f"{path}: {exc.strerror or exc}", "absent") from None
        buf = b""
        try:
            try:
                s.sendall(json.dumps(req, separators=(",", ":")).encode() + b"\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # it hung up without reading (a refused peer): its one-line answer is still ours to read
            while b"\n" not in buf and len(buf) <= MAX_REPLY:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:  # after its answer: what it did not read was dropped
                    break
                if not chunk:
                    break
                buf += chunk
        except TimeoutError:
            raise ControlError(f"{path}: no answer within {timeout_s:g} s", "protocol") from None
        except OSError as exc:
            raise ControlError(f"{path}: {exc.strerror or exc}", "protocol") from None
    finally:
        s.close()
    line = buf.partition(b"\n")[0]
    if not line.strip():
        raise ControlError(f"{path}: the connection closed without an answer", "protocol")
    try:
        rep = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ControlError(f"{path}: not a fipstop ips control socket (reply is not JSON)", "protocol") from None
    if not isinstance(rep, dict) or not isinstance(rep.get("ok"), bool):
        raise ControlError(f"{path}: not a fipstop ips control socket (unexpected reply)", "protocol")
    err = rep.get("error")
    if not rep["ok"] and isinstance(err, str) and err.startswith("permission denied"):
        raise ControlError(err, "denied")
    return rep
