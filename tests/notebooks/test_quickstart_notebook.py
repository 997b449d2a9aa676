"""notebooks/01_quickstart.py end to end: create a stream, write it with Spark, read it back."""

from __future__ import annotations

from notebook_runner import run_notebook
from pyspark.sql import SparkSession
from servers import ServerProcess

from pyspark_durable_streams.client import Client

NOTEBOOK = "01_quickstart.py"
ROWS = 300


def test_quickstart_notebook(spark: SparkSession, notebook_server: ServerProcess) -> None:
    widgets = {"server_url": notebook_server.url, "stream": "nb-quickstart", "rows": str(ROWS)}
    run = run_notebook(NOTEBOOK, spark, widgets)

    with Client(notebook_server.url) as client:
        stored = [message.json() for message in client.stream("v1/stream/nb-quickstart").read("-1")]
    assert sorted(order["order_id"] for order in stored) == list(range(ROWS))  # each row once
    assert stored[0].keys() == {"order_id", "customer", "amount"}
    assert run.namespace["message_count"] == ROWS

    preview, per_customer = run.tables
    assert len(preview) == 5 and all(row["content_type"] == "application/json" for row in preview)
    expected: dict[str, tuple[int, float]] = {}
    for order in stored:
        count, total = expected.get(order["customer"], (0, 0.0))
        expected[order["customer"]] = (count + 1, total + order["amount"])
    assert {row["customer"]: (row["orders"], row["total"]) for row in per_customer} == {
        customer: (count, round(total, 2)) for customer, (count, total) in expected.items()
    }
    assert len(per_customer) == 7

    # A second run stores nothing twice: the batch write is idempotent through its producerId.
    again = run_notebook(NOTEBOOK, spark, widgets)
    assert again.namespace["message_count"] == ROWS
