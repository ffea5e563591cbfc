"""fipstop.views: the textual screens, widgets and the one app stylesheet.

This directory sits at the top of the repository; ``fipstop/views`` is a
symlink to it, so it is the package ``fipstop.views`` for every tool
(setuptools, mypy, pyright, ``PYTHONPATH=.``) and never a top-level ``views``
package. Views never call probes: they render ``Snapshot`` objects that a
Source (live or replay) delivers as messages, so the same screens show a live
host and a recording.
"""

if __name__ != "fipstop.views":  # e.g. `import views` with the repo root on sys.path
    raise ImportError("views/ is importable only as fipstop.views")
