"""The server on Azure Blob Storage (``az://``), against Azurite: streams stored in a Delta table
in a container survive a SIGKILL and restarts, compaction rewrites them without changing an
answer, and read plans hand executors URLs of the server's own file endpoint, which answers
with the files' bytes read from the container.

``gs://`` has no test here: neither GCS emulator installable from a package registry speaks
the XML API that delta-rs's object store uses for listing and writing (see README).
"""

from __future__ import annotations

import io
import json
import re
import uuid
from collections.abc import Iterator

import pyarrow.parquet as pq
import pytest
import requests
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler
from runner import run_conformance
from servers import AzuriteServer, ServerProcess, flushed, read_all, session, wait_for
from test_conformance import LONG_POLL as CONFORMANCE
from test_conformance import SUITE_TESTS

JSON = {"Content-Type": "application/json"}
BINARY = {"Content-Type": "application/octet-stream"}
PLAN = {"Accept": "application/vnd.durable-streams.read-plan+json"}
FAST = ("--flush-interval-ms", "50", "--tail-cache-bytes", "0", "--vacuum-retention-hours", "0")


def offset_at(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


class AzureTable:
    """A fresh container, its table URI, and servers started on it (killed at teardown)."""

    def __init__(self, azurite: AzuriteServer, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.azurite = azurite
        self.tmp_path_factory = tmp_path_factory
        self.container = f"streams-{uuid.uuid4().hex[:12]}"
        azurite.create_container(self.container)
        self.uri = f"az://{self.container}/durable-streams"
        self.servers: list[ServerProcess] = []

    def server(self, *args: str) -> ServerProcess:
        """A server on the table, with a local data directory (the WAL) of its own."""
        data_dir = self.tmp_path_factory.mktemp("az-data")
        server = ServerProcess(data_dir, (*self.azurite.server_args(self.uri), *args)).start()
        self.servers.append(server)
        return server

    def delta(self) -> DeltaTable:
        return DeltaTable(f"{self.uri}/streams", storage_options=self.azurite.storage_options())


@pytest.fixture
def azure(azurite: AzuriteServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureTable]:
    table = AzureTable(azurite, tmp_path_factory)
    yield table
    for server in table.servers:
        server.kill()


def _compaction_passes(server: ServerProcess) -> list[tuple[int, int]]:
    found = re.findall(r"msg=compacted files_before=(\d+) files_after=(\d+)", server.log_text())
    return [(int(before), int(after)) for before, after in found]


def _fill(http: requests.Session, server: ServerProcess, rounds: int = 1) -> tuple[bytes, bytes]:
    """A JSON stream of 40 messages and a binary one of 20, appended in many small requests; in
    ``rounds`` rounds, each flushed to the table before the next one starts (a file each)."""
    assert http.put(server.stream_url("orders"), headers=JSON).status_code == 201
    assert http.put(server.stream_url("blobs"), headers=BINARY).status_code == 201
    blobs = [bytes([n, 0, 255]) * (n + 1) for n in range(20)]
    for first in range(0, 40, 4):
        body = json.dumps([{"order": n} for n in range(first, first + 4)])
        assert http.post(server.stream_url("orders"), headers=JSON, data=body).status_code == 204
        for blob in blobs[first // 2 : first // 2 + 2]:
            assert http.post(server.stream_url("blobs"), headers=BINARY, data=blob).status_code == 204
        if rounds > 1 and (first // 4 + 1) % (10 // rounds) == 0:
            wait_for(flushed(server), timeout_s=30)
    orders = json.dumps([{"order": n} for n in range(40)], separators=(",", ":")).encode()
    return orders, b"".join(blobs)


def _same_streams(http: requests.Session, server: ServerProcess, orders: bytes, blobs: bytes) -> None:
    assert json.loads(read_all(http, server.stream_url("orders"))) == json.loads(orders)
    assert read_all(http, server.stream_url("blobs")) == blobs


def test_streams_on_azure_survive_a_kill_restarts_and_compaction(azure: AzureTable) -> None:
    first = azure.server(*FAST, "--compaction-interval-s", "0")
    http = session()
    orders, blobs = _fill(http, first, rounds=5)
    first.kill()  # SIGKILL right after the last acknowledgement: the WAL has what Delta may not
    first.start()
    _same_streams(http, first, orders, blobs)
    wait_for(flushed(first), timeout_s=30)
    files_before = len(azure.delta().file_uris())
    assert files_before >= 5, "five flushed rounds should have left as many files in the container"

    first.stop()
    # A server with an empty data directory on the same table: everything comes from the container.
    second = azure.server(*FAST, "--compaction-interval-s", "0.5")
    _same_streams(http, second, orders, blobs)
    wait_for(lambda: any(after < before for before, after in _compaction_passes(second)), timeout_s=60)
    assert len(azure.delta().file_uris()) < files_before
    _same_streams(http, second, orders, blobs)


def _plan(http: requests.Session, url: str) -> dict[str, object]:
    response = http.get(url, params={"offset": "-1"}, headers=PLAN)
    assert response.status_code == 200, response.text
    plan: dict[str, object] = response.json()
    return plan


def test_read_plans_on_azure_are_served_by_the_server(azure: AzureTable) -> None:
    server = azure.server(*FAST, "--compaction-interval-s", "0")
    http = session()
    url = server.stream_url("orders")
    orders, _ = _fill(http, server, rounds=2)
    wait_for(lambda: _plan(http, url)["delta_end"] == offset_at(40), timeout_s=30)
    plan = _plan(http, url)
    (segment,) = plan["segments"]  # type: ignore[misc]
    files = segment["files"]
    assert len(files) >= 2
    store = DeltaStorageHandler(f"{azure.uri}/streams", azure.azurite.storage_options())
    rows = []
    for file in files:
        assert file["url"].startswith("/v1/files/") and "local_path" not in file
        body = http.get(server.url + file["url"]).content
        with store.open_input_file(file["path"]) as stored:
            assert body == stored.read()  # the bytes in the container
        assert len(body) == file["size"]
        table = pq.ParquetFile(io.BytesIO(body)).read_row_groups([group["index"] for group in file["row_groups"]])
        rows += [r for r in table.to_pylist() if r["stream_uid"] == segment["stream_uid"] and r["kind"] == "message"]
    assert [json.loads(row["data"]) for row in sorted(rows, key=lambda row: row["seq"])] == json.loads(orders)

    first = server.url + files[0]["url"]
    size = files[0]["size"]
    head, tail = http.get(first, headers={"Range": "bytes=0-3"}), http.get(first, headers={"Range": "bytes=-4"})
    assert (head.status_code, head.content, head.headers["Content-Range"]) == (206, b"PAR1", f"bytes 0-3/{size}")
    assert (tail.status_code, tail.content) == (206, b"PAR1")  # a Parquet file ends with its magic too
    middle = http.get(first, headers={"Range": f"bytes=4-{size + 100}"})
    assert middle.status_code == 206 and len(middle.content) == size - 4
    beyond = http.get(first, headers={"Range": f"bytes={size}-"})
    assert beyond.status_code == 416 and beyond.headers["Content-Range"] == f"bytes */{size}"
    described = http.head(first)
    assert described.status_code == 200 and int(described.headers["Content-Length"]) == size
    forged = http.get(first.replace("signature=", "signature=0"))
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "INVALID_SIGNATURE"

    # a planned file deleted from the container (as vacuum does after compaction) answers 404
    store.delete_file(files[0]["path"])
    missing = http.get(first)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "FILE_NOT_FOUND"


@pytest.mark.slow
@pytest.mark.serial
def test_conformance_on_azure(azure: AzureTable) -> None:
    """The whole public conformance suite against a server whose table is in the container."""
    server = azure.server(*CONFORMANCE)
    result = run_conformance(server.url, include_subscriptions=True)
    failures = "\n".join(f"  {failure.full_name}: {failure.error}" for failure in result.failures)
    assert (result.passed, result.failed, result.skipped) == (SUITE_TESTS, 0, 0), f"{result.summary}\n{failures}"
