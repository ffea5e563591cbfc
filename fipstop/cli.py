"""The ``fipstop`` command line.

Subcommands live in the modules of :mod:`fipstop.commands` listed in
``COMMANDS``; this is the only module that imports them. Each exposes::

    def register(subparsers) -> None:
        p = subparsers.add_parser("snapshot", help="...")
        p.add_argument(...)
        p.set_defaults(func=run)

    def run(args) -> int | None:   # None means 0
        ...

``args`` carries the global options (``args.shm_dir``). ``run`` builds the
library's config objects from ``args`` and raises
``fipstop.errors.FipsError`` for expected failures; ``main`` prints it as one
line (``fipstop: <message>``) and exits with its ``exit_code`` (2 by default).
Heavy imports (textual, numpy, the C binding) stay inside ``run`` so that
``fipstop --help`` stays fast.

A listed module that does not exist (yet) is skipped silently; one that exists
but fails to import or register is skipped with a one-line warning on stderr.

Options before the command (``fipstop --watch-file F snapshot``) are the
dashboard's; argparse would let the command's own defaults overwrite them
silently.  :func:`merge_global_options` honours each one the command takes
too (repeatable ones add up) and refuses, in one line, one it does not take
or one given before and after with different values: never dropped.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from fipstop import __version__
from fipstop.commands import top
from fipstop.commands.options import add_dashboard_options
from fipstop.errors import FipsError

PROG = "fipstop"
DEFAULT_SHM_DIR = "/dev/shm"

#: Command modules, imported when the parser is built, in this order.
COMMANDS: list[str] = [
    "fipstop.commands.top",
    "fipstop.commands.snapshot",
    "fipstop.commands.tail",
    "fipstop.commands.wrap",
    "fipstop.commands.profile",
    "fipstop.commands.ips",
    "fipstop.commands.ips_client",
    "fipstop.commands.demo",
    "fipstop.commands.record",
    "fipstop.commands.replay",
    "fipstop.commands.export",
    "fipstop.commands.serve",
    "fipstop.commands.check",
    "fipstop.commands.diagnose",
    "fipstop.commands.bench",
]


class ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors on one line: ``fipstop: <message>``, exit 2.

    A command may answer its usage errors itself: ``set_defaults(usage_error=F)``
    with ``F(prog, message) -> exit status`` (``fipstop check`` is a Nagios
    plugin: a bad option is UNKNOWN, 3, on stdout).  Unrecognized arguments
    are reported by the command they were given to, so that rule holds for
    them too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        handler = self.get_default("usage_error")
        if callable(handler):
            self.exit(int(handler(self.prog, message)))
        self.exit(2, f"{self.prog}: {message}\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self._command_parser(parsed).error("unrecognized arguments: " + " ".join(extra))
        return parsed

    def _command_parser(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The (sub)parser of the command ``parsed`` ran, deepest first; this parser when none."""
        parser: argparse.ArgumentParser = self
        while True:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            name = vars(parsed).get(subs[0].dest) if subs else None
            if not isinstance(name, str) or name not in subs[0].choices:
                break
            parser = subs[0].choices[name]
        return parser


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
        register = vars(module).get("register")
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
    add_dashboard_options(parser)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command")
    _register_commands(subparsers, COMMANDS if modules is None else modules)
    parser.set_defaults(_commands=subparsers.choices)
    _add_version(parser)
    return parser


def _global_parser() -> argparse.ArgumentParser:
    """The dashboard's options only, defaults suppressed: what was given
    before the command (the rest, from the command on, is left alone)."""
    p = argparse.ArgumentParser(prog=PROG, add_help=False)
    p.add_argument("--shm-dir", default=argparse.SUPPRESS)  # global: every command reads it from here
    add_dashboard_options(p, suppress_defaults=True)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def merge_global_options(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """Put the dashboard options given before ``args.command`` into ``args``
    (see the module docstring); raises FipsError for one that cannot be."""
    commands = vars(args).pop("_commands", None)
    if not args.command or not commands or args.command not in commands:
        return
    try:
        before, _ = _global_parser().parse_known_args(list(argv))
    except SystemExit:  # a malformed value: the full parser has said so already
        return
    given = {k: v for k, v in vars(before).items() if k not in ("rest", "shm_dir")}
    if not given:
        return
    sub = commands[args.command]
    actions = {a.dest: a for a in sub._actions}
    flags = {a.dest: a.option_strings[-1] for a in _global_parser()._actions if a.option_strings}
    for dest, value in given.items():
        flag = flags.get(dest, dest)
        action = actions.get(dest)
        if action is None:
            raise FipsError(f"{flag} before `{args.command}`: `fipstop {args.command}` does not take it "
                            "(options before a command are the dashboard's)")
        after = getattr(args, dest, None)
        if isinstance(action, argparse._AppendAction):
            setattr(args, dest, [*value, *(after or [])])
        elif isinstance(value, list):  # repeatable in the dashboard, once in this command
            if len(value) != 1 or (after not in (None, sub.get_default(dest)) and after != value[0]):
                raise FipsError(f"{flag} before `{args.command}`: give it once, after the command")
            setattr(args, dest, value[0])
        elif after in (None, sub.get_default(dest)) or after == value:
            setattr(args, dest, value)
        else:
            raise FipsError(f"{flag} given before and after `{args.command}` with different values")


def _add_version(parser: argparse.ArgumentParser) -> None:
    """``--version`` on every (sub)command that has none of its own."""
    if "--version" not in parser._option_string_actions:
        parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_version(sub)


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
        merge_global_options(args, sys.argv[1:] if argv is None else argv)
        func = vars(args).get("func")
        if func is None:  # no command: the live monitor, as `fipstop top`
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
