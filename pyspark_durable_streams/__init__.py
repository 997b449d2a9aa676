"""Spark source and sink for the Durable Streams protocol.

``format("durable_streams")`` works without registration: PySpark looks for a
``DefaultSource`` in every importable top-level module named ``pyspark_*``. Where that
lookup is off, ``register(spark)`` registers the source explicitly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DefaultSource", "DurableStreamsDataSource", "__version__", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``durable_streams`` format with ``spark`` (one call, idempotent)."""
    from .datasource import DurableStreamsDataSource

    spark.dataSource.register(DurableStreamsDataSource)


def __getattr__(name: str) -> Any:
    # Imported lazily so that the client and the server never need pyspark installed.
    if name in ("DefaultSource", "DurableStreamsDataSource"):
        from .datasource import DurableStreamsDataSource

        return DurableStreamsDataSource
    raise AttributeError(name)
