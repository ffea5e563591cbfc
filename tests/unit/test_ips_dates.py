"""Dates in records: found and cut out as Fail2Ban does (fipstop/ips/datedetect.py
templates, searched by ips_match.c), never used for counting."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from fipstop import _ipsfast
from fipstop.ips import datedetect
from fipstop.ips.filters import FilterDef, load_filter
from fipstop.ips.jails import JailSpec, compile_jail

pytestmark = pytest.mark.skipif(not _ipsfast.available()[0], reason="libpcre2-8 is not installed")

S = 1_000_000_000
SSHD_LIKE = r"^\s*(?:\S+\s+)?sshd(?:\[\d+\])?:\s+Failed password for \S+ from <HOST>(?: port \d+)?\s*$"


def jail(datepattern: str | None = "{^LN-BEG}", regex: str = SSHD_LIKE, **kw):
    return compile_jail(JailSpec("t", FilterDef("t", failregex=(regex,), datepattern=datepattern), **kw))


@pytest.mark.parametrize("line", [
    "Feb 25 14:34:10 belka sshd[31603]: Failed password for root from 1.2.3.4 port 22",
    "Sat Feb 25 14:34:10 2006 belka sshd[31603]: Failed password for root from 1.2.3.4",
    "2024-02-25T14:34:10.123456+01:00 belka sshd[31603]: Failed password for root from 1.2.3.4",
    "2024-02-25 14:34:10,123 belka sshd[31603]: Failed password for root from 1.2.3.4",
    "belka sshd[31603]: Failed password for root from 1.2.3.4",  # no date: matched as it is
    "<38>sshd[31603]: Failed password for root from 1.2.3.4",  # libfips_syslog.so: no date, no host
    "<38>Feb 25 14:34:10 belka sshd[31603]: Failed password for root from 1.2.3.4",  # forwarded, dated
])
def test_dated_and_dateless_records_match(line: str) -> None:
    assert jail().match(line.encode()) == ("hit", "1.2.3.4")


def test_without_date_detection_a_dated_line_is_missed() -> None:
    """The bug of issue 19: the date stays in front of the host and the prefix cannot match it."""
    line = b"Feb 25 14:34:10 belka sshd[31603]: Failed password for root from 1.2.3.4 port 22"
    assert jail(datepattern="{NONE}").match(line) == ("nomatch", None)
    assert jail().match(line) == ("hit", "1.2.3.4")


def test_check_reports_the_date_and_parses_it() -> None:
    j = jail()
    cf = FilterDef("t", failregex=(SSHD_LIKE,)).compiled()
    line = "Feb 25 14:34:10 belka sshd[31603]: Failed password for root from 1.2.3.4 port 22"
    r = j.check(line.encode())
    assert r["result"] == "hit" and r["date"] is not None
    tmpl, g0, s, e = r["date"]
    assert line[s:e] == "Feb 25 14:34:10" and g0 == 0
    now = dt.datetime(2005, 8, 14, 12, 0, 0)
    t = datedetect.parse_time(cf.dates.templates[tmpl], line, g0, now=now)
    assert dt.datetime.fromtimestamp(t) == dt.datetime(2005, 2, 25, 14, 34, 10)
    # a year-less date after "now" is last year's (Fail2Ban's rule)
    t = datedetect.parse_time(cf.dates.templates[tmpl], "Dec 31 23:59:59 x", 0, now=dt.datetime(2006, 1, 1, 0, 5))
    assert dt.datetime.fromtimestamp(t).year == 2005
    assert j.check(b"<38>sshd[1]: Failed password for root from 1.2.3.4")["date"] is None
    assert j.check(line.encode(), nodate=True)["result"] == "nomatch"  # the date stays: a journal line


@pytest.mark.parametrize("datepattern, line, date", [
    ("{^LN-BEG}Epoch", "1700000000.123 belka sshd[1]: Failed password for x from 1.2.3.4", "1700000000.123"),
    ("^[^\\[]*\\[({DATE})", "belka sshd: [05/Mar/2007:14:39:21 +0100] Failed password for x from 1.2.3.4",
     "05/Mar/2007:14:39:21 +0100"),
    ("^%Y-%m-%d %H:%M:%S", "2010-01-02 03:04:05 belka sshd[1]: Failed password for x from 1.2.3.4",
     "2010-01-02 03:04:05"),
    ("{^LN-BEG}TAI64N", "@400000004c91b044077a9e94 belka sshd[1]: Failed password for x from 1.2.3.4",
     "@400000004c91b044077a9e94"),
])
def test_datepatterns(datepattern: str, line: str, date: str) -> None:
    rx = SSHD_LIKE.replace(r"\s+Failed", r"\s+(?:\[\]\s*)?Failed")  # what {DATE} in [...] leaves
    r = jail(datepattern, rx).check(line.encode())
    _t, _g0, s, e = r["date"]
    assert line[s:e] == date and r["result"] == "hit", r


def test_percent_escapes_and_date_placeholder_from_a_filter_file(tmp_path: Path) -> None:
    d = tmp_path / "filter.d"
    d.mkdir()
    (d / "pct.conf").write_text("[Definition]\nfailregex = ^ bad <HOST>$\ndatepattern = ^%%Y/%%m/%%d %%H:%%M\n")
    f = load_filter("pct", d)
    assert f.datepattern == "^%Y/%m/%d %H:%M"
    assert compile_jail(JailSpec("p", f)).match(b"2020/01/02 03:04 bad 10.1.1.1") == ("hit", "10.1.1.1")
    (d / "bad.conf").write_text("[Definition]\nfailregex = ^ bad <HOST>$\ndatepattern = ^%%Q\n")
    with pytest.raises(Exception, match="datepattern"):
        load_filter("bad", d).compiled()


def test_the_line_date_never_decides_findtime() -> None:
    """Records an hour apart by their dates but within findtime by their ring time stamps are
    counted together: the date is text, the ring time stamp is the producer's clock."""
    j = jail(maxretry=3, findtime_s=60)
    lines = [f"Feb 25 1{h}:00:00 belka sshd[1]: Failed password for x from 1.2.3.4".encode() for h in range(3)]
    trig = _ipsfast.feed_lines(lines, 1_700_000_000 * S, (j,))
    assert [t[1] for t in trig] == ["1.2.3.4"]
    assert j.stats()["dated"] == 3


def test_default_templates_equal_fail2bans_names() -> None:
    names = [t.name for t in datedetect.detector_for(None).templates]
    assert names[0] == "{^LN-BEG}ExYear(?P<_sep>[-/.])Month(?P=_sep)Day(?:T|  ?)24hour:Minute:Second(?:[.,]Microseconds)?(?:\\s*Zone offset)?"
    assert "Epoch" in names and "TAI64N" in names and "{^LN-BEG}Epoch" in names
    assert len(names) == 31
    lb = datedetect.detector_for("{^LN-BEG}").templates
    assert lb and all(t.flags & datedetect.LINE_BEGIN for t in lb)
