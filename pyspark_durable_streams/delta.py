"""Delta Lake for Spark sessions outside Databricks, and a probe for whether a session has it.

Databricks runtimes ship Delta; elsewhere ``format("delta")`` needs the Delta jars on the JVM.
``delta-spark`` (the ``[delta]`` extra) knows which Maven coordinates match its version, and
``configure_delta`` hands the builder to its ``configure_spark_with_delta_pip``, so that Spark
fetches those jars from Maven Central when the session starts. The extra stays optional: each
``delta-spark`` release pins the PySpark versions it supports, so installing it may change the
PySpark version, and Databricks users need none of it.

``has_delta_jvm`` is how code that must run in both worlds (the notebooks) picks
``format("delta")`` or a fallback; it asks Spark to resolve the format instead of looking for
JVM classes, so it works over Spark Connect too.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DELTA_EXTRA", "DeltaExtraMissing", "configure_delta", "delta_session", "has_data_source", "has_delta_jvm"]

DELTA_EXTRA = "pyspark-durable-streams[delta]"
DELTA_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""What every Delta session needs besides the jars (delta-spark's pip helper adds only the jars)."""


class DeltaExtraMissing(ImportError):
    """``delta-spark`` is not importable; the message names the extra that installs it."""


def configure_delta(builder: SparkSession.Builder, extra_packages: list[str] | None = None) -> SparkSession.Builder:
    """Add the Delta extension, catalog and jars to ``builder`` (replacing ``spark.sql.extensions``).

    The jars are resolved from Maven Central (or the repositories in ``spark.jars.repositories``)
    when the session starts; ``extra_packages`` are more Maven coordinates fetched alongside.
    """
    try:
        delta = importlib.import_module("delta")
        configure_with_pip = cast(Callable[..., "SparkSession.Builder"], delta.configure_spark_with_delta_pip)
    except (ImportError, AttributeError) as exc:
        raise DeltaExtraMissing(
            "format('delta') outside Databricks needs delta-spark, the [delta] extra: "
            f"pip install '{DELTA_EXTRA}' (in a checkout: pip install '.[delta]'), or pip install delta-spark "
            "in the version that matches your PySpark. On Databricks, Delta is built in: use the session you are given."
        ) from exc
    for key, value in DELTA_SETTINGS.items():
        builder = builder.config(key, value)
    return configure_with_pip(builder, extra_packages=extra_packages)


def delta_session(
    app_name: str = "pyspark-durable-streams", *, master: str | None = None, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A SparkSession with Delta (see ``configure_delta``); settings in ``conf`` are applied first.

    Spark also reads ``$SPARK_CONF_DIR/spark-defaults.conf`` when it starts the JVM, so pointing
    ``SPARK_CONF_DIR`` at this project gives the settings its notebooks rely on.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return configure_delta(builder).getOrCreate()


def has_data_source(spark: SparkSession, name: str) -> bool:
    """Whether ``spark`` can resolve ``format(name)``: loads a path that does not exist and looks at the error.

    A missing format fails with ``DATA_SOURCE_NOT_FOUND``; a present one gets as far as the path
    and fails there (or on anything else: the format was found). ``.schema`` forces the
    analysis that Spark Connect would otherwise postpone.
    """
    missing = os.path.join(tempfile.gettempdir(), f"pyspark-durable-streams-probe-{uuid.uuid4().hex}")
    try:
        _ = spark.read.format(name).load(missing).schema
    except Exception as exc:
        condition = getattr(exc, "getCondition", lambda: None)()
        return condition != "DATA_SOURCE_NOT_FOUND" and "[DATA_SOURCE_NOT_FOUND]" not in str(exc)
    return True


def has_delta_jvm(spark: SparkSession) -> bool:
    """Whether ``format("delta")`` works in ``spark`` (Databricks, or a session from ``delta_session``)."""
    return has_data_source(spark, "delta")
