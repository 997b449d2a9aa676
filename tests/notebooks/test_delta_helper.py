"""``pyspark_durable_streams.delta`` here, where neither delta-spark nor the Delta jars are installed.

delta-spark must stay out of this virtualenv (each release pins PySpark, e.g. 4.4.1 declares
pyspark<=4.2.0, and installing it would downgrade ours), so these tests exercise the paths
this machine really takes: the probe answering False for Delta (and True for a format the
session has), and the error that names the extra.
"""

from __future__ import annotations

import importlib.util

import pytest
from pyspark.sql import SparkSession

from pyspark_durable_streams.delta import (
    DELTA_EXTRA,
    DeltaExtraMissing,
    configure_delta,
    delta_session,
    has_data_source,
    has_delta_jvm,
)


def test_probe_tells_present_from_missing_formats(spark: SparkSession) -> None:
    assert has_delta_jvm(spark) is False
    assert has_data_source(spark, "parquet") is True  # resolved, then failed on the missing path
    assert has_data_source(spark, "durable_streams") is True  # the Python data source registered by the fixture
    assert has_data_source(spark, "no-such-format") is False


def test_missing_extra_is_named() -> None:
    assert importlib.util.find_spec("delta") is None, (
        "delta-spark is installed in this virtualenv: it must not be (it pins an older PySpark); "
        "these tests cover the path where the [delta] extra is missing"
    )
    with pytest.raises(DeltaExtraMissing) as error:
        configure_delta(SparkSession.builder)
    assert f"pip install '{DELTA_EXTRA}'" in str(error.value)
    assert DELTA_EXTRA == "pyspark-durable-streams[delta]"
    assert isinstance(error.value, ImportError)
    with pytest.raises(DeltaExtraMissing, match="delta-spark"):
        delta_session("no-delta-here", master="local[1]")
