"""notebooks/04_python_client_and_cli.py end to end: producer, resumable reads, the CLI, a live read."""

from __future__ import annotations

from notebook_runner import run_notebook
from pyspark.sql import SparkSession
from servers import ServerProcess

from pyspark_durable_streams.client import Client

NOTEBOOK = "04_python_client_and_cli.py"
EVENTS = 90


def test_client_cli_notebook(spark: SparkSession, notebook_server: ServerProcess) -> None:
    run = run_notebook(
        NOTEBOOK, spark, {"server_url": notebook_server.url, "stream": "nb-client", "events": str(EVENTS)}
    )
    ns = run.namespace

    assert ns["stats"].messages_acked == EVENTS
    assert len(ns["history"]) == EVENTS
    (kinds,) = [shown.value for shown in run.displays]
    assert dict(zip(kinds["kind"], kinds["events"], strict=True)) == {"click": 30, "view": 30, "buy": 30}
    assert [event["event"] for event in ns["resumed"]] == list(range(EVENTS, EVENTS + 10))

    assert ns["head"]["content_type"] == "application/json" and ns["head"]["closed"] is False
    assert ns["new_lines"].splitlines() == [f'{{"event":"cli-{i}","kind":"cli"}}' for i in range(3)]
    assert len(ns["everything"].splitlines()) == EVENTS + 10 + 3
    assert ns["resume"].startswith("next-offset ")
    assert ns["live"] == [f"live-{i}" for i in range(5)] and ns["reader"].closed is True

    with Client(notebook_server.url) as client:
        stream = client.stream("v1/stream/nb-client")
        stored = [message.json()["event"] for message in stream.read("-1")]
        assert stream.metadata().closed
    assert stored == [*range(EVENTS + 10), *(f"cli-{i}" for i in range(3)), *(f"live-{i}" for i in range(5))]
