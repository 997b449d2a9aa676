"""The configuration file (``--config server.toml``): keys spelled as the flags, durations with
units, the precedence flag > environment > file > default, and errors naming the key and line."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests
from servers import REPO_ROOT, ServerProcess

from durable_streams_server.cli import build_parser, load_settings, show_config
from durable_streams_server.config_file import file_keys

FLAGS = [
    "--port",
    "9000",
    "--durability",
    "delta",
    "--long-poll-timeout-ms",
    "5000",
    "--vacuum-retention-hours",
    "168",
    "--read-plan-ttl-s",
    "90",
    "--lease-ttl-s",
    "2.5",
    "--max-body-bytes",
    "1048576",
    "--take-over",
    "ask",
    "--access-log",
    "--allow-private-webhook-urls",
    "127.0.0.0/8",
    "--allow-private-webhook-urls",
    "10.0.0.0/8",
    "--storage-option",
    "AWS_REGION=eu-west-1",
    "--storage-option",
    "AWS_ALLOW_HTTP=true",
]
FILE = """\
# the same settings as FLAGS, written as an operator would
port = 9000
durability = "delta"
long-poll-timeout-ms = "5s"
vacuum-retention-hours = "7d"
read-plan-ttl-s = "1.5m"
lease-ttl-s = "2500ms"
max-body-bytes = 1048576
take-over = "ask"
access-log = true
allow-private-webhook-urls = ["127.0.0.0/8", "10.0.0.0/8"]

[storage-option]
AWS_REGION = "eu-west-1"
AWS_ALLOW_HTTP = "true"
"""


@pytest.fixture(autouse=True)
def _no_server_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("DURABLE_STREAMS_")]:
        monkeypatch.delenv(name)


def _file(tmp_path: Path, text: str, name: str = "server.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _show(*argv: str) -> str:
    """``durable-streams-server config show`` as an operator runs it: its own process."""
    done = subprocess.run(
        [sys.executable, "-m", "durable_streams_server", "config", "show", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_file_gives_the_settings_its_flags_give(tmp_path: Path) -> None:
    """The whole effective configuration, compared as ``config show`` prints it."""
    from_file = _show("--config", str(_file(tmp_path, FILE)))
    from_flags = _show(*FLAGS)
    assert from_file == from_flags
    assert from_file != _show()  # (the settings are not the defaults)
    assert "long-poll-timeout-ms = 5000\n" in from_file and "vacuum-retention-hours = 168\n" in from_file
    assert load_settings(["--config", str(tmp_path / "server.toml")]) == load_settings(FLAGS)


def test_every_flag_is_a_key_of_the_file() -> None:
    flags = {action.option_strings[-1] for action in build_parser()._actions if action.option_strings}
    assert {f"--{key}" for key in file_keys(build_parser())} == flags - {"--help", "--config"}


def test_flag_over_environment_over_file_over_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = str(_file(tmp_path, 'port = 1111\nmax-body-bytes = 2222\nlog-format = "json"\n'))
    settings = load_settings(["--config", config])
    assert (settings.listen.port, settings.server.max_body_bytes, settings.logs.format) == (1111, 2222, "json")
    assert settings.server.max_read_bytes == build_parser().get_default("max_read_bytes")  # (not in the file)
    monkeypatch.setenv("DURABLE_STREAMS_PORT", "3333")
    monkeypatch.setenv("DURABLE_STREAMS_MAX_BODY_BYTES", "4444")
    settings = load_settings(["--config", config, "--max-body-bytes", "5555"])
    assert (settings.listen.port, settings.server.max_body_bytes, settings.logs.format) == (3333, 5555, "json")


def test_a_repeatable_flag_adds_to_the_files_entries(tmp_path: Path) -> None:
    text = 'allow-private-webhook-urls = ["10.0.0.0/8"]\n[storage-option]\nAWS_REGION = "a"\nAWS_ENDPOINT_URL = "http://a"\n'
    config = str(_file(tmp_path, text))
    flags = ["--storage-option", "AWS_ENDPOINT_URL=http://b", "--allow-private-webhook-urls", "127.0.0.0/8"]
    settings = load_settings(["--config", config, *flags])
    assert dict(settings.server.storage_options) == {"AWS_REGION": "a", "AWS_ENDPOINT_URL": "http://b"}
    assert settings.server.allow_private_webhook_urls == ("10.0.0.0/8", "127.0.0.0/8")


def test_a_repeatable_variable_adds_to_the_files_entries_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = 'allow-private-webhook-urls = ["10.0.0.0/8"]\n[storage-option]\nAWS_REGION = "a"\nAWS_ENDPOINT_URL = "http://a"\n'
    config = str(_file(tmp_path, text))
    monkeypatch.setenv("DURABLE_STREAMS_STORAGE_OPTION", "AWS_ENDPOINT_URL=http://env,AWS_PROFILE=env")
    monkeypatch.setenv("DURABLE_STREAMS_ALLOW_PRIVATE_WEBHOOK_URLS", "192.168.0.0/16")
    flags = ["--storage-option", "AWS_PROFILE=flag", "--allow-private-webhook-urls", "127.0.0.0/8"]
    settings = load_settings(["--config", config, *flags])
    assert dict(settings.server.storage_options) == {
        "AWS_REGION": "a",  # (the file's)
        "AWS_ENDPOINT_URL": "http://env",  # (the variable's over the file's)
        "AWS_PROFILE": "flag",  # (the flag's over the variable's)
    }
    assert settings.server.allow_private_webhook_urls == ("10.0.0.0/8", "192.168.0.0/16", "127.0.0.0/8")


def test_the_file_can_be_named_in_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_STREAMS_CONFIG", str(_file(tmp_path, "port = 7777\n")))
    assert load_settings([]).listen.port == 7777


GUIDE = REPO_ROOT / "docs/guides/configuration.md"
"""The guide to the file; its blocks are run here (``tests/notebooks/test_readme.py``'s ``COVERAGE``)."""
GUIDE_ERRORS = [  # (the files behind the guide's error messages, in its order)
    'port = 1\nhost = "h"\nmax_body_bytes = 5\n',
    "\n\n\nmax-body-byte = 5\n",
    '# the port\nport = "8080"\n',
    '\n\n\n\nidle-stream-s = "500ms"\n',
    "port = 1\nflush-interval-ms = 0\n",
    "port = 1\n" + "\n" * 5 + "max-body-bytes =\n",
]


def _block(page: str, pattern: str) -> str:
    found = re.search(pattern, page, re.S)
    assert found is not None, pattern
    return found.group(1)


def test_the_guides_errors_are_the_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guides/configuration.md, "Errors name the key and the line": each message as the server says it."""
    monkeypatch.chdir(tmp_path)
    said = []
    for text in GUIDE_ERRORS:
        _file(tmp_path, text)
        with pytest.raises(SystemExit) as raised:
            load_settings(["--config", "server.toml"])
        said.append(str(raised.value.code))
    shown = _block(GUIDE.read_text(encoding="utf-8"), r"## Errors name the key and the line.*?```text\n(.*?)```")
    assert said == shown.splitlines()


def test_the_guides_config_show_command(tmp_path: Path) -> None:
    """docs/guides/configuration.md, "`config show`": its command, on its example file, in a shell."""
    page = GUIDE.read_text(encoding="utf-8")
    _file(tmp_path, _block(page, r"```toml\n(.*?)```").replace("/etc/durable-streams/tokens.json", "tokens.json"))
    (tmp_path / "tokens.json").write_text(
        json.dumps([{"name": "ops", "token": "0123456789abcdef-ex", "scope": "read"}])
    )
    command = _block(page, r"## `config show`: the effective settings\n\n```bash\n(.*?)```").strip()
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        command,
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    assert "port = 9090\n" in done.stdout and 'storage-uri = "s3://my-bucket/streams"\n' in done.stdout
    assert "# bearer tokens: 1 configured: ops (read); the tokens are not shown" in done.stdout


def test_the_guides_example_is_its_flags() -> None:
    """docs/guides/configuration.md: its TOML example and the flags it says are the same server."""
    page = GUIDE.read_text(encoding="utf-8")
    toml_block = re.search(r"```toml\n(.*?)```", page, re.S)
    flags_block = re.search(r"is the same server as these flags:\n\n```bash\n(.*?)```", page, re.S)
    assert toml_block is not None and flags_block is not None
    with tempfile.TemporaryDirectory() as scratch:  # (the example's token file, made real)
        tokens = Path(scratch) / "tokens.json"
        tokens.write_text(json.dumps([{"name": "ops", "token": "0123456789abcdef-example", "scope": "admin"}]))

        def made_real(text: str) -> str:
            return text.replace("/etc/durable-streams/tokens.json", str(tokens))

        flags = shlex.split(made_real(flags_block.group(1)).replace("\\\n", " "))
        assert flags[0] == "durable-streams-server"
        path = Path(scratch) / "server.toml"
        path.write_text(made_real(toml_block.group(1)), encoding="utf-8")
        from_file = show_config(["--config", str(path)])
        assert from_file == show_config(flags[1:])
    assert "long-poll-timeout-ms = 20000" in from_file


@pytest.mark.parametrize(
    ("flags", "field", "expected"),
    [
        (["--long-poll-timeout-ms", "30000"], "long_poll_timeout_ms", 30_000),  # (a plain number: as before)
        (["--long-poll-timeout-ms", "5s"], "long_poll_timeout_ms", 5_000),
        (["--flush-interval-ms", "250ms"], "flush_interval_ms", 250),
        (["--tombstone-retention-s", "7d"], "tombstone_retention_s", 604_800),
        (["--idle-stream-s", "2m"], "idle_stream_s", 120),
        (["--vacuum-retention-hours", "2d"], "vacuum_retention_hours", 48),
        (["--request-timeout-s", "1500ms"], "request_timeout_s", 1.5),
        (["--compaction-interval-s", "1h"], "compaction_interval_s", 3600.0),
    ],
)
def test_durations_take_units_on_the_command_line(flags: list[str], field: str, expected: float) -> None:
    value = getattr(load_settings(flags).server, field)
    assert value == expected and type(value) is type(expected)


def test_durations_take_units_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_STREAMS_LEASE_TTL_S", "750ms")
    monkeypatch.setenv("DURABLE_STREAMS_SSE_RECONNECT_MS", "2m")
    settings = load_settings(["--cluster", "--storage-uri", "/tmp/root"])
    assert settings.cluster is not None and settings.cluster.lease_ttl_s == 0.75
    assert settings.server.sse_reconnect_ms == 120_000


def test_a_duration_that_is_no_whole_number_of_the_unit_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        load_settings(["--idle-stream-s", "500ms"])  # (0.5 s would silently have been 0: never)
    assert "argument --idle-stream-s: '500ms' is not a whole number of seconds" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        load_settings(["--long-poll-timeout-ms", "5 parsecs"])
    assert "'5 parsecs' is not a duration: a plain number in the setting's unit" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "port = 8080\n\nmax-body-byte = 5\n",
            "{f}:3: unknown setting 'max-body-byte' (did you mean 'max-body-bytes'?)",
        ),
        (
            "port = 8080\nmax_body_bytes = 5\n",
            "{f}:2: unknown setting 'max_body_bytes' (settings are written as their flags are: max-body-bytes)",
        ),
        ('config = "other.toml"\n', "{f}:1: unknown setting 'config' (a configuration file cannot name another)"),
        ('port = "8080"\n', "{f}:1: port: must be an integer, got '8080'"),
        ("# limits\nrequest-timeout-s = true\n", "{f}:2: request-timeout-s: must be a duration: "),
        ('port = 1\nidle-stream-s = "500ms"\n', "{f}:2: idle-stream-s: '500ms' is not a whole number of seconds"),
        ('durability = "fast"\n', "{f}:1: durability: must be one of wal, delta, got 'fast'"),
        ("access-log = 1\n", "{f}:1: access-log: must be true or false, got 1"),
        (
            'allow-private-webhook-urls = "10.0.0.0/8"\n',
            "{f}:1: allow-private-webhook-urls: must be an array of strings",
        ),
        (
            "port = 1\n\n[storage-option]\nAWS_ALLOW_HTTP = true\n",
            "{f}:3: storage-option: AWS_ALLOW_HTTP must be a string",
        ),
        ("port = 1\nflush-interval-ms = 0\n", "{f}:2: flush-interval-ms must be greater than 0, got 0"),
        ("port = 0\n", "{f}:1: port must be greater than 0, got 0"),
        ("port = 70000\n", "{f}:1: port must be at most 65535, got 70000"),
        ("cluster = true\nshards = 0\n", "{f}:2: shards must be greater than 0, got 0"),
        ('port = 1\nauth-tokens-file = "/nonexistent/tokens.json"\n', "{f}:2: cannot read --auth-tokens-file "),
        ("port = 1\nmax-body-bytes =\n", "{f}:2: max-body-bytes: not valid TOML: Invalid value (at line 2, column 17)"),
    ],
)
def test_a_bad_file_is_refused_naming_the_key_and_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(SystemExit) as raised:
        load_settings(["--config", str(path), "--storage-uri", str(tmp_path / "root")])
    assert str(raised.value.code).startswith(message.format(f=path))


def test_a_range_error_of_a_flag_names_the_flag_not_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, "max-body-bytes = 5\n")
    with pytest.raises(SystemExit, match=r"^--flush-interval-ms must be greater than 0, got 0$"):
        load_settings(["--config", str(path), "--flush-interval-ms", "0"])


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"^--config .*nope\.toml: cannot read it: No such file or directory$"):
        load_settings(["--config", str(tmp_path / "nope.toml")])


def test_config_show_is_itself_a_configuration_file(tmp_path: Path) -> None:
    shown = show_config(FLAGS)
    path = _file(tmp_path, shown, "shown.toml")
    assert show_config(["--config", str(path)]) == shown


def test_a_server_runs_with_its_files_settings(tmp_path: Path) -> None:
    """A real server given only ``--config`` (besides the test's port and data dir): the body
    limit and the long-poll timeout of the file are the ones it enforces (docs/guides/configuration.md's
    first command)."""
    path = _file(tmp_path, 'max-body-bytes = 1024\nlong-poll-timeout-ms = "500ms"\nflush-interval-ms = "50ms"\n')
    server = ServerProcess(tmp_path / "data", ("--config", str(path))).start()
    try:
        url = server.stream_url("configured")
        assert requests.put(url, headers={"Content-Type": "text/plain"}, timeout=30).status_code == 201
        assert (
            requests.post(url, data=b"x" * 1024, headers={"Content-Type": "text/plain"}, timeout=30).status_code == 204
        )
        too_large = requests.post(url, data=b"x" * 1025, headers={"Content-Type": "text/plain"}, timeout=30)
        assert too_large.status_code == 413, too_large.text
        tail = requests.head(url, timeout=30).headers["Stream-Next-Offset"]
        began = time.monotonic()
        waited = requests.get(url, params={"offset": tail, "live": "long-poll"}, timeout=30)
        assert waited.status_code == 204 and time.monotonic() - began < 5  # (the default waits 30 s)
    finally:
        server.stop()
