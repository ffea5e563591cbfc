"""Three ways to hand an nft script to the kernel, each returning ``"ok"`` or one error line.

* :class:`LibNft`: libnftables in this process (ctypes, ``nft_run_cmd_from_buffer``).
  No fork, no exec, no re-parse of the ruleset cache per process: this is why
  ``fipstop ips --action nft`` uses it when ``libnftables.so.1`` loads.
* :class:`ExecNft`: ``nft -f -`` forked per script, the fallback (and what a
  test's wrapper script stands in for).
* :class:`InteractiveNft`: one persistent ``nft -i`` fed a line per command.
  Measured against the other two by ``fipstop bench nft`` only: it cannot make
  one transaction of several lines, and it learns a command's end only from a
  sentinel command's error, so it is not an action back-end.

A script is one transaction for the first two (all or nothing), exactly like
``nft -f``.  Errors read like the nft binary's (``nft exit 1: Error: ...``):
libnftables fails exactly when ``nft -f`` would exit 1, with the same text.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import threading

OK = "ok"
LIBNAME = "libnftables.so.1"


def one_line(text: str, limit: int = 160) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "\u2026"


class LibNft:
    """One libnftables context, serialised by a lock (a context is not thread-safe).

    ctypes drops the GIL during the call, so reader threads keep matching while
    the kernel commits.  Output and error are buffered in the context (never
    written to our stderr) and read back after every command, which also resets them.
    """

    name = "libnftables"

    def __init__(self, lib: str = LIBNAME) -> None:
        self._lib = ctypes.CDLL(lib)  # OSError when missing: the caller falls back
        lb = self._lib
        lb.nft_ctx_new.restype = ctypes.c_void_p
        lb.nft_ctx_new.argtypes = [ctypes.c_uint32]
        lb.nft_ctx_free.argtypes = [ctypes.c_void_p]
        lb.nft_ctx_free.restype = None
        for fn in (lb.nft_ctx_buffer_output, lb.nft_ctx_buffer_error):
            fn.argtypes = [ctypes.c_void_p]
            fn.restype = ctypes.c_int
        for fn in (lb.nft_ctx_get_output_buffer, lb.nft_ctx_get_error_buffer):
            fn.argtypes = [ctypes.c_void_p]
            fn.restype = ctypes.c_char_p
        lb.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lb.nft_run_cmd_from_buffer.restype = ctypes.c_int
        ctx = lb.nft_ctx_new(0)  # NFT_CTX_DEFAULT
        if not ctx:
            raise OSError("nft_ctx_new returned NULL")
        if lb.nft_ctx_buffer_output(ctx) or lb.nft_ctx_buffer_error(ctx):
            lb.nft_ctx_free(ctx)
            raise OSError("nft_ctx_buffer_output/error failed")
        self._ctx = ctx
        self._lock = threading.Lock()

    def run(self, script: str) -> str:
        return self.query(script)[0]

    def query(self, script: str) -> tuple[str, str]:
        """(``"ok"`` or the error line, stdout text)."""
        lb = self._lib
        with self._lock:
            if self._ctx is None:
                return "nft: libnftables context closed", ""
            rc = lb.nft_run_cmd_from_buffer(self._ctx, script.encode())
            out = (lb.nft_ctx_get_output_buffer(self._ctx) or b"").decode("utf-8", "replace")
            err = (lb.nft_ctx_get_error_buffer(self._ctx) or b"").decode("utf-8", "replace")
        if rc != 0:
            return one_line(f"nft exit 1: {err.strip() or out.strip() or 'failed (no message)'}"), out
        return OK, out

    def close(self) -> None:
        with self._lock:
            if self._ctx is not None:
                self._lib.nft_ctx_free(self._ctx)
                self._ctx = None


class ExecNft:
    """``nft -f -`` per script: a fork and exec, and nft re-reads the ruleset cache each time."""

    name = "nft -f"

    def __init__(self, nft: str, timeout_s: float) -> None:
        self.nft, self.timeout_s = nft, timeout_s

    def run(self, script: str) -> str:
        try:
            p = subprocess.run([self.nft, "-f", "-"], input=script, text=True, capture_output=True,
                               timeout=self.timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            return one_line(f"nft: {exc}")
        if p.returncode != 0:
            return one_line(f"nft exit {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
        return OK

    def query(self, script: str) -> tuple[str, str]:
        try:
            p = subprocess.run([self.nft, *script.split()], capture_output=True, text=True, timeout=self.timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            return one_line(f"nft: {exc}"), ""
        if p.returncode != 0:
            return one_line(f"nft exit {p.returncode}: {p.stderr.strip()}"), p.stdout
        return OK, p.stdout

    def close(self) -> None:
        pass


class InteractiveNft:
    """One ``nft -i`` process; each command line is its own transaction.

    nft prints nothing on success, so after the command we send one that must
    fail (deleting a table that cannot exist, named with a sequence number) and
    read stderr up to its echo: whatever error came before it is the command's.
    """

    name = "nft -i"

    def __init__(self, nft: str) -> None:
        self._p = subprocess.Popen([nft, "-i"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, bufsize=1)
        self._seq = 0
        self._lock = threading.Lock()

    def run(self, script: str) -> str:
        assert self._p.stdin is not None and self._p.stderr is not None
        with self._lock:
            self._seq += 1
            mark = f"fipstop_sentinel_{self._seq}"
            lines = [ln for ln in script.splitlines() if ln.strip()]
            try:
                self._p.stdin.write("\n".join(lines) + f"\ndelete table ip {mark}\n")
                self._p.stdin.flush()
            except OSError as exc:
                return one_line(f"nft -i: {exc}")
            errors: list[str] = []
            while True:
                ln = self._p.stderr.readline()
                if not ln:
                    return one_line(f"nft -i exited {self._p.poll()}: {' '.join(errors)}")
                if mark in ln:
                    self._p.stderr.readline()  # the ^^^ line under the echo
                    break
                errors.append(ln.strip())
        # the sentinel's own "Error: No such file or directory" is the last error line before its echo
        real = errors[:-1]
        return one_line("nft exit 1: " + " ".join(real)) if real else OK

    def close(self) -> None:
        if self._p.stdin is not None:
            self._p.stdin.close()
        self._p.wait(timeout=10)
