"""notebooks/05_fork_backfill.py end to end: a report on a stream with bad messages, a fork at the
offset where they begin, corrected messages on the fork, the same report on it, the source untouched."""

from __future__ import annotations

from collections import defaultdict

import pytest
from notebook_runner import run_notebook
from pyspark.sql import SparkSession
from servers import ServerProcess

from pyspark_durable_streams.client import Client

NOTEBOOK = "05_fork_backfill.py"
GOOD, BAD = 90, 30


def revenue(amounts: list[tuple[str, float]]) -> dict[str, float]:
    per_day: dict[str, float] = defaultdict(float)
    for day, amount in amounts:
        per_day[day] += amount
    return {day: round(total, 2) for day, total in per_day.items()}


def test_fork_backfill_notebook(spark: SparkSession, notebook_server: ServerProcess) -> None:
    widgets = {
        "server_url": notebook_server.url,
        "stream": "nb-orders",
        "fork": "nb-orders-fixed",
        "good_orders": str(GOOD),
        "bad_orders": str(BAD),
    }
    ns = run_notebook(NOTEBOOK, spark, widgets).namespace
    order = ns["order"]
    good = [order(i) for i in range(GOOD)]
    bad = [order(i) for i in range(GOOD, GOOD + BAD)]

    as_written = [(o["day"], o["amount"]) for o in good] + [(o["day"], o["amount"] * 100) for o in bad]
    corrected = [(o["day"], o["amount"]) for o in good + bad]
    assert ns["report_before"] == pytest.approx(revenue(as_written), abs=0.011)
    assert ns["report_after"] == pytest.approx(revenue(corrected), abs=0.011)
    assert ns["report_before"] != pytest.approx(ns["report_after"], abs=0.011)  # the bug showed in the report
    assert ns["orders_after"] == GOOD + BAD and ns["shared"] is True

    with Client(notebook_server.url) as client:
        source = list(client.stream("v1/stream/nb-orders").read("-1"))
        fork = list(client.stream("v1/stream/nb-orders-fixed").read("-1"))
    assert ns["source_count"] == len(source) == GOOD + BAD
    assert [m.json()["amount"] for m in source[GOOD:]] == [o["amount"] * 100 for o in bad]  # untouched
    assert [(m.offset, m.json()) for m in fork[:GOOD]] == [(m.offset, m.json()) for m in source[:GOOD]]
    assert [m.json() for m in fork[GOOD:]] == bad
    assert fork[GOOD].offset >= ns["bad_from"]
