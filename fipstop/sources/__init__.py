"""fipstop.sources: where frames come from (live probes, a recording, fixtures).

Everything above a source - views, recorder, check, diagnose, serve - reads
:class:`fipstop.model.snapshot.Snapshot` objects and cannot tell a live host
from a recording.
"""
