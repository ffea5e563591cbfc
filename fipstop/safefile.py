"""Reading a small configuration file that may be anything.

A path on the command line or in an include may name /dev/zero (read for
ever), a FIFO nobody writes (open blocks for ever) or a 10 GB file.  Every
configuration file fipstop reads (jail configs, Fail2Ban filters and their
includes) goes through :func:`read_regular`: opened without blocking, refused
unless it is a regular file, and refused beyond ``limit`` bytes, each in one
line naming the file.
"""

from __future__ import annotations

import os
import stat

__all__ = ["MAX_CONFIG_BYTES", "NotRegular", "read_regular"]

#: Fail2Ban's largest filter is ~20 KB; a config a thousand times that is no config
MAX_CONFIG_BYTES = 16 << 20


class NotRegular(OSError):
    """The path is not a regular file, or is too large; str() says which, in one line."""


def read_regular(path: str | os.PathLike[str], limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of the regular file ``path``.  FileNotFoundError / IsADirectoryError / OSError
    as open(2) raises them; :class:`NotRegular` for a device, FIFO or socket, or a file over ``limit``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", os.fspath(path))
        if not stat.S_ISREG(st.st_mode):
            kind = ("a character device" if stat.S_ISCHR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
                    else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "not a regular file")
            raise NotRegular(f"{os.fspath(path)} is {kind}, not a regular file")
        if st.st_size > limit:
            raise NotRegular(f"{os.fspath(path)} is {st.st_size} bytes, more than {limit} (not a configuration file)")
        chunks = []
        left = limit + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > limit:
            raise NotRegular(f"{os.fspath(path)} grew past {limit} bytes while read (not a configuration file)")
        return data
    finally:
        os.close(fd)
