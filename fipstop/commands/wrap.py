"""``fipstop wrap``: run an unmodified program with syslog(3) going into FIPS rings.

Most servers log through syslog(3) and will never be patched; the preload
shim (:mod:`fipstop.preload`) replaces it.  This command creates the domain
when needed, sets LD_PRELOAD and the shim's environment, and execs the
program, so the program keeps its pid (a service manager or a test sees the
real server).  It refuses, with the reason, the cases where the loader would
silently ignore the shim.  A dynamic program that imports none of
syslog(3)'s functions (util-linux ``logger`` writes to /dev/log itself) runs,
after a one-line warning that says so and how such a program is captured.

``--bind`` preloads ``libfips_bind.so`` instead: the same drop-in, plus BIND
9's ``ns_client_log``, which takes the ``queries`` category before libns
formats it (fipstop/csrc/fips_bind.c); a named whose libns it was not built
for logs through the drop-in, after one line on stderr that says so.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys

from fipstop.errors import FipsError
from fipstop.textsafe import escape_text

DEFAULT_DOMAIN = "syslog"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "wrap",
        help="run a program with its syslog(3) logging into FIPS rings (LD_PRELOAD)",
        description="Create the domain if needed, preload the syslog shim and exec CMD.",
    )
    p.add_argument("--domain", default=DEFAULT_DOMAIN, metavar="NAME", help="domain name (default: syslog)")
    p.add_argument("--ring-size", type=_size, default=None, metavar="BYTES",
                   help="ring capacity when the domain is created (power of two, e.g. 1M)")
    p.add_argument("--max-rings", type=_count(1, 1 << 16), default=256,
                   help="ring slots when the domain is created (1..65536, default 256)")
    p.add_argument("--max-record", type=_count(16, 1 << 20), default=4096,
                   help="longest record in bytes when the domain is created (16..1048576, default 4096)")
    p.add_argument("--missing", choices=("passthrough", "drop", "create"), default="passthrough",
                   help="if the domain cannot be opened in the program (e.g. removed meanwhile): call the real "
                        "syslog (default), drop and count, or create it again")
    p.add_argument("--bind", action="store_true",
                   help="BIND 9 (named): take the queries category at ns_client_log, before libns formats it "
                        "(libfips_bind.so; same records as the syslog drop-in, much less work in named); in a named "
                        "built with contrib/bind/fips-native.patch (scripts/build-named-native.sh), take each query "
                        "as binary fields before log_query formats anything (readers format the same line)")
    p.add_argument("--facility", default=None, metavar="NAME",
                   help="with --bind: the syslog facility in the query lines' <PRI> (default daemon, as BIND's "
                        "default_syslog channel)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=run)


def _count(lo: int, hi: int):
    def conv(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {value}")
        return value
    return conv


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


def run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise FipsError("wrap: no command given (usage: fipstop wrap [--domain D] -- CMD ARGS...)")
    exe = shutil.which(cmd[0])
    if exe is None:
        raise FipsError(f"wrap: {cmd[0]}: command not found")
    from fipstop import _fips
    from fipstop.elfdyn import own_libraries
    from fipstop.preload import (
        BIND_FACILITIES,
        bind_native_shim_path,
        bind_shim_path,
        check_preloadable,
        has_native_query_hook,
        preload_env,
        shim_path,
    )

    if args.facility is not None and not args.bind:
        raise FipsError("wrap: --facility needs --bind (the syslog drop-in takes the facility from the program)")
    if args.facility is not None and args.facility not in BIND_FACILITIES:
        raise FipsError(f"wrap: unknown --facility {escape_text(args.facility)!r}; "
                        f"choose from {', '.join(BIND_FACILITIES)}")
    check_preloadable(exe)
    shim = bind_shim_path() if args.bind else shim_path()
    native = args.bind and has_native_query_hook(own_libraries(exe) or [])
    if native and bind_native_shim_path().exists():
        shim = bind_native_shim_path()  # the patched named: its binary hook, libns's own calls left direct
    if not shim.exists():
        why = " (it is built only where BIND's headers are: apt-get install bind9-dev)" if args.bind else ""
        raise FipsError(f"{shim} is missing: build it with `make lib`{why}")

    kwargs = {"max_rings": args.max_rings, "max_record": args.max_record}
    if args.ring_size:
        kwargs["ring_capacity"] = args.ring_size
    try:
        _fips.Domain(args.domain, args.shm_dir, create=True, **kwargs).close()
    except _fips.FipsError as exc:
        raise FipsError(str(exc)) from None

    warn_if_not_syslog(exe, args.domain)  # last: only when it does run
    if args.bind and not native:
        warn_if_bind_cannot_interpose(exe)
    env = preload_env(os.environ, domain=args.domain, shm_dir=_fips.shm_dir(args.shm_dir), missing=args.missing,
                      ring_size=args.ring_size, shim=shim)
    if args.bind:
        env["FIPS_BIND_FACILITY"] = args.facility or "daemon"
    try:
        os.execve(exe, cmd, env)
    except OSError as exc:
        raise FipsError(f"wrap: cannot run {exe}: {exc.strerror}") from None
    return 127  # not reached


#: a program that does call syslog(3): what such a program's output can be piped through
PIPE_THROUGH = "python3 -c 'import sys, syslog; [syslog.syslog(ln.rstrip()) for ln in sys.stdin]'"


#: what libfips_bind.so defines in place of libns's own
BIND_FUNCTIONS = frozenset({"ns_client_log", "ns_client_logv"})


def warn_if_bind_cannot_interpose(exe: str) -> None:
    """One line on stderr when the libns ``exe`` needs calls ns_client_log
    directly (built -Bsymbolic or with protected visibility: no PLT slot), so
    the preload can never take the queries category. (A libns that is absent
    or not the one the preload was built for is reported by the preload
    itself, when it loads.)"""
    from fipstop.elfdyn import find_needed, slot_relocated

    lib = find_needed(exe, "libns")
    slots = slot_relocated(lib) if lib else None
    if lib is None or slots is None:
        return
    missing = sorted(BIND_FUNCTIONS - slots)
    if missing:
        print(f"fipstop wrap: warning: {escape_text(lib)} calls {', '.join(missing)} directly (no PLT/GOT slot), so "
              "the --bind preload cannot take the queries category: query lines go through the syslog drop-in",
              file=sys.stderr)


#: a program that imports one of these can load code (a Python or Perl module) that calls syslog(3)
CODE_LOADERS = frozenset({"dlopen", "dlmopen"})


def warn_if_not_syslog(exe: str, domain: str) -> None:
    """One line on stderr when ``exe`` certainly calls none of the functions
    the shim replaces: whatever it logs bypasses the shim.

    Certain means: neither the executable nor its own libraries (found by its
    RUNPATH: pyenv's python is a stub over libpython) import a syslog(3)
    function or dlopen - an interpreter loads its syslog module at run time.
    The system's libraries are not counted: libgcrypt imports syslog for its
    own FIPS-mode messages, and util-linux logger, which needs it, still
    writes its own lines to /dev/log."""
    from fipstop.elfdyn import own_libraries
    from fipstop.preload import SYSLOG_FUNCTIONS, elf_kind, imported_functions

    if elf_kind(exe) != "dynamic":
        return  # a script: its interpreter decides (python3 calls syslog(3))
    libs = own_libraries(exe)
    if libs is None:
        return
    for obj in (exe, *libs):
        names = imported_functions(obj)
        if names is None or names & (SYSLOG_FUNCTIONS | CODE_LOADERS):
            return
    name = escape_text(os.path.basename(exe))
    print(f"fipstop wrap: warning: {name} calls no syslog(3) function ({', '.join(sorted(SYSLOG_FUNCTIONS))}), "
          f"so the shim sees none of its logging: it writes to /dev/log itself, as util-linux logger does. "
          f"Watch that socket instead (`fipstop --watch-socket /dev/log`), or pipe the text through a program "
          f"that calls syslog(3): `CMD | fipstop wrap --domain {shlex.quote(domain)} -- {PIPE_THROUGH}`",
          file=sys.stderr)
