"""A storage location written by the previous release opens under this code as it is.

The fixture (``fixtures/location-38b4080.tar.gz``, see its README) was written by the server
before storage ownership existed and then killed with ``kill -9``: part of its records are in
Delta, the rest only in its WAL. The current server claims the location (epoch 1: nothing
owned it), replays the WAL, and serves every acknowledged message once; producer state
survives; a second server on the same location is then refused.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from servers import ServerProcess

FIXTURE = Path(__file__).parent / "fixtures" / "location-38b4080.tar.gz"
JSON = {"Content-Type": "application/json"}


def _reads(server: ServerProcess, name: str) -> list[requests.Response]:
    """The answers of reading a stream from its start to its end."""
    answers, offset = [], "-1"
    while True:
        answer = requests.get(server.stream_url(name), params={"offset": offset}, timeout=30)
        assert answer.status_code == 200, answer.text
        answers.append(answer)
        offset = answer.headers["Stream-Next-Offset"]
        if answer.headers.get("Stream-Up-To-Date") == "true":
            return answers


def _read_all(server: ServerProcess, name: str) -> bytes:
    return b"".join(answer.content for answer in _reads(server, name))


def _read_json(server: ServerProcess, name: str) -> list[object]:
    return [item for answer in _reads(server, name) for item in answer.json()]


@pytest.fixture
def legacy_dir(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "data"


def test_a_location_of_the_previous_release_opens_with_everything_acknowledged(
    server_factory: Callable[..., ServerProcess], legacy_dir: Path, tmp_path: Path
) -> None:
    assert list((legacy_dir / "wal").iterdir()), "the fixture keeps records only in its WAL"
    server = server_factory(data_dir=legacy_dir)
    assert _read_json(server, "orders") == [{"id": i} for i in range(81)]
    assert _read_all(server, "blobs") == b"".join(bytes([i]) * 100 for i in range(10))

    producer = {"Producer-Id": "p1", "Producer-Epoch": "0"}
    duplicate = requests.post(
        server.stream_url("orders"), data=json.dumps({"id": 80}), headers={**JSON, **producer, "Producer-Seq": "1"}
    )
    assert duplicate.status_code == 204  # the producer's state came through the WAL replay
    fresh = requests.post(
        server.stream_url("orders"), data=json.dumps({"id": 81}), headers={**JSON, **producer, "Producer-Seq": "2"}
    )
    assert fresh.status_code == 200

    storage = str(legacy_dir / "delta")
    with pytest.raises(RuntimeError, match="has not released it"):
        server_factory("--storage-uri", storage, data_dir=tmp_path / "other")
    server.stop()  # a clean stop releases the location
    other = server_factory("--storage-uri", storage, data_dir=tmp_path / "other")
    assert _read_json(other, "orders") == [{"id": i} for i in range(82)]
