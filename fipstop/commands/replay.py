"""``fipstop replay FILE``: the dashboard driven by a recording.

The same screens as the live monitor, on a
:class:`fipstop.recording.replay.ReplaySource`, plus the replay keys (seek,
marks, speed, go to a time) and the timeline under the header.
"""

from __future__ import annotations

import argparse

from fipstop.commands.options import have_terminal
from fipstop.errors import FipsError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="play a recording back in the dashboard",
        description="Replay a recording made by `fipstop record` (or `fipstop --record`) in the same dashboard: "
        "space pause, t/T step, [ and ] seek -/+10 s, { and } jump to the previous/next mark (drops, bans, "
        "findings), < and > speed 0.25x-16x, : jump to a time. A file still being written is followed.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--speed", type=float, default=1.0, metavar="X", help="playback speed, 0.25 to 16 (default 1)")
    p.add_argument("--start", metavar="TIME", help="start at TIME (ISO 8601, HH:MM:SS of the recording's day, "
                   "or +S seconds from its start)")
    p.add_argument("--no-follow", action="store_true", help="stop at the end even if the file grows")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fipstop.recording.replay import ReplaySource
    from fipstop.views.app import FipsTopApp

    source = ReplaySource(args.file, speed=args.speed, follow=not args.no_follow)
    if not have_terminal():
        source.close()
        raise FipsError("replay needs a terminal; `fipstop export FILE --format jsonl` prints a recording")
    app = FipsTopApp(source)
    if args.start:
        app.initial_frames = source.seek(source.parse_time(args.start))
    app.run()
    source.close()
    return int(app.return_code or 0)
