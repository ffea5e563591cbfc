"""``fipstop wrap``: run an unmodified program with syslog(3) going into FIPS rings.

Most servers log through syslog(3) and will never be patched; the preload shim
(libfips_syslog.so) replaces syslog, vsyslog, __syslog_chk and __vsyslog_chk.
This command creates the domain when needed, sets LD_PRELOAD and the shim's
environment, and execs the program, so the program keeps its pid (a service
manager or a test sees the real server). It refuses, with the reason, the two
cases where the loader would silently ignore the shim: set-uid/set-gid
binaries and statically linked ones.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import struct
from pathlib import Path

from fipstop.errors import FipsError

SHIM_NAME = "libfips_syslog.so"
DEFAULT_DOMAIN = "syslog"


def shim_path() -> Path:
    """Where the build put the preload shim (inside the package)."""
    return Path(__file__).resolve().parent / "lib" / SHIM_NAME


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "wrap",
        help="run a program with its syslog(3) logging into FIPS rings (LD_PRELOAD)",
        description="Create the domain if needed, preload the syslog shim and exec CMD.",
    )
    p.add_argument("--domain", default=DEFAULT_DOMAIN, metavar="NAME", help="domain name (default: syslog)")
    p.add_argument("--ring-size", type=_size, default=None, metavar="BYTES",
                   help="ring capacity when the domain is created (power of two, e.g. 1M)")
    p.add_argument("--max-rings", type=int, default=256, help="ring slots when the domain is created")
    p.add_argument("--max-record", type=int, default=4096, help="longest record when the domain is created")
    p.add_argument("--missing", choices=("passthrough", "drop", "create"), default="passthrough",
                   help="if the domain cannot be opened in the program (e.g. removed meanwhile): call the real "
                        "syslog (default), drop and count, or create it again")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=run)


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    mult = 1
    if t and t[-1] in units:
        mult = units[t[-1]]
        t = t[:-1]
    try:
        value = int(t, 0) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value <= 0 or value & (value - 1):
        raise argparse.ArgumentTypeError(f"ring size must be a power of two, got {value}")
    return value


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


def run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise FipsError("wrap: no command given (usage: fipstop wrap [--domain D] -- CMD ARGS...)")
    exe = shutil.which(cmd[0])
    if exe is None:
        raise FipsError(f"wrap: {cmd[0]}: command not found")
    check_preloadable(exe)
    shim = shim_path()
    if not shim.exists():
        raise FipsError(f"{shim} is missing: build it with `make lib`")

    from fipstop import _fips

    kwargs = {"max_rings": args.max_rings, "max_record": args.max_record}
    if args.ring_size:
        kwargs["ring_capacity"] = args.ring_size
    try:
        _fips.Domain(args.domain, args.shm_dir, create=True, **kwargs).close()
    except _fips.FipsError as exc:
        raise FipsError(str(exc)) from None

    env = dict(os.environ)
    preload = env.get("LD_PRELOAD", "").strip()
    env["LD_PRELOAD"] = f"{shim} {preload}".strip() if preload else str(shim)
    env["FIPS_DOMAIN"] = args.domain
    env["FIPS_SHM_DIR"] = _fips.shm_dir(args.shm_dir)
    env["FIPS_SYSLOG_MISSING"] = args.missing
    if args.ring_size:
        env["FIPS_RING_SIZE"] = str(args.ring_size)
    try:
        os.execve(exe, cmd, env)
    except OSError as exc:
        raise FipsError(f"wrap: cannot run {exe}: {exc.strerror}") from None
    return 127  # not reached
