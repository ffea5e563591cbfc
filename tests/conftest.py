"""Shared pytest set-up for every test directory.

Markers (registered in pyproject.toml): ``root``, ``integration``, ``slow``,
``bpf``. Tests marked ``root`` or ``bpf`` are skipped with a reason when not
running as root; CI runs as root and runs them all.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root")
    for item in items:
        if item.get_closest_marker("root") or item.get_closest_marker("bpf"):
            item.add_marker(skip)


@pytest.fixture
def shm_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty directory for FIPS domains, used instead of /dev/shm.

    FIPS_SHM_DIR points at it for the duration of the test, so code that
    falls back to the environment never touches the real /dev/shm.
    """
    path = tmp_path / "shm"
    path.mkdir()
    monkeypatch.setenv("FIPS_SHM_DIR", str(path))
    return path
