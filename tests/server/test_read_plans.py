"""Read plans (direct history reads): what the plan endpoint and the signed file endpoint answer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import requests
from servers import MotoServer, ServerProcess, session, wait_for

from durable_streams_server.config import ConfigError, ServerConfig

PLAN = {"Accept": "application/vnd.durable-streams.read-plan+json"}
JSON = {"Content-Type": "application/json"}
FAST = ("--flush-interval-ms", "50", "--tail-cache-bytes", "0")


def _fill(http: requests.Session, url: str, batches: int = 3, per: int = 10) -> None:
    assert http.put(url, headers=JSON).status_code == 201
    for b in range(batches):
        body = json.dumps([{"n": b * per + i} for i in range(per)])
        assert http.post(url, headers=JSON, data=body).status_code == 204


def _plan(http: requests.Session, url: str, **params: str) -> requests.Response:
    return http.get(url, params={"offset": "-1", **params}, headers=PLAN)


def _flushed(http: requests.Session, url: str, count: int) -> bool:
    plan = _plan(http, url).json()
    return bool(plan["delta_end"] == f"{count:016d}_{0:016d}")


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One FAST server for the tests that plan only their own streams."""
    server = ServerProcess(tmp_path_factory.mktemp("plans") / "data", FAST).start()
    yield server
    server.kill()


def _reader_session() -> requests.Session:
    reader = session()
    reader.headers["Authorization"] = "Bearer reader-token-0123456789"
    return reader


def test_plan_lists_files_whose_rows_are_the_range(fast: ServerProcess) -> None:
    server = fast
    http = session()
    url, other = server.stream_url("planned"), server.stream_url("other")
    _fill(http, url)
    _fill(http, other)
    wait_for(lambda: _flushed(http, url, 30))
    response = _plan(http, url, end=f"{20:016d}_{0:016d}")
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/vnd.durable-streams.read-plan+json")
    plan = response.json()
    assert plan["start"] == f"{0:016d}_{0:016d}" and plan["end"] == f"{20:016d}_{0:016d}"
    assert plan["delta_end"] == plan["end"] and plan["content_type"] == "application/json"
    (segment,) = plan["segments"]
    assert (segment["first_seq"], segment["end_seq"]) == (0, 20)
    seen = []
    for file in segment["files"]:
        body = http.get(server.url + file["url"]).content
        assert len(body) == file["size"]
        path = server.data_dir / "plan.parquet"
        path.write_bytes(body)
        table = pq.ParquetFile(path).read_row_groups([g["index"] for g in file["row_groups"]])
        rows = [r for r in table.to_pylist() if r["stream_uid"] == segment["stream_uid"] and r["kind"] == "message"]
        seen += [(r["seq"], r["data"]) for r in rows if r["seq"] < 20]
    assert sorted(seen) == [(n, json.dumps({"n": n}, separators=(",", ":")).encode()) for n in range(20)] or sorted(
        seen
    ) == [(n, json.dumps({"n": n}).encode()) for n in range(20)]
    # a range request is answered with exactly those bytes
    first = segment["files"][0]
    part = http.get(server.url + first["url"], headers={"Range": "bytes=0-3"})
    assert part.status_code == 206 and part.content == b"PAR1"


def test_plan_stops_at_the_unflushed_tail_and_the_visible_tail(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory("--flush-interval-ms", "3600000")
    http = session()
    url = server.stream_url("unflushed")
    _fill(http, url)
    plan = _plan(http, url, end=f"{99:016d}_{0:016d}").json()
    assert plan["end"] == f"{30:016d}_{0:016d}"  # cut at the tail
    assert plan["delta_end"] == f"{0:016d}_{0:016d}" and plan["segments"] == []  # nothing flushed: all over HTTP


def test_fork_plan_takes_the_inherited_part_from_the_source(fast: ServerProcess) -> None:
    server = fast
    http = session()
    source, fork = server.stream_url("src"), server.stream_url("fork")
    _fill(http, source)
    headers = {**JSON, "Stream-Forked-From": "/v1/stream/src", "Stream-Fork-Offset": f"{15:016d}_{0:016d}"}
    assert http.put(fork, headers=headers).status_code == 201
    assert http.post(fork, headers=JSON, data=json.dumps([{"f": i} for i in range(5)])).status_code == 204
    wait_for(lambda: _flushed(http, fork, 20))
    plan = _plan(http, fork).json()
    spans = [(s["first_seq"], s["end_seq"]) for s in plan["segments"]]
    assert spans == [(0, 15), (15, 20)]
    assert plan["segments"][0]["stream_uid"] != plan["segments"][1]["stream_uid"]


def test_plan_below_retention_is_gone(fast: ServerProcess) -> None:
    server = fast
    http = session()
    url = server.stream_url("retained")
    _fill(http, url)
    snapshot = http.put(f"{url}/snapshot/{10:016d}_{0:016d}", headers=JSON, data=b"{}")
    assert snapshot.status_code == 204, snapshot.text
    gone = _plan(http, url, offset=f"{5:016d}_{0:016d}")
    assert gone.status_code == 410 and gone.json()["error"]["code"] == "OFFSET_GONE"
    assert _plan(http, url, offset=f"{10:016d}_{0:016d}").status_code == 200


def test_bad_plan_requests(server: ServerProcess) -> None:
    http = session()
    url = server.stream_url("bad")
    _fill(http, url)
    inside = _plan(http, url, offset=f"{1:016d}_{3:016d}")
    assert inside.status_code == 400 and inside.json()["error"]["code"] == "INVALID_OFFSET"
    assert _plan(http, url, offset="garbage").status_code == 400
    assert _plan(http, url, offset=f"{99:016d}_{0:016d}").status_code == 400
    assert _plan(http, server.stream_url("missing")).status_code == 404


def test_signed_file_urls_expire_and_cannot_be_forged(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*FAST, "--read-plan-ttl-s", "2")
    http = session()
    url = server.stream_url("signed")
    _fill(http, url)
    wait_for(lambda: _flushed(http, url, 30))
    file_url = _plan(http, url).json()["segments"][0]["files"][0]["url"]
    assert http.get(server.url + file_url).status_code == 200
    forged = file_url.replace("expires=", "expires=9")
    refused = http.get(server.url + forged)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "INVALID_SIGNATURE"
    unsigned = http.get(server.url + file_url.split("?")[0])
    assert unsigned.status_code == 403
    other_file = file_url.replace("part-", "part-x")
    assert http.get(server.url + other_file).status_code == 403  # the signature names the path
    # Valid until 2 s after the plan (--read-plan-ttl-s): wait for that moment, not a fixed 3 s.
    wait_for(lambda: http.get(server.url + file_url).status_code != 200, timeout_s=10, interval_s=0.1)
    expired = http.get(server.url + file_url)
    assert expired.status_code == 403 and expired.json()["error"]["code"] == "SIGNATURE_EXPIRED"


def test_unauthorised_tokens_get_no_plan(tmp_path: Path) -> None:
    grants = [
        {"name": "reader", "token": "reader-token-0123456789", "scope": "read", "prefixes": ["v1/stream/mine"]},
        {"name": "writer", "token": "writer-token-0123456789", "scope": "write"},
    ]
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(grants))
    server = ServerProcess(tmp_path / "data", ["--auth-tokens-file", str(tokens), *FAST]).start()
    try:
        http = session()
        writer = {"Authorization": "Bearer writer-token-0123456789"}
        for name in ("mine", "theirs"):
            assert http.put(server.stream_url(name), headers={**JSON, **writer}).status_code == 201
            assert http.post(server.stream_url(name), headers={**JSON, **writer}, data=b"[1,2]").status_code == 204
        reader = {**PLAN, "Authorization": "Bearer reader-token-0123456789"}
        wait_for(lambda: _flushed(_reader_session(), server.stream_url("mine"), 2))
        plan = http.get(server.stream_url("mine"), params={"offset": "-1"}, headers=reader)
        assert plan.status_code == 200
        file_url = plan.json()["segments"][0]["files"][0]["url"]
        assert http.get(server.url + file_url).status_code == 200  # the signature is the grant: no token
        denied = http.get(server.stream_url("theirs"), params={"offset": "-1"}, headers=reader)
        assert denied.status_code == 403 and "segments" not in denied.text
        anonymous = http.get(server.stream_url("mine"), params={"offset": "-1"}, headers=PLAN)
        assert anonymous.status_code == 401 and "segments" not in anonymous.text
    finally:
        server.kill()


def test_s3_plans_are_presigned_urls(moto: MotoServer, tmp_path: Path) -> None:
    moto.create_bucket("plans")
    args = [*moto.server_args("s3://plans/table"), *FAST, "--read-plan-ttl-s", "2"]
    server = ServerProcess(tmp_path / "data", args).start()
    try:
        http = session()
        url = server.stream_url("on-s3")
        _fill(http, url)
        wait_for(lambda: _flushed(http, url, 30), timeout_s=30)
        file = _plan(http, url).json()["segments"][0]["files"][0]
        assert file["url"].startswith(moto.endpoint + "/plans/table/streams/")
        assert "X-Amz-Signature=" in file["url"] and "testing" not in file["url"].split("Credential=")[0]
        body = http.get(file["url"], headers={"Range": "bytes=0-3"})
        assert body.status_code == 206 and body.content == b"PAR1"
        # (moto serves presigned URLs without checking their expiry; S3 refuses them after it)
        assert "X-Amz-Expires=2&" in file["url"]
    finally:
        server.kill()


def test_plan_urls_may_not_outlive_the_vacuum_retention() -> None:
    with pytest.raises(ConfigError, match="read_plan_ttl_s"):
        ServerConfig(vacuum_retention_hours=1, read_plan_ttl_s=3601)
    with pytest.raises(ConfigError, match="read_plan_ttl_s"):
        ServerConfig(read_plan_ttl_s=0)
    assert ServerConfig(vacuum_retention_hours=1, read_plan_ttl_s=3600).read_plan_ttl_s == 3600
