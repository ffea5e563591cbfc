"""The ``fipstop`` command line.

Subcommands live in small modules listed in ``COMMANDS``. Each such module
exposes::

    def register(subparsers) -> None:
        p = subparsers.add_parser("snapshot", help="...")
        p.add_argument(...)
        p.set_defaults(func=run)

    def run(args) -> int | None:   # None means 0
        ...

``args`` carries the global options (``args.shm_dir``). ``run`` raises
``fipstop.errors.FipsError`` for expected failures; ``main`` prints it as one
line (``fipstop: <message>``) and exits with its ``exit_code`` (2 by default).
Keep heavy imports (textual, numpy, the C binding) inside ``run`` so that
``fipstop --help`` stays fast.

A listed module that does not exist (yet) is skipped silently; one that exists
but fails to import or register is skipped with a one-line warning on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from fipstop import __version__
from fipstop.errors import FipsError

PROG = "fipstop"
DEFAULT_SHM_DIR = "/dev/shm"

#: Command modules, imported when the parser is built, in this order.
COMMANDS: list[str] = [
    "fipstop.top",
    "fipstop.snapshot",
    "fipstop.tail",
    "fipstop.wrap",
    "fipstop.profile.cli",
    "fipstop.ips.cli",
    "fipstop.demo",
    "fipstop.record",
    "fipstop.replay",
    "fipstop.export",
    "fipstop.serve",
    "fipstop.check",
    "fipstop.diagnose",
    "fipstop.bench.cli",
]


class ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors on one line: ``fipstop: <message>``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message}\n")


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _is_missing(module: str, exc: ModuleNotFoundError) -> bool:
    """True when ``module`` itself (or a package above it) does not exist."""
    missing = exc.name or ""
    return bool(missing) and (module == missing or module.startswith(missing + "."))


def _register_commands(subparsers: argparse._SubParsersAction, modules: Sequence[str]) -> None:
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not _is_missing(name, exc):
                _warn(f"skipping {name}: {exc}")
            continue
        except Exception as exc:  # a broken command must not take the others down
            _warn(f"skipping {name}: {type(exc).__name__}: {exc}")
            continue
        register = getattr(module, "register", None)
        if not callable(register):
            _warn(f"skipping {name}: it has no register(subparsers)")
            continue
        try:
            register(subparsers)
        except Exception as exc:
            _warn(f"skipping {name}: register failed: {type(exc).__name__}: {exc}")


def build_parser(modules: Sequence[str] | None = None) -> ArgumentParser:
    """The full parser, with every available command module registered."""
    parser = ArgumentParser(
        prog=PROG,
        description="Monitor, record and diagnose FIPS shared-memory logging rings.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument(
        "--shm-dir",
        metavar="DIR",
        default=os.environ.get("FIPS_SHM_DIR") or DEFAULT_SHM_DIR,
        help="directory that holds the FIPS domains (default: $FIPS_SHM_DIR or %(default)s)",
    )
    # `fipstop` alone runs the dashboard: its options are accepted here too
    from fipstop.top import add_options as add_dashboard_options

    add_dashboard_options(parser)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command")
    _register_commands(subparsers, COMMANDS if modules is None else modules)
    return parser


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, --version, usage errors
            return _exit_code(exc.code)
        func = getattr(args, "func", None)
        if func is None:
            # No command: the live monitor (fipstop.top), as `fipstop top`.
            try:
                from fipstop import top
            except ImportError as exc:
                _warn(f"the live monitor is not available: {exc}")
                parser.print_help()
                return 2
            return _exit_code(top.run(args))
        return _exit_code(func(args))
    except FipsError as err:
        print(f"{PROG}: {err.message}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`fipstop ... | head`): no traceback, and no
        # second error when Python flushes stdout at exit.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141


if __name__ == "__main__":
    raise SystemExit(main())
