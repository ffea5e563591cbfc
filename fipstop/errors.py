"""Errors that the command line reports as one line, without a traceback."""

from __future__ import annotations


class FipsError(Exception):
    """An expected failure with a one-line message for the user.

    ``fipstop.cli.main`` prints ``fipstop: <message>`` to stderr and exits with
    ``exit_code`` (2 unless given).
    """

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        """The message folded onto one line."""
        lines = [line.strip() for line in str(self).splitlines() if line.strip()]
        return "; ".join(lines) or type(self).__name__


def one_line(text: object, limit: int | None = None) -> str:
    """``text`` with every run of whitespace (newlines included) made one space,
    cut to ``limit`` characters: what a status line, a table cell or a JSON
    "reason" can hold."""
    s = " ".join(str(text).split())
    return s if limit is None else s[:limit]


def exc_line(exc: BaseException, limit: int | None = None) -> str:
    """``Type: message`` of an exception on one line (see :func:`one_line`)."""
    return one_line(f"{type(exc).__name__}: {exc}", limit)
