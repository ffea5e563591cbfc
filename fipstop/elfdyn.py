"""What the dynamic loader sees in an ELF file: its section table, the
symbols it imports, the libraries it needs, and which of its calls go
through a relocatable slot (PLT/GOT) that an LD_PRELOAD can take.

Why: ``fipstop wrap --bind`` replaces ``ns_client_log``, which libns both
defines and calls.  A library linked with ``-Bsymbolic`` (or with protected
visibility) calls its own functions directly, and no preload can take those
calls; Debian's libns calls them through its PLT (``R_X86_64_JUMP_SLOT``
relocations, as ``readelf -rW`` shows).  Everything here reads the file
only, bounded (a table larger than 64 MiB is refused); a damaged or foreign
file gives None, never an exception.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["ElfFile", "find_needed", "needed_libraries", "open_elf", "own_libraries", "slot_relocated"]

MAX_TABLE = 64 << 20
SHT_RELA, SHT_DYNAMIC, SHT_DYNSYM = 4, 6, 11
DT_NEEDED, DT_RPATH, DT_RUNPATH = 1, 15, 29
# relocations that bind a call or a function pointer to whatever symbol the loader finds first
SLOT_RELOCS = {62: (7, 6), 183: (1026, 1025)}  # e_machine: x86-64 (JUMP_SLOT, GLOB_DAT), aarch64
LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib")


@dataclass(frozen=True)
class ElfFile:
    """The header fields and section table of one 64-bit little-endian ELF file."""

    machine: int
    sections: list[tuple[int, ...]]  # (name, type, flags, addr, offset, size, link, info, align, entsize)


def open_elf(f: BinaryIO) -> ElfFile | None:
    """The section table of an ELF64 LSB file (the only kind the loader here runs), or None."""
    head = f.read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
    machine, = struct.unpack_from("<H", head, 0x12)
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
    if not shoff or not 0 < shnum <= 65535 or shentsize < 64:
        return None
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    secs = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)
            if len(table) >= (i + 1) * shentsize]
    return ElfFile(machine, secs)


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    if size > MAX_TABLE:
        raise ValueError("section too large")
    f.seek(offset)
    return f.read(size)


def _cstr(tab: bytes, i: int) -> str:
    end = tab.find(b"\0", i)
    return tab[i:end if end >= 0 else None].decode("ascii", "replace")


def needed_libraries(path: str) -> list[str] | None:
    """The DT_NEEDED names of an ELF file, in order, or None when unreadable."""
    dyn = _dynamic_strings(path)
    return None if dyn is None else [v for t, v in dyn if t == DT_NEEDED]


def own_libraries(path: str) -> list[str] | None:
    """The libraries ``path`` needs that its own DT_RUNPATH / DT_RPATH finds
    (``$ORIGIN`` expanded), not the system's: a program's own code that lives
    in a library, as pyenv's python keeps its interpreter in libpython.  None
    when the file cannot be read."""
    dyn = _dynamic_strings(path)
    if dyn is None:
        return None
    origin = os.path.dirname(os.path.realpath(path))
    dirs = [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
            for t, v in dyn if t in (DT_RPATH, DT_RUNPATH) for d in v.split(":") if d]
    out = []
    for name in (v for t, v in dyn if t == DT_NEEDED and "/" not in v):
        for d in dirs:
            lib = os.path.join(d, name)
            if os.path.isfile(lib):
                out.append(lib)
                break
    return out


def _dynamic_strings(path: str) -> list[tuple[int, str]] | None:
    """The (tag, string) entries of an ELF file's dynamic section whose value
    is a string (NEEDED, RPATH, RUNPATH), in order; None when unreadable."""
    try:
        with open(path, "rb") as f:
            elf = open_elf(f)
            if elf is None:
                return None
            for sec in elf.sections:
                if sec[1] != SHT_DYNAMIC or sec[6] >= len(elf.sections):
                    continue
                dyn = _read(f, sec[4], sec[5])
                strtab = _read(f, elf.sections[sec[6]][4], elf.sections[sec[6]][5])
                out = []
                for i in range(len(dyn) // 16):
                    tag, val = struct.unpack_from("<qQ", dyn, i * 16)
                    if tag == 0:
                        break
                    if tag in (DT_NEEDED, DT_RPATH, DT_RUNPATH) and val < len(strtab):
                        out.append((tag, _cstr(strtab, val)))
                return out
            return []
    except (OSError, struct.error, ValueError):
        return None


def find_needed(exe: str, prefix: str) -> str | None:
    """The path of the first library ``exe`` needs whose name starts with
    ``prefix``, looked up in the usual library directories (not a full
    loader search: no RPATH, no ld.so.cache), or None."""
    for name in needed_libraries(exe) or []:
        if name.startswith(prefix) and "/" not in name:
            for d in LIB_DIRS:
                p = os.path.join(d, name)
                if os.path.isfile(p):
                    return p
    return None


def slot_relocated(path: str) -> frozenset[str] | None:
    """The symbols an ELF file reaches through a relocatable slot
    (JUMP_SLOT or GLOB_DAT relocations against its dynamic symbols): the
    calls a preload's definition takes.  None when unreadable or of an
    unknown machine."""
    try:
        with open(path, "rb") as f:
            elf = open_elf(f)
            if elf is None or elf.machine not in SLOT_RELOCS:
                return None
            kinds = SLOT_RELOCS[elf.machine]
            names: set[str] = set()
            for sec in elf.sections:
                if sec[1] != SHT_RELA or sec[6] >= len(elf.sections):
                    continue
                symsec = elf.sections[sec[6]]
                if symsec[1] != SHT_DYNSYM or symsec[6] >= len(elf.sections):
                    continue
                rela = _read(f, sec[4], sec[5])
                syms = _read(f, symsec[4], symsec[5])
                strtab = _read(f, elf.sections[symsec[6]][4], elf.sections[symsec[6]][5])
                for i in range(len(rela) // 24):
                    _, info, _ = struct.unpack_from("<QQq", rela, i * 24)
                    if info & 0xFFFFFFFF not in kinds:
                        continue
                    sym = info >> 32
                    if (sym + 1) * 24 > len(syms):
                        continue
                    name, = struct.unpack_from("<I", syms, sym * 24)
                    if 0 < name < len(strtab):
                        names.add(_cstr(strtab, name))
            return frozenset(names)
    except (OSError, struct.error, ValueError):
        return None
