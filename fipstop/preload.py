"""The syslog(3) drop-in and whether a program can take it (LD_PRELOAD).

``libfips_syslog.so`` replaces syslog, vsyslog, __syslog_chk and
__vsyslog_chk; the build puts it inside the package.  The loader silently
ignores LD_PRELOAD in two cases, and :func:`check_preloadable` refuses them
with the reason: set-uid/set-gid (or, for non-root, file-capability)
binaries, and statically linked ones.  :func:`preload_env` is the
environment that makes a program log into a domain.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Mapping
from pathlib import Path

from fipstop.errors import FipsError

__all__ = ["BIND_FACILITIES", "BIND_NATIVE_SHIM_NAME", "BIND_SHIM_NAME", "SHIM_NAME", "SYSLOG_FUNCTIONS",
           "bind_native_shim_path", "bind_shim_path", "has_native_query_hook",
           "check_preloadable", "elf_kind", "file_capabilities", "imported_functions", "preload_env", "shim_path"]

SHIM_NAME = "libfips_syslog.so"
#: the drop-in plus BIND 9's ns_client_log/ns_client_logv (fipstop/csrc/fips_bind.c), built where bind9-dev is
BIND_SHIM_NAME = "libfips_bind.so"
#: fips_bind.c built for a named patched with contrib/bind/fips-native.patch: only the binary query hook
BIND_NATIVE_SHIM_NAME = "libfips_bindq.so"
#: the symbol the patched libns defines (fipstop/csrc/fips_bindq.h)
NATIVE_HOOK = b"ns_fips_query_hook"
#: the facility names FIPS_BIND_FACILITY takes (fips_bind.c's table)
BIND_FACILITIES = ("kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
                   "ftp", *(f"local{i}" for i in range(8)))
#: what the shim replaces: a program that imports none of them logs some other way
SYSLOG_FUNCTIONS = frozenset({"syslog", "vsyslog", "__syslog_chk", "__vsyslog_chk"})
_MAX_ELF_TABLE = 64 << 20


def shim_path() -> Path:
    """Where the build put the preload shim (inside the package)."""
    return Path(__file__).resolve().parent / "lib" / SHIM_NAME


def bind_shim_path() -> Path:
    """Where the build put the BIND preload (absent when bind9-dev was not installed at build time)."""
    return Path(__file__).resolve().parent / "lib" / BIND_SHIM_NAME


def bind_native_shim_path() -> Path:
    """Where the build put the BIND preload for the patched named (beside libfips_bind.so)."""
    return Path(__file__).resolve().parent / "lib" / BIND_NATIVE_SHIM_NAME


def has_native_query_hook(libs: list[str]) -> bool:
    """Whether one of ``libs`` (a program's own libraries) is a libns patched with contrib/bind/fips-native.patch:
    its dynamic string table names ns_fips_query_hook.  A byte search, not a symbol lookup: the preload checks with
    dlsym at load time and says so in one line when it is wrong."""
    for lib in libs:
        if os.path.basename(lib).startswith("libns"):
            try:
                size = os.path.getsize(lib)
                if size > _MAX_ELF_TABLE:
                    continue
                with open(lib, "rb") as f:
                    if NATIVE_HOOK + b"\0" in f.read():
                        return True
            except OSError:
                continue
    return False


def elf_kind(path: str) -> str:
    """'dynamic', 'static', or 'script'/'other' for a non-ELF file.

    A binary with no PT_INTERP program header is run without the dynamic
    loader, which is what reads LD_PRELOAD."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:2] == b"#!":
                return "script"
            if len(head) < 64 or head[:4] != b"\x7fELF":
                return "other"
            is64 = head[4] == 2
            endian = "<" if head[5] == 1 else ">"
            if is64:
                phoff, = struct.unpack_from(endian + "Q", head, 0x20)
                phentsize, phnum = struct.unpack_from(endian + "HH", head, 0x36)
            else:
                phoff, = struct.unpack_from(endian + "I", head, 0x1C)
                phentsize, phnum = struct.unpack_from(endian + "HH", head, 0x2A)
            if phnum == 0 or phnum > 4096 or phentsize < 4:
                return "static"
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                if len(table) < (i + 1) * phentsize:
                    break
                p_type, = struct.unpack_from(endian + "I", table, i * phentsize)
                if p_type == 3:  # PT_INTERP
                    return "dynamic"
            return "static"
    except OSError as exc:
        raise FipsError(f"{path}: {exc.strerror}") from None


def imported_functions(path: str) -> frozenset[str] | None:
    """The undefined (imported) symbols of an ELF file's dynamic symbol
    table, or None when that cannot be read (not ELF, no .dynsym, damaged).

    Why: util-linux ``logger`` and other programs write to /dev/log
    themselves instead of calling syslog(3); the shim cannot see them, and
    ``fipstop wrap`` says so before it runs one."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF":
                return None
            is64, e = head[4] == 2, "<" if head[5] == 1 else ">"
            if is64:
                shoff, = struct.unpack_from(e + "Q", head, 0x28)
                shentsize, shnum = struct.unpack_from(e + "HH", head, 0x3A)
                sh_fmt, sym_size = e + "IIQQQQIIQQ", 24
            else:
                shoff, = struct.unpack_from(e + "I", head, 0x20)
                shentsize, shnum = struct.unpack_from(e + "HH", head, 0x2E)
                sh_fmt, sym_size = e + "IIIIIIIIII", 16
            if not shoff or not 0 < shnum <= 65535 or shentsize < struct.calcsize(sh_fmt):
                return None
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            sections = [struct.unpack_from(sh_fmt, table, i * shentsize) for i in range(shnum)
                        if len(table) >= (i + 1) * shentsize]

            def read(offset: int, size: int) -> bytes:
                if size > _MAX_ELF_TABLE:
                    raise ValueError("section too large")
                f.seek(offset)
                return f.read(size)

            for sec in sections:
                _, sh_type, _, _, offset, size, link = sec[:7]
                if sh_type != 11 or link >= len(sections):  # SHT_DYNSYM
                    continue
                syms = read(offset, size)
                strtab = read(sections[link][4], sections[link][5])
                names = set()
                for i in range(len(syms) // sym_size):
                    if is64:
                        name, _, _, shndx = struct.unpack_from(e + "IBBH", syms, i * sym_size)
                    else:
                        name, = struct.unpack_from(e + "I", syms, i * sym_size)
                        shndx, = struct.unpack_from(e + "H", syms, i * sym_size + 14)
                    if shndx == 0 and 0 < name < len(strtab):
                        end = strtab.find(b"\0", name)
                        names.add(strtab[name:end if end >= 0 else None].decode("ascii", "replace"))
                return frozenset(n.split("@", 1)[0] for n in names)
            return None
    except (OSError, struct.error, ValueError):
        return None


def file_capabilities(path: str) -> bytes | None:
    """The raw ``security.capability`` xattr of path (file capabilities), or None."""
    try:
        return os.getxattr(path, "security.capability")
    except OSError:
        return None


def check_preloadable(path: str) -> None:
    """Raise FipsError when LD_PRELOAD cannot work for this executable.

    The kernel runs a program in secure-execution mode (AT_SECURE), where the
    loader ignores LD_PRELOAD paths, when exec changes its credentials: a
    set-uid file owned by someone other than our *real* uid, a set-gid file
    of another group than our real gid, or (for a caller whose real uid is not
    0) a file with capabilities."""
    st = os.stat(path)
    uid, gid = os.getuid(), os.getgid()
    if st.st_mode & stat.S_ISUID and st.st_uid != uid:
        raise FipsError(f"{path} is set-uid (owner uid {st.st_uid}): the dynamic loader ignores LD_PRELOAD for it; "
                        "run it as its owner or point its logging at a syslog socket instead")
    if st.st_mode & stat.S_ISGID and st.st_gid != gid:
        raise FipsError(f"{path} is set-gid (group {st.st_gid}): the dynamic loader ignores LD_PRELOAD for it")
    if uid != 0 and file_capabilities(path) is not None:
        raise FipsError(f"{path} has file capabilities (see getcap): the dynamic loader ignores LD_PRELOAD for it "
                        "unless run by root")
    kind = elf_kind(path)
    if kind == "static":
        raise FipsError(f"{path} is statically linked: it has no syslog(3) the shim could replace")


def preload_env(base: Mapping[str, str], *, domain: str, shm_dir: str, missing: str = "passthrough",
                ring_size: int | None = None, shim: Path | None = None) -> dict[str, str]:
    """``base`` with the shim (``shim``, default the syslog drop-in) preloaded
    (before any LD_PRELOAD already there) and its settings: the domain, the
    shm dir, what to do when the domain is missing, the ring size when the
    shim creates it."""
    env = dict(base)
    shim = shim or shim_path()
    preload = env.get("LD_PRELOAD", "").strip()
    env["LD_PRELOAD"] = f"{shim} {preload}".strip() if preload else str(shim)
    env["FIPS_DOMAIN"] = domain
    env["FIPS_SHM_DIR"] = shm_dir
    env["FIPS_SYSLOG_MISSING"] = missing
    if ring_size:
        env["FIPS_RING_SIZE"] = str(ring_size)
    return env
