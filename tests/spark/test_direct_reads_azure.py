"""Direct history reads of a table on Azure Blob Storage (Azurite): executors read the planned
files through the server's signed file endpoint (they hold no Azure credentials) and get the
same rows as over HTTP."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from direct_support import FAST, fill, flushed, offset_at, same_both_ways
from pyspark.sql import SparkSession
from servers import AzuriteServer, ServerProcess, session, wait_for

MESSAGES = [json.dumps({"i": i, "pad": "x" * (i % 7)}, separators=(",", ":")).encode() for i in range(40)]


def test_direct_reads_on_azure(spark: SparkSession, azurite: AzuriteServer, tmp_path: Path) -> None:
    container = f"direct-{uuid.uuid4().hex[:12]}"
    azurite.create_container(container)
    server = ServerProcess(tmp_path / "data", [*azurite.server_args(f"az://{container}/table"), *FAST]).start()
    try:
        url = server.stream_url("on-azure")
        fill(session(), url, "application/json", MESSAGES)
        wait_for(lambda: flushed(url, 40), timeout_s=30)
        rows = same_both_ways(spark, url=url)  # historyReads=delta: through the plan's file URLs, or it fails
        assert [row[2] for row in rows] == [message.decode() for message in MESSAGES]
        assert [row[1] for row in rows] == [offset_at(i) for i in range(40)]
    finally:
        server.kill()
