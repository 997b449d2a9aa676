"""Python data sources registered with a Python worker pool of their own.

Spark keys its Python worker pools by the registered function's environment, which is
``SparkContext.environment`` when the source is registered: a source registered while a
variable is set there runs its tasks in workers that no other source shares. The bench keeps
its in-memory baseline apart from our workers this way, and tests check what our tasks did to
workers nothing else ran in.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource

POOL_VARIABLE = "DURABLE_STREAMS_WORKER_POOL"


def register_in_pool(spark: SparkSession, pool: str, *sources: type[DataSource]) -> None:
    """Register ``sources`` so that their tasks run in the worker pool named ``pool`` (whose
    workers see it as ``POOL_VARIABLE``)."""
    environment = spark.sparkContext.environment
    environment[POOL_VARIABLE] = pool
    try:
        for source in sources:
            spark.dataSource.register(source)
    finally:
        del environment[POOL_VARIABLE]
