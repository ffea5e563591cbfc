"""`fipstop ips` never bans the host itself (loopback, its own addresses: Fail2Ban's ignoreself and
default ignoreip) unless told to, and never an unspecified, broadcast or multicast address (issue 17)."""

from __future__ import annotations

from fipstop import _ipsfast
from fipstop.ips.filters import FilterDef
from fipstop.ips.jails import JailOptions, JailSpec, compile_jail, select_jails, self_addresses

T0 = 1_700_000_000_000_000_000
F = FilterDef("t", failregex=(r"^fail from <HOST>$",))
NEVER = ["0.0.0.0", "0.1.2.3", "255.255.255.255", "224.0.0.1", "239.255.255.250", "ff02::1", "ff05::2",
         "::ffff:0.0.0.0", "::ffff:255.255.255.255"]
SELF = ["127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"]
OTHER = ["198.51.100.7", "2001:db8::9", "10.1.2.3", "fe80::1"]


def banned(j, addrs: list[str]) -> list[str]:
    return sorted(t[1] for t in _ipsfast.feed_lines([f"fail from {a}".encode() for a in addrs], T0, (j,)))


def test_default_bans_neither_self_nor_unroutable() -> None:
    mine = [a for a in self_addresses() if a not in SELF]
    assert mine, "this host has an address besides loopback"
    j = compile_jail(JailSpec("t", F, maxretry=1))
    assert banned(j, NEVER + SELF + mine + OTHER) == sorted(["198.51.100.7", "2001:db8::9", "10.1.2.3", "fe80::1"])
    st = j.stats()
    assert st["ignored_ip"] == len(NEVER) + len(SELF) + len(mine)
    assert j.match(b"fail from ::") == ("nomatch", None)  # <HOST> never takes the unspecified address


def test_ignoreself_no_bans_loopback_but_never_unroutable() -> None:
    j = compile_jail(JailSpec("t", F, maxretry=1, ignoreself=False))
    assert banned(j, NEVER + ["127.0.0.1", "::1"]) == ["127.0.0.1", "::1"]


def test_options_and_config(tmp_path) -> None:
    (tmp_path / "j.conf").write_text("[a]\nfailregex = ^fail from <HOST>$\nignoreself = false\n"
                                     "[b]\nfailregex = ^fail from <HOST>$\n")
    a, b = select_jails(JailOptions(config=str(tmp_path / "j.conf")))
    assert (a.ignoreself, b.ignoreself) == (False, True)
    a, b = select_jails(JailOptions(config=str(tmp_path / "j.conf"), ignoreself=True))
    assert (a.ignoreself, b.ignoreself) == (True, True)
    (tmp_path / "bad.conf").write_text("[a]\nfailregex = ^x <HOST>$\nignoreself = maybe\n")
    import pytest

    from fipstop.errors import FipsError

    with pytest.raises(FipsError, match="ignoreself"):
        select_jails(JailOptions(config=str(tmp_path / "bad.conf")))


def test_check_reports_what_the_filter_matches() -> None:
    """--check is fipstop's fail2ban-regex: it shows the loopback line as matched, as fail2ban-regex does."""
    j = compile_jail(JailSpec("t", F, maxretry=1), protect=False)
    assert banned(j, ["127.0.0.1"]) == ["127.0.0.1"]
