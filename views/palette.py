"""The dashboard's colours, in one place (rich style strings).

Rule: red means records lost because a ring was full (drops) and nothing
else; a row filter (``/``) is shown in cyan and labelled "filter", never
"drop".  Fill bars are blue, turn yellow, then orange as a ring approaches
full; only drops are red.  Colours are explicit RGB so that a terminal theme
cannot map two meanings onto one colour.
"""

from __future__ import annotations

RATE = "#98c379"  # records/s
RATE_SPARK = "#5f8f3f"
BYTES = "default"
DROPS = "bold #ff4d4f"  # drops/s and dropped totals, only when > 0
DROPS_LEGEND = "#ff4d4f"
ZERO = "#5c6370"  # a zero counter, dimmed
FILTER = "bold #56b6c2"  # the `/` row filter: never the drops colour
LABEL = "#8a8f98"
TITLE = "bold"
LIVE = "bold #98c379"
PAUSED = "bold #1e1e1e on #e5c07b"
WARN = "#e5c07b"
WARN_BOLD = "bold #e5c07b"

FILL_OK = "#61afef"
FILL_WARN = "#e5c07b"
FILL_HIGH = "#ff9e3b"
FILL_EMPTY = "#3e4451"

HEALTH = {
    "alive": "#98c379",
    "stale": "bold #e5c07b",
    "evicted": "bold #c678dd",
    "closed": "#5c6370",
    "joining": "#56b6c2",
}

RING_STATE = {"active": "#98c379", "closed": "#5c6370", "free": "#5c6370"}

#: chart line colours (RGB tuples)
CHART_RATE = (152, 195, 121)
CHART_DROPS = (255, 77, 79)
CHART_FILL = (97, 175, 239)
CHART_LAG = (229, 192, 123)
#: the chart per domain (``c``): one line per domain, never the drops red; the last is "other"
CHART_DOMAINS = ((152, 195, 121), (97, 175, 239), (229, 192, 123), (198, 120, 221), (86, 182, 194),
                 (171, 178, 191))


def fill_style(pct: float) -> str:
    if pct >= 90:
        return FILL_HIGH
    if pct >= 60:
        return FILL_WARN
    return FILL_OK


def lag_style(lag_s: float) -> str:
    if lag_s != lag_s:  # NaN: unknown
        return LABEL
    if lag_s >= 5:
        return WARN_BOLD
    if lag_s >= 1:
        return WARN
    return "default"


# --------------------------------------------------------------------------- #
# NO_COLOR (https://no-color.org)
# --------------------------------------------------------------------------- #
#: every colour constant above, as defined (use_color puts them back)
_COLORED = {k: v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str | dict)}

#: without colour each meaning keeps an attribute of its own: drops are the
#: only reverse-video cells (red is drops; reverse is drops), a filter is italic
NO_COLOR_STYLES = {
    "DROPS": "bold reverse",
    "DROPS_LEGEND": "bold underline",
    "FILTER": "bold italic",
    "PAUSED": "bold",
    "FILL_HIGH": "bold",
    "FILL_EMPTY": "dim",
    "ZERO": "dim",
    "LABEL": "dim",
}


def _attributes_only(spec: str) -> str:
    """A rich style string with its colours removed (``bold #e5c07b`` -> ``bold``)."""
    from rich.style import Style

    st = Style.parse(spec)
    out = str(Style(bold=st.bold, dim=st.dim, italic=st.italic, underline=st.underline))
    return "default" if out == "none" else out  # rich spells the empty style "none", which is no colour name


#: without colour (NO_COLOR) a chart's lines are told apart by a character each, the drops line always by x
#: (after _COLORED: characters, not styles)
CHART_MARKERS = "o+*#%=@"
DROPS_MARKER = "x"

#: True while the monochrome styles are in use: views whose meanings were
#: colours only (the profile's time-split bar) draw a glyph per meaning then
MONOCHROME = False


def use_no_color() -> None:
    """Monochrome styles in place of the colours (textual drops the colours
    it draws itself when NO_COLOR is set; these are the dashboard's own)."""
    g = globals()
    g["MONOCHROME"] = True
    for k, v in _COLORED.items():
        if isinstance(v, dict):
            g[k] = {n: NO_COLOR_STYLES.get(f"{k}.{n}", _attributes_only(s)) for n, s in v.items()}
        else:
            g[k] = NO_COLOR_STYLES.get(k, _attributes_only(v))
    g["HEALTH"] = dict(g["HEALTH"], evicted="bold italic", stale="bold")


def use_color() -> None:
    """The colours again (tests that turned NO_COLOR on)."""
    globals().update({k: (dict(v) if isinstance(v, dict) else v) for k, v in _COLORED.items()})
    globals()["MONOCHROME"] = False
