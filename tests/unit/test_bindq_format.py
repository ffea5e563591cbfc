"""The consumer's formatter of BIND's binary query records (fipstop/csrc/fips_bindq_fmt.c, exposed as
``_fips.format_bind_query``): each piece against BIND's own formatting code, and hostile records refused.

The oracle for types, classes and names is BIND 9.18.49's libdns itself (the one scripts/build-named-native.sh
builds; Debian's links jemalloc, which cannot be dlopen'ed into a process): dns_rdatatype_format over all 65 536
types, dns_rdataclass_format over all classes, dns_name_format over random wire names with every byte value.  The
whole line, against BIND's own lines, is tests/integration/test_bind_preload.py::test_native_records_format_to_binds_own_lines.
"""

from __future__ import annotations

import ctypes
import random
import socket
import struct
from pathlib import Path

import pytest

from fipstop import _fips
from fipstop.bindq import INVALID, record_text

REPO = Path(__file__).resolve().parents[2]
LIBDNS = REPO / "build" / "named-native" / "lib" / "libdns.so"
# struct fipsbq_head (fips_bindq.h), host order
HEAD = struct.Struct("=3sBBBHiHHhHBBBBBBBBB3xIIQ16s16s16s")
RD, SIGNED, TCP, DO, CD, COOKIE_OK, COOKIE_WANT, PEER_VALID, ECS, ORIGQ = (1 << i for i in range(10))


def wire(name: str) -> bytes:
    if name == ".":
        return b"\0"
    return b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"


def record(qname: bytes = wire("h1.example.test"), *, qtype: int = 1, qclass: int = 1, qflags: int = RD | PEER_VALID,
           edns: int = 0, peer: tuple[int, str, int, int] = (4, "192.0.2.7", 5353, 0),
           dest: tuple[int, str, int] = (4, "127.0.0.1", 0), ecs: tuple[int, str, int, int] = (0, "", 0, 0),
           origq: bytes = b"", signer: bytes = b"", view: bytes = b"", ident: bytes = b"named", pid: int = 4242,
           pri: int = 30, client: int = 0x7F00DEADBEEF) -> bytes:
    def addr(fam: int, text: str) -> bytes:
        if not fam:
            return bytes(16)
        return socket.inet_pton(socket.AF_INET6 if fam == 6 else socket.AF_INET, text).ljust(16, b"\0")

    head = HEAD.pack(b"FQB", 1, pri, len(ident), qflags, pid, qtype, qclass, edns, peer[2], peer[0], dest[0],
                     len(qname), len(origq), len(signer), len(view), ecs[0], ecs[2], ecs[3], peer[3], dest[2],
                     client, addr(peer[0], peer[1]), addr(dest[0], dest[1]), addr(ecs[0], ecs[1]))
    assert len(head) == 96
    return head + qname + origq + signer + view + ident


def test_a_plain_record_is_bind_s_line() -> None:
    assert _fips.format_bind_query(record()) == (
        b"<30>named[4242]: client @0x7f00deadbeef 192.0.2.7#5353 (h1.example.test): query: h1.example.test IN A"
        b" +E(0) (127.0.0.1)")


def test_the_fields_the_integration_test_cannot_send() -> None:
    """IPv6 peers with a scope id, an IPv6 ECS option, an original query name other than the name, a signer, a
    view, no peer, no pid, every flag letter; written out by hand from log_query()'s and ns_client_logv()'s
    formats (lib/ns/query.c, lib/ns/client.c)."""
    r = record(wire("www.example"), qtype=28, qflags=RD | SIGNED | TCP | DO | CD | COOKIE_OK | PEER_VALID | ECS
               | ORIGQ, edns=1, peer=(6, "fe80::1", 53, 3), dest=(6, "2001:db8::53", 7),
               ecs=(6, "2001:db8:1::", 48, 0xFF if False else 0), origq=wire("alias.example"),
               signer=wire("key.example"), view=b"inside", pid=-1)
    assert _fips.format_bind_query(r) == (
        b"<30>named: client @0x7f00deadbeef fe80::1%3#53/key key.example (alias.example): view inside: query:"
        b" www.example IN AAAA +SE(1)TDCV (2001:db8::53%7) [ECS 2001:db8:1::/48/0]")
    r = record(qflags=COOKIE_WANT, edns=-1, peer=(0, "", 0, 0), qclass=3, qtype=16, qname=wire("."))
    assert _fips.format_bind_query(r) == (
        b"<30>named[4242]: client @0x7f00deadbeef (no-peer) (.): query: . CH TXT -K (127.0.0.1)")


@pytest.fixture(scope="module")
def libdns() -> ctypes.CDLL:
    if not LIBDNS.exists():
        pytest.skip(f"{LIBDNS} is not built (scripts/build-named-native.sh, run by scripts/setup.sh)")
    return ctypes.CDLL(str(LIBDNS))


def _token(line: bytes, index: int) -> bytes:
    return line.split(b": query: ", 1)[1].split(b" ")[index]


def test_every_type_and_class_is_named_as_bind_names_it(libdns: ctypes.CDLL) -> None:
    buf = ctypes.create_string_buffer(64)
    for code in range(65536):
        libdns.dns_rdatatype_format(ctypes.c_uint16(code), buf, 64)
        line = _fips.format_bind_query(record(qtype=code))
        assert line is not None and _token(line, 2) == buf.value, code
        libdns.dns_rdataclass_format(ctypes.c_uint16(code), buf, 64)
        line = _fips.format_bind_query(record(qclass=code))
        assert line is not None and _token(line, 1) == buf.value, code


class _Region(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_uint)]


def _bind_name(libdns: ctypes.CDLL, w: bytes) -> bytes:
    name = ctypes.create_string_buffer(512)  # > sizeof(dns_name_t)
    data = ctypes.create_string_buffer(w, len(w))
    libdns.dns_name_init(name, None)
    libdns.dns_name_fromregion(name, ctypes.byref(_Region(ctypes.cast(data, ctypes.c_void_p), len(w))))
    out = ctypes.create_string_buffer(1025)
    libdns.dns_name_format(name, out, 1025)
    return out.value


def test_names_are_escaped_as_bind_escapes_them(libdns: ctypes.CDLL) -> None:
    rnd = random.Random(23)
    special = b'"().;\\@$ \x00\x7f\xff'
    names = [b"\0", wire("a.b"), b"\x3f" + b"\xff" * 63 + b"\0"]
    for _ in range(3000):
        labels, total = [], 1
        while total < 200 and rnd.random() < 0.8:
            n = rnd.randint(1, 63)
            if total + 1 + n > 255:
                break
            lab = bytes(rnd.choice(special) if rnd.random() < 0.3 else rnd.randint(0, 255) for _ in range(n))
            labels.append(bytes([n]) + lab)
            total += 1 + n
        names.append(b"".join(labels) + b"\0")
    for w in names:
        line = _fips.format_bind_query(record(qname=w))
        assert line is not None, w
        text = _bind_name(libdns, w)
        assert b"(" + text + b"): query: " + text + b" IN A " in line, (w, text, line)


def test_hostile_records_are_refused_without_reading_past_them() -> None:
    """Shared memory is hostile input: every cut of a valid record, every length field made inconsistent, a
    compression pointer or an over-long label in a name, an unknown version or flag: None, never a read outside the
    record (the C tests' sanitizer build runs the same formatter under ASan through ips_feed's callers)."""
    good = record(view=b"v", signer=wire("k.example"), qflags=RD | PEER_VALID | SIGNED)
    assert _fips.format_bind_query(good) is not None
    for cut in range(len(good)):
        assert _fips.format_bind_query(good[:cut]) is None, cut
    assert _fips.format_bind_query(good + b"x") is None
    for off in range(16, 26):  # the length and family bytes
        for v in (0, 7, 255):
            bad = bytearray(good)
            bad[off] = v
            out = _fips.format_bind_query(bytes(bad))
            assert out is None or len(out) < 4608
    assert _fips.format_bind_query(record(qname=b"\xc0\x0c")) is None  # a compression pointer
    assert _fips.format_bind_query(record(qname=b"\x40" + b"a" * 64 + b"\0")) is None  # a 64-byte label
    assert _fips.format_bind_query(record(qname=b"\x05ab\0")) is None  # a label past the name
    assert _fips.format_bind_query(record(qname=b"\x01a")) is None  # no root label
    assert _fips.format_bind_query(record(qname=b"\x01a\0\x01b\0")) is None  # bytes after the root
    assert _fips.format_bind_query(record(view=b"a\0b")) is None
    assert _fips.format_bind_query(record(qflags=1 << 12)) is None
    assert _fips.format_bind_query(b"FQB\x02" + good[4:]) is None
    rnd = random.Random(5)
    for _ in range(20000):
        bad = bytearray(good)
        for _ in range(rnd.randint(1, 4)):
            bad[rnd.randrange(len(bad))] = rnd.randint(0, 255)
        out = _fips.format_bind_query(bytes(bad))
        assert out is None or (out.startswith(b"<") and len(out) < 4608)


def test_record_text_leaves_other_programs_records_alone() -> None:
    """The flag is an application bit of the ring format: a record of another program that sets it is shown as it
    is; a record with BIND's magic that does not validate is marked, not hidden or guessed at."""
    flag = _fips.REC_BIND_QUERY
    assert record_text(b"some app's own record", flag) == b"some app's own record"
    assert record_text(record(), 0) == record()
    assert record_text(record(), flag).startswith(b"<30>named[4242]: client @0x")
    broken = record()[:50]
    assert record_text(broken, flag) == INVALID + broken


def test_wrap_recognises_a_patched_libns_by_its_hook_symbol(tmp_path: Path) -> None:
    """`fipstop wrap --bind` picks libfips_bindq.so for a named whose own libns names ns_fips_query_hook; any other
    library, or a libns without it, keeps libfips_bind.so."""
    from fipstop.preload import has_native_query_hook

    patched, stock, other = tmp_path / "libns-9.18.49.so", tmp_path / "libns-9.18.49-1-Debian.so", tmp_path / "libx.so"
    patched.write_bytes(b"\x7fELF....\0ns_client_log\0ns_fips_query_hook\0isc_log_write\0")
    stock.write_bytes(b"\x7fELF....\0ns_client_log\0ns_fips_query_hookX\0")
    other.write_bytes(b"\x7fELF\0ns_fips_query_hook\0")
    assert has_native_query_hook([str(stock), str(patched)])
    assert not has_native_query_hook([str(stock), str(other), str(tmp_path / "libns-missing.so")])
    assert not has_native_query_hook([])


def test_record_text_takes_a_records_memoryview() -> None:
    """fipstop tail and the ips range path pass ``Record.data``, a memoryview into the ring."""
    flag = _fips.REC_BIND_QUERY
    assert record_text(memoryview(record()), flag).startswith(b"<30>named[4242]: client @0x")
    broken = record()[:50]
    assert record_text(memoryview(broken), flag) == INVALID + broken
    other = memoryview(b"another program's record")
    assert record_text(other, flag) is other
