"""fipstop.probes: read raw counters from the machine, one module per probe.

This directory sits at the top of the repository; ``fipstop/probes`` is a
symlink to it, so it is the package ``fipstop.probes`` for every tool
(setuptools, mypy, pyright, ``PYTHONPATH=.``) and never a top-level
``probes`` package. Probes never import textual: each one (``name``,
``available() -> (bool, reason)``, ``sample() -> RawSample``) takes its roots
(procfs root, shm dir) as parameters and degrades with a reason instead of
failing, so it runs headless, in tests and in the recorder alike.
"""

if __name__ != "fipstop.probes":  # e.g. `import probes` with the repo root on sys.path
    raise ImportError("probes/ is importable only as fipstop.probes")
