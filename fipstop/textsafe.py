"""Escaping of attacker-controlled text before it reaches a terminal.

Log records carry DNS names and other text chosen by whoever sends packets to
the host; process and thread names are chosen by whoever runs a process. None
of it may move the cursor, change colours or be read as textual markup, so
every path that shows such text goes through these functions.
"""

from __future__ import annotations

import re
import unicodedata

_UNSAFE_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
# Printable ASCII other than the backslash needs no escaping: most log lines
# are exactly that, and skip the per-character loop.
_PLAIN_TEXT = re.compile(r"[\x20-\x5b\x5d-\x7e]*\Z")
_PLAIN_BYTES = re.compile(rb"[\x20-\x5b\x5d-\x7e]*\Z")


def escape_text(text: str) -> str:
    """Control and other invisible characters (C0, DEL, C1, bidi overrides,
    line separators, ...) become ``\\xNN`` / ``\\uNNNN``, and a backslash is
    doubled so that the literal text ``\\x1b`` cannot pass for an escaped ESC.
    Markup like ``[bold]`` is left as literal characters: callers show the
    result as plain text, never as markup."""
    if _PLAIN_TEXT.match(text):
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif 0xDC80 <= o <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x20 or 0x7F <= o <= 0x9F:
            out.append(f"\\x{o:02x}")
        elif o > 0x7F and unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        else:
            out.append(ch)
    return "".join(out)


def escape_bytes(data: bytes | bytearray | memoryview) -> str:
    """A record's payload as safe text: valid UTF-8 is kept (then escaped as
    above), every byte that is not becomes ``\\xNN``. Byte-exact data stays in
    the ring; only what is shown is escaped."""
    raw = bytes(data)
    if _PLAIN_BYTES.match(raw):
        return raw.decode("ascii")
    return escape_text(raw.decode("utf-8", errors="surrogateescape"))
