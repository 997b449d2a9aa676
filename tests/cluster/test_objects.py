"""Conditional objects (cluster mode's lease primitive) on real stores: moto's S3 server on loopback
and a temp directory, the same test bodies for both; processes racing on the local backend."""

from __future__ import annotations

import datetime
import fcntl
import multiprocessing
import os
import socket
import time
import uuid
from collections.abc import Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from urllib.parse import quote, urlencode

import boto3
import pytest
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from servers import MotoServer, free_port

from durable_streams_server.cluster.node.objects import (
    ConditionalObjects,
    ObjectStoreError,
    S3Objects,
    Versioned,
    open_objects,
)
from durable_streams_server.storage.presign import S3Presigner


@pytest.fixture(params=["s3", "local"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConditionalObjects]:
    if request.param == "s3":
        moto: MotoServer = request.getfixturevalue("moto")
        bucket = f"objects-{uuid.uuid4().hex[:12]}"
        moto.create_bucket(bucket)
        store = open_objects(f"s3://{bucket}/cluster-root", moto.storage_options())
    else:
        store = open_objects(str(tmp_path / "root"), {})
    yield store
    store.close()


def test_only_the_first_create_wins(objects: ConditionalObjects) -> None:
    etag = objects.create("cluster.json", b'{"shards": 4}')
    assert etag is not None
    assert objects.create("cluster.json", b'{"shards": 8}') is None
    assert objects.get("cluster.json") == Versioned(b'{"shards": 4}', etag)


def test_a_stale_etag_replaces_nothing(objects: ConditionalObjects) -> None:
    first = objects.create("leases/0003.json", b"n1 epoch 1")
    assert first is not None
    second = objects.replace("leases/0003.json", b"n2 epoch 2", first)
    assert second is not None
    assert objects.replace("leases/0003.json", b"n3 epoch 2", first) is None
    assert objects.get("leases/0003.json") == Versioned(b"n2 epoch 2", second)


@pytest.mark.parametrize("new_body", [b"beat 2", b"beat 1"], ids=["new-body", "identical-body"])
def test_the_current_etag_replaces_and_changes(objects: ConditionalObjects, new_body: bytes) -> None:
    first = objects.create("nodes/n1.json", b"beat 1")
    assert first is not None
    second = objects.replace("nodes/n1.json", new_body, first)
    assert second is not None and second != first  # even for an identical body
    assert objects.replace("nodes/n1.json", new_body, first) is None  # no ABA: the old etag stays stale
    assert objects.get("nodes/n1.json") == Versioned(new_body, second)


def test_absent_keys(objects: ConditionalObjects) -> None:
    assert objects.get("leases/0001.json") is None
    assert objects.replace("leases/0001.json", b"x", '"0123456789abcdef0123456789abcdef"') is None
    assert objects.get("leases/0001.json") is None


def test_bodies_come_back_exactly(objects: ConditionalObjects) -> None:
    for key, body in [
        ("empty", b""),
        ("tricky", b"#ds-object " + b"0" * 32 + b"\nrest"),
        ("binary", bytes(range(256))),
    ]:
        assert objects.create(key, body) is not None
        found = objects.get(key)
        assert found is not None and found.body == body


def test_list_keys(objects: ConditionalObjects) -> None:
    if isinstance(objects, S3Objects):
        objects.page_size = 2  # three pages for five keys: continuation tokens are followed
    keys = ["leases/0002.json", "cluster.json", "leases/0001.json", "nodes/n1.json", "leases/0010.json"]
    for key in keys:
        assert objects.create(key, b"{}") is not None
    assert objects.replace("leases/0001.json", b"{}", objects.get("leases/0001.json").etag) is not None  # type: ignore[union-attr]
    assert objects.list_keys("") == sorted(keys)
    assert objects.list_keys("leases/") == ["leases/0001.json", "leases/0002.json", "leases/0010.json"]
    assert objects.list_keys("leases/000") == ["leases/0001.json", "leases/0002.json"]
    assert objects.list_keys("lea") == ["leases/0001.json", "leases/0002.json", "leases/0010.json"]
    assert objects.list_keys("nothing/") == []


def test_invalid_keys_are_refused(objects: ConditionalObjects) -> None:
    for key in ["", "/abs", "a//b", "../up", "leases/.hidden", "a\\b"]:
        with pytest.raises(ValueError, match="invalid object key"):
            objects.create(key, b"x")
    with pytest.raises(ValueError, match="invalid object key"):
        objects.list_keys("../")


def test_an_object_written_by_other_means_is_read_whole_and_replaceable(
    objects: ConditionalObjects, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if isinstance(objects, S3Objects):
        moto: MotoServer = request.getfixturevalue("moto")
        signer = objects._signer
        client = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1", **_KEYS)
        client.put_object(Bucket=signer.bucket, Key=f"{signer.prefix}/cluster.json", Body=b'{"shards": 2}')
    else:
        (tmp_path / "root").mkdir()
        (tmp_path / "root" / "cluster.json").write_bytes(b'{"shards": 2}')
    found = objects.get("cluster.json")
    assert found is not None and found.body == b'{"shards": 2}'
    assert objects.create("cluster.json", b"{}") is None
    assert objects.replace("cluster.json", b'{"shards": 3}', found.etag) is not None
    assert objects.replace("cluster.json", b'{"shards": 4}', found.etag) is None


_KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def test_a_store_that_is_down_fails_within_the_timeout(tmp_path: Path) -> None:
    options = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
    }
    store = open_objects("s3://bucket/root", options, timeout_s=5.0)
    for call in (lambda: store.get("leases/0001.json"), lambda: store.create("leases/0001.json", b"x")):
        started = time.monotonic()
        with pytest.raises(ObjectStoreError, match=r"leases/0001\.json.*ConnectError"):
            call()
        assert time.monotonic() - started < 2.5  # a refused connection fails at once, not after the timeout
    store.close()


def test_a_store_that_never_answers_fails_within_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        options = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
        }
        store = open_objects("s3://bucket/root", options, timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(ObjectStoreError, match=r"PUT 'leases/0001\.json': ReadTimeout"):
            store.replace("leases/0001.json", b"x", '"etag"')
        assert 0.5 <= time.monotonic() - started < 3.0  # the timeout bites (a loaded CI may add a little)
        store.close()


def test_a_stopped_moto_and_a_missing_bucket_are_store_errors(tmp_path: Path) -> None:
    moto = MotoServer().start(tmp_path)
    try:
        # A timeout well above moto's first answer under a loaded CI (it loads its S3 backend lazily):
        # this test is about the 404s and the refused connection, not about timing.
        store = open_objects("s3://absent-bucket/root", moto.storage_options(), timeout_s=15.0)
        with pytest.raises(ObjectStoreError, match=r"GET 'cluster\.json': HTTP 404 NoSuchBucket"):
            store.get("cluster.json")
        with pytest.raises(ObjectStoreError, match=r"PUT 'cluster\.json': HTTP 404 NoSuchBucket"):
            store.replace("cluster.json", b"{}", '"etag"')
        with pytest.raises(ObjectStoreError, match=r"LIST 'leases/': HTTP 404 NoSuchBucket"):
            store.list_keys("leases/")
    finally:
        moto.stop()
    with pytest.raises(ObjectStoreError, match=r"cluster\.json.*ConnectError"):
        store.create("cluster.json", b"{}")
    store.close()


def test_a_held_local_lock_times_out_as_a_store_error(tmp_path: Path) -> None:
    store = open_objects(f"file://{tmp_path}", {}, timeout_s=0.3)
    etag = store.create("leases/0001.json", b"x")
    assert etag is not None
    with open(tmp_path / "leases" / ".0001.json.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(ObjectStoreError, match=r"0001\.json.*locked"):
            store.replace("leases/0001.json", b"y", etag)
        assert 0.3 <= time.monotonic() - started < 3.0  # the timeout bites, not a hang
    assert store.replace("leases/0001.json", b"y", etag) is not None


@pytest.mark.parametrize(
    "uri", ["az://container/root", "gs://bucket/root", "abfss://fs@account.dfs.core.windows.net/r"]
)
def test_other_schemes_are_refused(uri: str) -> None:
    scheme = uri.split(":")[0]
    with pytest.raises(ValueError, match=rf"supports s3:// .* local paths, not {scheme}://"):
        open_objects(uri, {})


def test_s3_without_static_credentials_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "ACCESS_KEY_ID", "SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="static S3 credentials"):
        open_objects("s3://bucket/root", {})


@pytest.mark.parametrize(
    ("endpoint", "token"), [("http://127.0.0.1:9000", None), (None, "session/token+=")], ids=["path-style", "aws"]
)
@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("GET", "streams/a b/part-1.parquet", {}),
        ("PUT", "leases/0003.json", {}),
        ("GET", None, {"list-type": "2", "prefix": "root/leases/", "max-keys": "2", "continuation-token": "a/b+c="}),
    ],
    ids=["get", "put", "list"],
)
def test_signed_urls_match_botocore(
    monkeypatch: pytest.MonkeyPatch,
    endpoint: str | None,
    token: str | None,
    method: str,
    path: str | None,
    query: dict[str, str],
) -> None:
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    signer = S3Presigner("bucket", "root", "AKID", "SECRET", token, "eu-west-1", endpoint)
    ours = signer.signed(method, path, 300, query=query, now=now)
    base = ours.split("?")[0]
    unsigned_query = urlencode(query, quote_via=quote)  # botocore sorts them itself
    request = AWSRequest(method=method, url=base + ("?" + unsigned_query if query else ""))
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now.replace(tzinfo=None))
    S3SigV4QueryAuth(Credentials("AKID", "SECRET", token), "s3", "eu-west-1", expires=300).add_auth(request)
    theirs = request.prepare().url
    assert _signature(ours) == _signature(theirs), (ours, theirs)


def _signature(url: str) -> str:
    return url.rsplit("X-Amz-Signature=", 1)[1]


def _increment(root: str, rounds: int, ready: Barrier, retries: Queue[int]) -> None:
    """``rounds`` read-modify-replace increments of the counter, retrying lost races (counted)."""
    store = open_objects(root, {}, timeout_s=30)
    ready.wait()
    lost = 0
    for _ in range(rounds):
        while True:
            found = store.get("counter")
            assert found is not None
            if store.replace("counter", str(int(found.body) + 1).encode(), found.etag) is not None:
                break
            lost += 1
    retries.put(lost)


def test_processes_racing_on_a_local_counter_lose_no_increment(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    store = open_objects(root, {})
    assert store.create("counter", b"0") is not None
    context = multiprocessing.get_context("spawn")
    ready, retries = context.Barrier(4), context.Queue()
    workers = [context.Process(target=_increment, args=(root, 50, ready, retries)) for _ in range(4)]
    for worker in workers:
        worker.start()
    lost = [retries.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    found = store.get("counter")
    assert found is not None and found.body == b"200"
    assert sum(lost) > 0  # they did race (else this proves nothing)
    assert sorted(os.listdir(tmp_path / "root")) == [".counter.lock", "counter"]  # no temp file left
