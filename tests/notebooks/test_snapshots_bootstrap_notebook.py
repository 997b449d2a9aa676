"""notebooks/03_snapshots_bootstrap.py end to end: snapshot, bootstrap, live tail."""

from __future__ import annotations

from collections import Counter

from notebook_runner import run_notebook
from pyspark.sql import SparkSession
from servers import ServerProcess

from pyspark_durable_streams.client import Client

NOTEBOOK = "03_snapshots_bootstrap.py"
MOVEMENTS, LATER, LIVE = 120, 30, 12


def stock_after(count: int) -> dict[str, int]:
    """The notebook's movement(i) for i < count, folded into stock per SKU."""
    stock: Counter[str] = Counter()
    for i in range(count):
        stock[f"sku-{i % 6}"] += (i * 7) % 11 - 4
    return dict(stock)


def test_snapshots_bootstrap_notebook(spark: SparkSession, notebook_server: ServerProcess) -> None:
    widgets = {
        "server_url": notebook_server.url,
        "bucket": "nb-inventory",
        "stream": "warehouse-7",
        "movements": str(MOVEMENTS),
        "later_movements": str(LATER),
        "live_movements": str(LIVE),
    }
    run = run_notebook(NOTEBOOK, spark, widgets)
    ns = run.namespace

    snapshot_table, final_table = run.tables
    assert {row["sku"]: row["stock"] for row in snapshot_table} == stock_after(MOVEMENTS)
    assert ns["replayed"] == LATER and ns["after_snapshot"] == LATER and ns["live"] == LIVE
    assert ns["reader"].closed is True
    assert {row["sku"]: row["stock"] for row in final_table} == stock_after(MOVEMENTS + LATER + LIVE)

    with Client(notebook_server.url) as client:
        stream = client.bucket("nb-inventory").stream("warehouse-7")
        meta = stream.metadata()
        snapshot = stream.snapshots.latest()
        with stream.bootstrap() as boot:
            retained = [message.json() for message in boot.messages]
    assert meta.closed and snapshot is not None
    assert snapshot.offset == ns["snapshot_offset"] == meta.snapshot_offset
    assert snapshot.content_type == "application/json"
    assert len(retained) == LATER + LIVE

    # Run again: the notebook starts the stream from scratch and gets the same results.
    again = run_notebook(NOTEBOOK, spark, widgets)
    assert [len(rows) for rows in again.tables] == [6, 6] and again.namespace["live"] == LIVE
