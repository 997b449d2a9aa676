"""notebooks/02_streaming_etl.py end to end, twice on the same checkpoints (both triggers).

The second run appends more orders and must process exactly those: the Delta table and the
target stream then hold every order (every large order) exactly once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from notebook_runner import NotebookError, run_notebook
from pyspark.sql import SparkSession
from servers import ServerProcess

from pyspark_durable_streams.client import Client
from pyspark_durable_streams.delta import has_delta_jvm

NOTEBOOK = "02_streaming_etl.py"
EUR_PER_UNIT = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17}
THRESHOLD = 100.0


def test_streaming_etl_notebook(spark: SparkSession, notebook_server: ServerProcess, tmp_path: Path) -> None:
    assert not has_delta_jvm(spark), "this test covers the deltalake fallback: the test session must have no Delta jars"
    widgets = {
        "server_url": notebook_server.url,
        "source_stream": "nb-etl-orders",
        "target_stream": "nb-etl-large",
        "large_order_eur": str(THRESHOLD),
        "delta_path": str(tmp_path / "orders"),
        "checkpoint_dir": str(tmp_path / "checkpoints"),
    }
    first = run_notebook(NOTEBOOK, spark, {**widgets, "seed_orders": "300", "trigger": "availableNow"})
    assert first.namespace["use_spark_delta"] is False
    assert first.namespace["delta_count"] == 300
    second = run_notebook(NOTEBOOK, spark, {**widgets, "seed_orders": "200", "trigger": "1 second"})
    assert second.namespace["delta_count"] == 500

    with Client(notebook_server.url) as client:
        source = [(m.offset, m.json()) for m in client.stream("v1/stream/nb-etl-orders").read("-1")]
        target = [m.json() for m in client.stream("v1/stream/nb-etl-large").read("-1")]
    assert len(source) == 500
    expected = {
        order["order_id"]: (offset, round(order["amount"] * EUR_PER_UNIT[order["currency"]], 2))
        for offset, order in source
    }

    table = pa.table(DeltaTable(tmp_path / "orders").to_pyarrow_table()).to_pylist()
    assert len(table) == 500, "every order exactly once in the Delta table"
    assert {row["order_id"]: row["source_offset"] for row in table} == {
        key: offset for key, (offset, _) in expected.items()
    }
    for row in table:  # Spark rounds half up, Python half to even
        assert abs(row["amount_eur"] - expected[row["order_id"]][1]) <= 0.011, row
    assert all(row["ordered_at"] is not None for row in table)

    large = {row["order_id"] for row in table if row["amount_eur"] >= THRESHOLD}
    assert sorted(order["order_id"] for order in target) == sorted(large), "every large order exactly once"
    assert second.namespace["large_count"] == len(large)

    (by_currency,) = second.tables
    assert {row["currency"]: row["orders"] for row in by_currency} == {
        currency: sum(1 for _, order in source if order["currency"] == currency)
        for currency in {order["currency"] for _, order in source}
    }


def test_without_delta_jars_or_deltalake_the_notebook_says_what_to_install(
    spark: SparkSession, notebook_server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``[spark]`` extra does not install ``deltalake``: the notebook imports it only for its
    fallback, and stops there naming the package, before any query starts."""
    for module in ("deltalake", "deltalake.exceptions"):
        monkeypatch.setitem(sys.modules, module, None)  # import deltalake raises ImportError
    widgets = {
        "server_url": notebook_server.url,
        "seed_orders": "5",
        "delta_path": str(tmp_path / "orders"),
        "checkpoint_dir": str(tmp_path / "checkpoints"),
    }
    with pytest.raises(NotebookError) as failed:
        run_notebook(NOTEBOOK, spark, widgets)
    text = str(failed.value)
    assert "no Delta jars" in text and "pip install deltalake" in text and "[spark] extra" in text, text
    assert not (tmp_path / "checkpoints").exists()  # it stopped before starting a query
