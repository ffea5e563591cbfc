"""pytest set-up of the dashboard tests (helpers are in uihelpers.py)."""

from __future__ import annotations

import asyncio
import inspect
import os
import time

import pytest

os.environ["TZ"] = "UTC"
time.tzset()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """Run ``async def`` tests with asyncio.run (no pytest-asyncio needed)."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**kwargs))
        return True
    return None
