"""``durable-streams-server config show``: the effective settings, with every secret masked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from durable_streams_server.cli import show_config
from durable_streams_server.config_show import MASK, secret_name

TOKEN = "0123456789abcdef-token-never-shown"


@pytest.fixture(autouse=True)
def _no_server_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("DURABLE_STREAMS_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("AWS_SECRET_ACCESS_KEY", True),
        ("aws_secret_access_key", True),
        ("AWS_SESSION_TOKEN", True),
        ("AZURE_STORAGE_ACCOUNT_KEY", True),
        ("AZURE_STORAGE_SAS_KEY", True),
        ("AZURE_CLIENT_SECRET", True),
        ("GOOGLE_SERVICE_ACCOUNT_KEY", True),
        ("AWS_ACCESS_KEY_ID", False),
        ("AWS_REGION", False),
        ("AWS_ENDPOINT_URL", False),
        ("AZURE_STORAGE_ACCOUNT_NAME", False),
    ],
)
def test_which_storage_options_are_credentials(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


def test_secrets_are_masked_and_the_rest_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_STREAMS_AUTH_TOKENS", json.dumps([{"name": "ops", "token": TOKEN, "scope": "admin"}]))
    shown = show_config(
        [
            "--storage-option",
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI-secret",
            "--storage-option",
            "AWS_ACCESS_KEY_ID=AKIAEXAMPLE",
            "--storage-option",
            "AWS_SESSION_TOKEN=session-secret",
            "--advertise-url",
            "https://user:url-password@example.com:4437",
            "--cluster-secret-file",
            str(tmp_path / "secret"),
        ]
    )
    for secret in ("wJalrXUtnFEMI-secret", "session-secret", "url-password", TOKEN):
        assert secret not in shown
    assert f'"AWS_SECRET_ACCESS_KEY" = "{MASK}"' in shown and f'"AWS_SESSION_TOKEN" = "{MASK}"' in shown
    assert '"AWS_ACCESS_KEY_ID" = "AKIAEXAMPLE"' in shown
    assert f'advertise-url = "https://user:{MASK}@example.com:4437"' in shown
    assert "# bearer tokens: 1 configured: ops (admin); the tokens are not shown" in shown
    assert f'cluster-secret-file = "{tmp_path / "secret"}"' in shown  # (a path: the secret stays in its file)
    assert "# storage-uri: not set\n" in shown


def test_config_show_refuses_what_serving_would_refuse() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "durable_streams_server", "config", "show", "--max-body-bytes", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr.strip()) == (
        1,
        "",
        "--max-body-bytes must be greater than 0, got 0",
    )


@pytest.mark.parametrize(
    ("arguments", "error"),
    [(["dump"], "config: unknown command 'dump'"), ([], "config: a command is needed (show)")],
)
def test_an_unknown_config_command_says_so_and_prints_the_usage(arguments: list[str], error: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "durable_streams_server", "config", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(f"durable-streams-server {error}\nusage:\n")
    assert "durable-streams-server config show [--config FILE] [options]" in done.stderr


def test_config_help_prints_the_usage_and_succeeds() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "durable_streams_server", "config", "--help"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert "durable-streams-server config show [--config FILE] [options]" in done.stdout
