"""The text of a ring record, with BIND's binary query records formatted back into BIND's line.

A named built with contrib/bind/fips-native.patch and run under ``fipstop wrap --bind`` logs each query as a binary
record (flag ``REC_BIND_QUERY``, payload magic ``FQB``; fipstop/csrc/fips_bindq.h) instead of a line: the server
skips all of the line's string building.  Every reader that shows records as text (``fipstop tail``, the dashboard's
tap) goes through :func:`record_text`, so they show the line BIND would have written; ``fipstop ips`` formats them
in C before matching (the same formatter).  The flag is one of the ring format's application bits, so a record of
another program may carry it too: only a payload with the magic is treated as BIND's.
"""

from __future__ import annotations

MAGIC = b"FQB"
INVALID = b"[invalid binary query record] "


def record_text(data: bytes | memoryview, flags: int) -> bytes | memoryview:
    """The record's text: BIND's line for a valid binary query record, the bytes marked ``[invalid binary query
    record]`` for one that carries the magic but does not validate (shared memory is hostile input), else the
    payload as it is."""
    from fipstop import _fips

    if not flags & _fips.REC_BIND_QUERY or bytes(data[:3]) != MAGIC:  # data may be a Record's memoryview
        return data
    text = _fips.format_bind_query(data)
    return text if text is not None else INVALID + bytes(data)
