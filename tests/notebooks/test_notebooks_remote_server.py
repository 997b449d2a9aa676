"""The notebooks against a server as it must run for a remote cluster: a non-loopback address
(``--host 0.0.0.0``, which needs tokens), TLS with a self-signed certificate, bearer tokens.
The ``token`` and ``ca_cert_file`` widgets reach the Python client, the CLI and the connector
(driver and executors): without the token the same run fails with ``401``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from notebook_runner import NotebookError, run_notebook
from pyspark.sql import SparkSession
from security_support import new_token, self_signed_certificate, write_tokens
from servers import ServerProcess

from pyspark_durable_streams.client import Client

TOKEN = new_token("databricks")


@pytest.fixture
def remote(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> tuple[str, Path]:
    """(https base URL, CA file) of a server bound to 0.0.0.0 with tokens and TLS."""
    cert, key = self_signed_certificate(tmp_path)
    tokens = write_tokens(tmp_path / "tokens.json", [{"name": "databricks", "token": TOKEN, "scope": "write"}])
    args = ["--host", "0.0.0.0", "--auth-tokens-file", str(tokens), "--tls-certfile", str(cert)]
    server = server_factory(*args, "--tls-keyfile", str(key), "--long-poll-timeout-ms", "1000")
    return f"https://127.0.0.1:{server.port}", cert


def test_quickstart_with_a_token_and_a_ca_file(spark: SparkSession, remote: tuple[str, Path]) -> None:
    url, cert = remote
    widgets = {"server_url": url, "stream": "nb-remote", "rows": "40"}
    with pytest.raises(NotebookError, match="401"):
        run_notebook("01_quickstart.py", spark, {**widgets, "ca_cert_file": str(cert)})
    run = run_notebook("01_quickstart.py", spark, {**widgets, "token": TOKEN, "ca_cert_file": str(cert)})
    assert run.namespace["message_count"] == 40  # written and read by Spark tasks with the token
    with Client(url, token=TOKEN, verify=str(cert)) as client:
        stored = [message.json()["order_id"] for message in client.stream("v1/stream/nb-remote").read("-1")]
    assert sorted(stored) == list(range(40))


def test_client_and_cli_notebook_with_a_token_and_a_ca_file(spark: SparkSession, remote: tuple[str, Path]) -> None:
    url, cert = remote
    widgets = {"server_url": url, "token": TOKEN, "ca_cert_file": str(cert), "stream": "nb-remote-client"}
    run = run_notebook("04_python_client_and_cli.py", spark, {**widgets, "events": "30"})
    assert run.namespace["head"]["content_type"] == "application/json"  # the CLI, through its environment
    assert len(run.namespace["everything"].splitlines()) == 30 + 10 + 3
    with Client(url, token=TOKEN, verify=str(cert)) as client:
        assert client.stream("v1/stream/nb-remote-client").metadata().closed
