"""Fail2Ban filter files: includes, interpolation, tags; jails from config and CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from fipstop.errors import FipsError
from fipstop.ips.filters import NAMED_REFUSED, FilterDef, expand_tags, load_filter
from fipstop.ips.jails import JailOptions, JailSpec, compile_jail, load_config, parse_nets, select_jails

F2B_FILTERS = Path("/etc/fail2ban/filter.d")


def write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.write_text(text)
    return p


@pytest.fixture
def filter_dir(tmp_path: Path) -> Path:
    d = tmp_path / "filter.d"
    d.mkdir()
    write(d, "common.conf", """
[INCLUDES]
after = common.local
[DEFAULT]
logtype = file
_daemon = \\S*
__pid_re = (?:\\[\\d+\\])
__daemon_re = [\\[\\(]?<_daemon>(?:\\(\\S+\\))?[\\]\\)]?:?
__prefix_line = <lt_<logtype>/__prefix_line>
[lt_file]
__prefix_line = \\s*(?:\\S+\\s+)?(?:<__daemon_re><__pid_re>?:?\\s+)?
[lt_short]
__prefix_line = SHORT
""")
    write(d, "demo.conf", """
[INCLUDES]
before = common.conf
[Definition]
_daemon = demod
_user = %(_word)s
_word = \\w+
failregex = ^%(__prefix_line)sbad login for %(_user)s from <HOST>$
            ^%(__prefix_line)sprobe from <ADDR> port <F-PORT/>
            ^%(__prefix_line)sword <_word> from <HOST>
ignoreregex = for admin
[Init]
_word = [a-z]+
""")
    return d


def test_includes_interpolation_and_nested_tags(filter_dir: Path) -> None:
    """Fail2Ban's rules (checked against fail2ban's own FilterReader on this fixture): [Init]
    overrides <...> substitution (<_word>), not %(...)s interpolation (%(_user)s -> %(_word)s is
    [Definition]'s)."""
    f = load_filter("demo", filter_dir)
    assert f.name == "demo" and f.source.endswith("demo.conf")
    prefix = r"\s*(?:\S+\s+)?(?:[\[\(]?demod(?:\(\S+\))?[\]\)]?:?(?:\[\d+\])?:?\s+)?"
    assert f.failregex == (f"^{prefix}bad login for \\w+ from <HOST>$", f"^{prefix}probe from <ADDR> port <F-PORT/>",
                           f"^{prefix}word [a-z]+ from <HOST>")
    assert f.ignoreregex == ("for admin",)
    j = compile_jail(JailSpec("demo", f))
    assert j.match(b"host demod[12]: bad login for bob from 10.0.0.1") == ("hit", "10.0.0.1")
    assert j.match(b"bad login for bob from 10.0.0.1") == ("hit", "10.0.0.1")  # prefix is optional
    assert j.match(b"demod: probe from [2001:db8::7] port 22") == ("hit", "2001:db8::7")
    assert j.match(b"bad login for admin from 10.0.0.1") == ("ignored", None)


def test_local_override_and_after_include(filter_dir: Path) -> None:
    write(filter_dir, "common.local", "[DEFAULT]\nlogtype = short\n")
    write(filter_dir, "demo.local", "[Definition]\nignoreregex =\n")
    f = load_filter("demo", filter_dir)
    assert f.failregex[0].startswith("^SHORTbad login")
    assert f.ignoreregex == ()


def test_recursive_interpolation_is_an_error(filter_dir: Path) -> None:
    write(filter_dir, "loop.conf", "[Definition]\na = %(b)s\nb = %(a)s\nfailregex = %(a)s <HOST>\n")
    with pytest.raises(FipsError, match="nested more than 10 deep"):
        load_filter("loop", filter_dir)
    write(filter_dir, "loop2.conf", "[Definition]\na = <b>\nb = <a>\nfailregex = <a> <HOST>\n")
    with pytest.raises(FipsError, match="refers back to itself"):
        load_filter("loop2", filter_dir)


@pytest.mark.parametrize("text, msg", [
    ("[Definition]\nfoo = 1\n", "no failregex"),
    ("not an ini file", "filter"),
    ("[Definition]\nfailregex = ^a{,70000}b <HOST>\n", r"failregex 1: a repeat count of 70000 has no PCRE2 equivalent"),
    ("[Definition]\nfailregex = ^a(?P<x>b)(?P<x>c) <HOST>\n", "Python's re rejects it: redefinition of group name"),
    ("[Definition]\nfailregex = ^a <F-TUPLE_ID>x</F-TUPLE_ID> <HOST>\n", "F-TUPLE_ID"),
    ("[Definition]\nfailregex = ^a %(nothere)s <HOST>\n", r"%\(nothere\)s refers to an option that is not defined"),
    ("[Definition]\nfailregex = ^a 100% <HOST>\n", "write %% for a percent sign"),
    ("[Definition]\nfailregex = ^a <HOST>\ndatepattern = %Q\n", "datepattern"),
    ("[Definition]\nfailregex = ^a <HOST>\nmaxlines = two\n", "maxlines"),
    ("[Definition]\nfailregex = ^a <HOST>\nmaxlines = 0\n", "maxlines must be 1 or more"),
    ("[Definition]\nfailregex = ^a <HOST>\nfailregex = ^b <HOST>\n", "already exists"),
    ("[Init]\nx = 1\n", r"no \[Definition\] section"),
])
def test_bad_filters(filter_dir: Path, text: str, msg: str) -> None:
    write(filter_dir, "bad.conf", text)
    with pytest.raises(FipsError, match=msg):
        load_filter("bad", filter_dir).compiled()


def test_missing_filter(tmp_path: Path) -> None:
    with pytest.raises(FipsError, match="does not exist"):
        load_filter("nope", tmp_path)


def test_expand_tags() -> None:
    r = expand_tags(r"^x <F-USER>\S+</F-USER> from <HOST> </F-NOTOPEN> <IP4> <F-ID/> <SKIPLINES><SKIPLINES>\Z")
    assert "(?P<user>\\S+)" in r and "(?P<ip4>" in r and "(?P<dns>" in r and "</F-NOTOPEN>" in r
    assert "(?P<skiplines0>" in r and "(?P<skiplines1>" in r and r.endswith(r"\Z")
    assert "(?P<dns>" not in expand_tags("<HOST>", usedns="no")
    assert expand_tags("((?i)ab)") == "(?i:ab)"  # Fail2Ban's global-to-local flag rewrite


@pytest.mark.skipif(not (F2B_FILTERS / "named-refused.conf").exists(), reason="fail2ban's filters not installed")
def test_builtin_named_refused_is_fail2bans() -> None:
    f = load_filter("named-refused", F2B_FILTERS)
    assert (f.prefregex, f.failregex, f.ignoreregex) == (NAMED_REFUSED.prefregex, NAMED_REFUSED.failregex, ())


@pytest.mark.skipif(not F2B_FILTERS.is_dir(), reason="fail2ban's filters not installed")
@pytest.mark.parametrize("name", ["sshd", "postfix", "nginx-http-auth", "dovecot", "apache-auth"])
def test_real_fail2ban_filters_compile(name: str) -> None:
    if not (F2B_FILTERS / f"{name}.conf").exists():
        pytest.skip(f"{name}.conf not installed")
    f = load_filter(name, F2B_FILTERS)
    assert f.failregex
    for r in f.failregex + ((f.prefregex,) if f.prefregex else ()):
        assert "%(" not in r and "<__" not in r and "<lt_" not in r  # fully interpolated
    compile_jail(JailSpec(name, f))


def test_sshd_matches_a_real_line() -> None:
    if not (F2B_FILTERS / "sshd.conf").exists():
        pytest.skip("sshd.conf not installed")
    j = compile_jail(JailSpec("sshd", load_filter("sshd", F2B_FILTERS)))
    line = b"<38>sshd[812]: Failed password for invalid user admin from 203.0.113.9 port 50022 ssh2"
    assert j.match(line) == ("hit", "203.0.113.9")


# --- jails from config and command line ---------------------------------------------------------


def ns(**kw) -> JailOptions:
    base: dict = dict(filter_dir="/nonexistent", max_tracked=1000)
    base.update({k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()})
    return JailOptions(**base)


def test_select_default_and_overrides() -> None:
    (s,) = select_jails(ns())
    assert s.name == "named-refused" and s.maxretry == 5
    (s,) = select_jails(ns(jail=["named-query-rate"], maxretry=9, findtime=2.0, bantime=3.0, mode="window",
                           ignoreip=["10.0.0.0/8"]))
    assert (s.maxretry, s.findtime_s, s.bantime_s, s.mode, s.ignoreip, s.max_tracked) == \
        (9, 2.0, 3.0, "window", ("10.0.0.0/8",), 1000)
    with pytest.raises(FipsError, match="unknown jail"):
        select_jails(ns(jail=["nope"]))
    with pytest.raises(FipsError, match="same name"):
        select_jails(ns(jail=["named-refused", "named-refused"]))


def test_config_file(tmp_path: Path, filter_dir: Path) -> None:
    cfg = write(tmp_path, "jails.ini", """
[named-refused]
maxretry = 2
[mine]
failregex = ^oops <HOST>$
bantime = 5
ignoreip = 10.0.0.1 10.1.0.0/16
[loaded]
filter = demo
mode = bucket
[off]
enabled = false
failregex = x
""")
    jails = load_config(str(cfg), str(filter_dir))
    assert list(jails) == ["named-refused", "mine", "loaded"]
    assert jails["named-refused"].maxretry == 2
    assert jails["mine"].bantime_s == 5 and jails["mine"].ignoreip == ("10.0.0.1", "10.1.0.0/16")
    assert jails["loaded"].mode == "bucket" and jails["loaded"].filter.name == "demo"
    sel = select_jails(ns(config=str(cfg), filter_dir=str(filter_dir)))
    assert [s.name for s in sel] == ["named-refused", "mine", "loaded"]
    write(tmp_path, "bad.ini", "[x]\nmaxretry = lots\nfailregex = a\n")
    with pytest.raises(FipsError, match="not a number"):
        load_config(str(tmp_path / "bad.ini"), str(filter_dir))
    write(tmp_path, "bad2.ini", "[x]\nmaxretry = 3\n")
    with pytest.raises(FipsError, match="neither filter nor failregex"):
        load_config(str(tmp_path / "bad2.ini"), str(filter_dir))


def test_parse_nets() -> None:
    nets = parse_nets(["10.0.0.0/8, 192.168.1.7", "2001:db8::/32"])
    assert [b for _n, b in nets] == [104, 128, 32]
    assert nets[0][0][10:12] == b"\xff\xff"
    with pytest.raises(FipsError, match="not an address"):
        parse_nets(["example.com"])


def test_a_jail_needs_an_address_group() -> None:
    with pytest.raises(FipsError, match="no failure id"):
        compile_jail(JailSpec("x", FilterDef("x", failregex=(r"^no address here$",))))
    compile_jail(JailSpec("x", FilterDef("x", failregex=(r"^from <IP6>$",))))
