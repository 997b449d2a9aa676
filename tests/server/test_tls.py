"""HTTPS without a proxy: ``--tls-certfile`` / ``--tls-keyfile``, a self-signed certificate
made in the test, and the client and CLI trusting it with ``verify=`` / ``--ca-cert``."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from security_support import new_token, self_signed_certificate, write_tokens
from servers import REPO_ROOT, ServerProcess

from durable_streams_server.serve import check_tls
from pyspark_durable_streams.client import Backoff, CertificateError, Client, TransportError

TOKEN = new_token("tls")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory, certificate: tuple[Path, Path]) -> Iterator[ServerProcess]:
    """TLS and tokens together, as an exposed deployment would run."""
    cert, key = certificate
    directory = tmp_path_factory.mktemp("tls-server")
    tokens = write_tokens(directory / "tokens.json", [{"name": "tls", "token": TOKEN, "scope": "admin"}])
    args = ["--tls-certfile", str(cert), "--tls-keyfile", str(key), "--auth-tokens-file", str(tokens)]
    server = ServerProcess(directory / "data", [*args, "--long-poll-timeout-ms", "500"]).start()
    yield server
    server.kill()


def base_url(server: ServerProcess) -> str:
    return f"https://127.0.0.1:{server.port}"


def test_append_and_read_over_https(https: ServerProcess, certificate: tuple[Path, Path]) -> None:
    cert, _ = certificate
    with Client(base_url(https), token=TOKEN, verify=str(cert), backoff=Backoff(deadline_s=5)) as client:
        stream = client.stream(f"v1/stream/tls-{uuid.uuid4().hex[:8]}")
        stream.create("application/json")
        first = stream.append_json({"n": 1}).next_offset
        stream.append_json({"n": 2})
        stream.snapshots.publish(first, b"{}", content_type="application/json")
        assert [m.json() for m in stream.read(first)] == [{"n": 2}]
        assert stream.snapshots.latest() is not None  # the 307 points at https, token kept
        tail = stream.metadata().next_offset
        stream.close()
        assert list(stream.read(tail, live="sse")) == []  # SSE over TLS, ends at the close


def test_an_untrusted_certificate_fails_at_once_with_a_hint(https: ServerProcess) -> None:
    """Not a ``TransportError``: a reader (which retries those for a minute) gives up at once."""
    with Client(base_url(https), token=TOKEN) as client:
        for attempt in (
            lambda: client.stream("v1/stream/x").metadata(),
            lambda: list(client.stream("v1/stream/x").read()),
        ):
            with pytest.raises(CertificateError, match="CERTIFICATE_VERIFY_FAILED") as raised:
                attempt()
            assert not isinstance(raised.value, TransportError)
            assert "verify=" in str(raised.value) and "--ca-cert" in str(raised.value)


def test_plain_http_gets_no_answer_from_the_tls_port(https: ServerProcess) -> None:
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{https.port}/v1/stream/x", timeout=5)


def test_the_cli_trusts_a_ca_file(https: ServerProcess, certificate: tuple[Path, Path]) -> None:
    cert, _ = certificate
    path = f"v1/stream/tls-cli-{uuid.uuid4().hex[:8]}"
    base = ["--url", base_url(https), "--token", TOKEN]

    def run(*args: str, ca: bool = True) -> subprocess.CompletedProcess[bytes]:
        command = [sys.executable, "-m", "pyspark_durable_streams.client.cli", *base]
        command += ["--ca-cert", str(cert)] if ca else []
        return subprocess.run([*command, *args], capture_output=True, timeout=60, cwd=REPO_ROOT)

    created = run("create", path, "--content-type", "text/plain", "--data", "over tls\n")
    assert created.returncode == 0, created.stderr
    assert run("cat", path).stdout == b"over tls\n"
    refused = run("cat", path, ca=False)
    assert refused.returncode == 1 and b"CERTIFICATE_VERIFY_FAILED" in refused.stderr


# -- startup errors ---------------------------------------------------------------------------


def test_certificate_and_key_go_together(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    for pair in ((str(cert), None), (None, str(key))):
        with pytest.raises(SystemExit, match="--tls-certfile and --tls-keyfile go together"):
            check_tls(*pair)


def test_unusable_files_are_named(certificate: tuple[Path, Path], tmp_path: Path) -> None:
    cert, key = certificate
    with pytest.raises(SystemExit, match=r"cannot serve HTTPS with --tls-certfile .*missing\.pem"):
        check_tls(str(tmp_path / "missing.pem"), str(key))
    with pytest.raises(SystemExit, match="the key unencrypted and matching the certificate"):
        check_tls(str(cert), str(cert))  # a certificate is no key
    _, other_key = self_signed_certificate(tmp_path)
    with pytest.raises(SystemExit, match="matching the certificate"):
        check_tls(str(cert), str(other_key))


def test_an_encrypted_key_fails_at_start_instead_of_prompting(certificate: tuple[Path, Path], tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    cert, key = certificate
    loaded = serialization.load_pem_private_key(key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        loaded.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    command = [sys.executable, "-m", "durable_streams_server", "--data-dir", str(tmp_path / "data")]
    command += ["--tls-certfile", str(cert), "--tls-keyfile", str(encrypted)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, stdin=subprocess.DEVNULL
    )
    assert result.returncode != 0
    assert f"cannot serve HTTPS with --tls-certfile {cert} and --tls-keyfile {encrypted}" in result.stderr
