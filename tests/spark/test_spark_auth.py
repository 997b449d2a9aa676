"""The Spark connector against a server with TLS and bearer tokens: options ``token`` and
``caCertFile`` reach the driver and the executors, a wrong token fails naming the problem,
and the token stays out of Spark's plans (Spark redacts options whose key matches
``spark.redaction.regex``, by default ``(?i)secret|password|token|...``)."""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from security_support import new_token, self_signed_certificate, write_tokens
from servers import ServerProcess

from pyspark_durable_streams.client import Client

WRITER = new_token("spark-writer")
READER = new_token("spark-reader")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, Path]]:
    """(server, https base URL, CA file)."""
    directory = tmp_path_factory.mktemp("spark-auth")
    cert, key = self_signed_certificate(directory)
    tokens = write_tokens(
        directory / "tokens.json",
        [
            {"name": "spark-writer", "token": WRITER, "scope": "write", "prefixes": ["v1/stream/spark/"]},
            {"name": "spark-reader", "token": READER, "scope": "read", "prefixes": ["v1/stream/spark/"]},
        ],
    )
    args = ["--tls-certfile", str(cert), "--tls-keyfile", str(key), "--auth-tokens-file", str(tokens)]
    server = ServerProcess(directory / "data", args).start()
    yield server, f"https://127.0.0.1:{server.port}", cert
    server.kill()


def test_write_and_read_with_a_token_over_tls(spark: SparkSession, secured: tuple[ServerProcess, str, Path]) -> None:
    _, base, cert = secured
    url = f"{base}/v1/stream/spark/{uuid.uuid4().hex[:8]}"
    rows = spark.range(50).selectExpr("CAST(id AS STRING) AS value").repartition(2)
    connection = {"token": WRITER, "caCertFile": str(cert)}
    rows.write.format("durable_streams").mode("append").options(url=url, createStream="true", **connection).save()
    frame = spark.read.format("durable_streams").options(url=url, token=READER, caCertFile=str(cert)).load()
    assert sorted(int(row.value) for row in frame.select("value").collect()) == list(range(50))

    plan = io.StringIO()
    with contextlib.redirect_stdout(plan):
        frame.explain(extended=True)
    assert "durable_streams" in plan.getvalue() and READER not in plan.getvalue()


def test_spark_redacts_the_token_option(spark: SparkSession) -> None:
    """Where Spark shows data source options (plans, UI, event logs) it passes them through
    ``SQLConf.redactOptions``: checked with Spark's own function, not assumed."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    options = jvm.java.util.HashMap()
    for key, value in {"token": READER, "caCertFile": "/etc/ca.pem"}.items():
        options.put(key, value)
    scala_options = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(options)
    redacted = spark._jsparkSession.sessionState().conf().redactOptions(scala_options).toString()
    assert READER not in redacted and "token -> *********(redacted)" in redacted
    assert "caCertFile -> /etc/ca.pem" in redacted


def test_a_wrong_token_fails_naming_the_problem(spark: SparkSession, secured: tuple[ServerProcess, str, Path]) -> None:
    _, base, cert = secured
    url = f"{base}/v1/stream/spark/{uuid.uuid4().hex[:8]}"
    with Client(base, token=WRITER, verify=str(cert)) as client:
        client.stream(url).create("text/plain")
    for value_type in ({}, {"valueType": "string"}):  # the schema's HEAD, or straight to planning
        with pytest.raises(Exception) as read_error:
            options = {"url": url, "token": "wrong-token", "caCertFile": str(cert), **value_type}
            spark.read.format("durable_streams").options(**options).load().collect()
        assert "401" in str(read_error.value) and 'error="invalid_token"' in str(read_error.value)
    rows = spark.range(3).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(Exception) as write_error:
        rows.write.format("durable_streams").mode("append").options(url=url, token=READER, caCertFile=str(cert)).save()
    text = str(write_error.value)
    assert "403" in text and "token 'spark-reader' has scope 'read'" in text
    assert READER not in text


def test_without_the_ca_file_the_certificate_is_refused(
    spark: SparkSession, secured: tuple[ServerProcess, str, Path]
) -> None:
    _, base, _ = secured
    url = f"{base}/v1/stream/spark/{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception) as error:
        spark.read.format("durable_streams").options(url=url, token=READER).load().collect()
    assert "CERTIFICATE_VERIFY_FAILED" in str(error.value)
