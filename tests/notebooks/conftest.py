"""Fixtures of the notebook and README tests: the Spark tests' session, and a server per test.

The ``spark`` fixture is the one of ``tests/spark/conftest.py`` (loaded from there, not copied):
the same ``local[2]`` settings. When both directories run in one pytest process, its second
instance's ``getOrCreate()`` returns the session the first one started: one JVM per process.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
from servers import ServerProcess

_SPARK_CONFTEST = Path(__file__).resolve().parent.parent / "spark" / "conftest.py"
_spec = importlib.util.spec_from_file_location("spark_tests_conftest", _SPARK_CONFTEST)
assert _spec is not None and _spec.loader is not None, f"cannot load {_SPARK_CONFTEST}"
_spark_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_spark_conftest)

spark = _spark_conftest.spark


@pytest.fixture
def notebook_server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    """A server for one notebook run (short long-polls, so live reads in the notebooks end quickly)."""
    return server_factory("--long-poll-timeout-ms", "1000")
