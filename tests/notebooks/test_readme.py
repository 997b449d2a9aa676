"""Every code block of README.md and of the documentation site (``docs/``) runs (or, where this
machine cannot, fails the way it must).

``COVERAGE`` names the test that executes each block (a test of this file, or
``tests/<file>.py::<test>`` for a page tested beside its feature, which must name that page);
``test_every_block_is_covered`` fails when a block is added, renamed or dropped without updating
it. Adaptations are substitutions checked to apply (the live server's URL for
``http://127.0.0.1:4437``, temporary paths), and the few blocks that need what a test machine
lacks say so where they are run: the AWS example runs against moto, ``make`` runs with ``-n``,
``pip install`` lines are resolved against setup.py and this virtualenv, and the delta-spark
example must fail naming the extra.

The option and settings tables are generated from the code when the site is built; their test is
``tests/test_docs_reference.py``.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
import yaml
from notebook_runner import read_spark_defaults
from packaging.requirements import Requirement
from pyspark.sql import SparkSession
from readme_blocks import (
    DEFAULT_URL,
    README,
    Block,
    doc_blocks,
    mermaid_errors,
    run_bash,
    shell_env,
    substitute,
)
from security_support import bearer, self_signed_certificate
from servers import REPO_ROOT, MotoServer, ServerProcess, _wait_until_listening, free_port, wait_for
from starlette.testclient import TestClient

from pyspark_durable_streams.client import Client
from pyspark_durable_streams.delta import DELTA_SETTINGS

SPARK = 'docs/guides/spark.md:Read and write: `format("durable_streams")`'
CLIENT = "docs/guides/client-and-cli.md:The Python client and the command line"
S3 = "docs/guides/object-storage.md:Running against S3 (or any S3-compatible store)"
SECURITY = "docs/guides/security.md:Security: tokens, TLS, limits"
RUNNING = "docs/guides/running-the-server.md"
QUICKSTART = "docs/quickstart.md"

CONFIGURATION = "docs/guides/configuration.md"
CONFIG_TESTS = "tests/server/test_config_file.py"
COVERAGE = {
    "README.md:Two commands#1": "test_make_commands",
    "README.md:A Spark query in six lines#1": "test_quickstart",
    "docs/index.md:Two commands#1": "test_make_commands",
    "docs/architecture.md:Architecture#1": "test_mermaid_diagrams",
    "docs/architecture.md:The server's layers#1": "test_mermaid_diagrams",
    "docs/install.md:Install#1": "test_install_commands",
    f"{QUICKSTART}:1. Prerequisites#1": "test_quickstart",
    f"{QUICKSTART}:2. Start a server#1": "test_make_commands",
    f"{QUICKSTART}:3. Create a stream#1": "test_quickstart",
    f"{QUICKSTART}:4. Write#1": "test_quickstart",
    f"{QUICKSTART}:5. Read#1": "test_quickstart",
    f"{QUICKSTART}:6. A streaming query#1": "test_quickstart",
    f"{QUICKSTART}:7. The status page#1": "test_quickstart",
    f"{QUICKSTART}:8. Stop and clean up#1": "test_quickstart",
    "docs/guides/spark.md:A session#1": "test_session_reads_spark_defaults",
    "docs/guides/spark.md:A session#2": "test_session_reads_spark_defaults",
    f"{SPARK}#1": "test_spark_examples",
    f"{SPARK}#2": "test_spark_examples",
    "docs/guides/spark.md:Delta Lake: the `[delta]` extra#1": "test_delta_session_example",
    f"{RUNNING}:The two commands#1": "test_make_commands",
    f"{RUNNING}:The two commands#2": "test_try_it_and_data_layout",
    f"{RUNNING}:Embedding the ASGI app#1": "test_embedding_example",
    f"{SECURITY}#1": "test_security_examples",
    f"{SECURITY}#2": "test_security_examples",
    f"{SECURITY}#3": "test_security_examples",
    f"{S3}#1": "test_s3_examples",
    f"{S3}#2": "test_s3_examples",
    "docs/operations/storage.md:How data is stored#1": "test_mermaid_diagrams",
    "docs/operations/storage.md:How data is stored#2": "test_try_it_and_data_layout",
    "docs/operations/storage.md:How data is stored#3": "test_reading_the_delta_table",
    f"{CLIENT}#1": "test_client_examples",
    f"{CLIENT}#2": "test_client_examples",
    f"{CLIENT}#3": "test_client_examples",
    f"{CLIENT}#4": "test_client_examples",
    f"{CLIENT}#5": "test_client_command_line",
    "docs/protocol.md:Buckets, snapshots and bootstrap (protocol extensions)#1": "test_extension_curl_examples",
    "docs/guides/cluster.md:A cluster: streams sharded across processes and machines#1": "test_cluster_example",
    "docs/guides/cluster.md:A cluster on one machine#1": "test_cluster_on_one_machine",
    "docs/guides/cluster.md:A cluster on one machine#2": "test_cluster_on_one_machine",
    "docs/guides/cluster.md:A cluster on one machine#3": "test_cluster_on_one_machine",
    "docs/guides/retention.md:Setting limits#1": "test_retention_examples",
    "docs/guides/retention.md:Setting limits#2": "test_retention_examples",
    "docs/guides/time-travel-and-lag.md:Named consumers and tombstones#1": "test_consumer_examples",
    "docs/guides/time-travel-and-lag.md:Named consumers and tombstones#2": "test_consumer_examples",
    f"{CONFIGURATION}:A configuration file#1": f"{CONFIG_TESTS}::test_a_server_runs_with_its_files_settings",
    f"{CONFIGURATION}:Keys are the flags' names#1": f"{CONFIG_TESTS}::test_the_guides_example_is_its_flags",
    f"{CONFIGURATION}:Keys are the flags' names#2": f"{CONFIG_TESTS}::test_the_guides_example_is_its_flags",
    f"{CONFIGURATION}:`config show`: the effective settings#1": f"{CONFIG_TESTS}::test_the_guides_config_show_command",
    f"{CONFIGURATION}:Errors name the key and the line#1": f"{CONFIG_TESTS}::test_the_guides_errors_are_the_servers",
}


def blocks_for(test: str) -> list[Block]:
    """The blocks ``COVERAGE`` assigns to ``test``, in page order."""
    blocks = [block for block in doc_blocks() if COVERAGE.get(block.name) == test]
    assert blocks, f"no block is assigned to {test}"
    return blocks


def test_every_block_is_covered() -> None:
    names = [block.name for block in doc_blocks()]
    assert len(names) == len(set(names))
    assert set(names) == set(COVERAGE), (
        f"blocks without a test: {sorted(set(names) - set(COVERAGE))}; "
        f"tests for blocks that are gone: {sorted(set(COVERAGE) - set(names))}"
    )
    tests = {name for name, value in globals().items() if name.startswith("test_") and callable(value)}
    assert {test for test in COVERAGE.values() if "::" not in test} <= tests
    for block, test in COVERAGE.items():
        if "::" in test:  # a page tested where its feature is: "tests/<file>.py::<test>", which must read that page
            path, name = test.split("::")
            source = (REPO_ROOT / path).read_text(encoding="utf-8")
            defined = {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
            assert name in defined, f"{block}: {path} has no test {name}"
            assert block.split(":")[0] in source, f"{block}: {path} never names the page it tests"


# -- diagrams and tables ------------------------------------------------------------------------


def test_mermaid_diagrams() -> None:
    for block in blocks_for("test_mermaid_diagrams"):
        assert block.lang == "mermaid"
        assert mermaid_errors(block.text) == [], f"{block.where}: lines that do not parse"
    # The check can fail: the usual mistakes do not parse.
    assert mermaid_errors("flowchart LR\n  A[label (with parentheses)] --> B\n")
    assert mermaid_errors("flowchart LR\n  A --> B[unclosed\n")
    assert mermaid_errors("graph\n  A --> B\n")
    assert mermaid_errors("flowchart LR\n  subgraph s[x]\n  A --> B\n")


def test_links_resolve() -> None:
    """Links to headings of the README and to files of the repository point somewhere."""
    text = README.read_text(encoding="utf-8")
    outside_code = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    slugs = {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", outside_code, flags=re.MULTILINE)
    }
    links = re.findall(r"\]\(([^)]+)\)", outside_code)
    assert links
    for link in links:
        if link.startswith("#"):
            assert link[1:] in slugs, f"README.md links to a missing heading: {link}"
        elif "://" not in link:
            assert (REPO_ROOT / link).exists(), f"README.md links to a missing file: {link}"


# -- install, make ---------------------------------------------------------------------------------


def test_install_commands() -> None:
    """Each ``pip install '.[extras]'`` names extras setup.py defines, and the packages its comment lists.

    Not run: there is no package index here, and the delta extra must not be installed (it would
    downgrade PySpark). Instead every requirement a line pulls in must be satisfied by this
    virtualenv, except delta-spark, which must be exactly what the delta extra adds.
    """
    from importlib.metadata import PackageNotFoundError, version

    (block,) = blocks_for("test_install_commands")
    setup = setup_arguments()
    extras: dict[str, list[str]] = setup["extras_require"]
    lines = [line for line in block.text.splitlines() if line.strip()]
    assert lines
    for line in lines:
        command, _, comment = line.partition("#")
        words = shlex.split(command)
        assert words[:2] == ["pip", "install"] and len(words) == 3, line
        requested = Requirement(words[2].replace(".", "pyspark-durable-streams", 1))
        assert requested.name == setup["name"]
        assert requested.extras <= set(extras), f"{line}: setup.py has no extra {requested.extras - set(extras)}"
        requirements = [Requirement(r) for r in setup["install_requires"]]
        requirements += [Requirement(r) for extra in requested.extras for r in extras[extra]]
        names = {r.name.lower() for r in requirements}
        for listed in re.findall(r"\(([^()]*)\)\s*$", comment):
            for item in listed.split(","):
                name = re.split(r"[\s<>=…]", item.strip())[0].lower()
                if name:
                    assert name in names, f"{line}: the comment names {name}, which this extra does not install"
        for requirement in requirements:
            if requirement.name == "delta-spark":
                assert requested.extras >= {"delta"}
                continue
            try:
                installed = version(requirement.name)
            except PackageNotFoundError:
                pytest.fail(f"{line}: {requirement.name} is not installed in this virtualenv")
            assert requirement.specifier.contains(installed, prereleases=True), (line, requirement, installed)
    assert "delta-spark" in " ".join(extras["delta"])


def setup_arguments() -> dict[str, Any]:
    """The literal keyword arguments of setup.py's ``setup(...)`` call."""
    tree = ast.parse((REPO_ROOT / "setup.py").read_text(encoding="utf-8"))
    (call,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setup"
    ]
    arguments = {}
    for keyword in call.keywords:
        with contextlib.suppress(ValueError):  # computed ones (packages, long_description) are not needed
            arguments[keyword.arg] = ast.literal_eval(keyword.value)
    return arguments


def test_make_commands() -> None:
    """``make -n``: the targets exist and run what the pages say (running them would rebuild .venv)."""
    blocks = blocks_for("test_make_commands")
    assert len(blocks) == 4  # README, the site's home, the quickstart, running the server
    for block in blocks:
        targets = [line.split("#")[0].split() for line in block.text.splitlines() if line.strip()]
        assert targets in ([["make", "serve"], ["make", "test"]], [["make", "serve"]]), block.where
    outputs = {}
    for target in (["serve"], ["test"], ["serve", "PORT=8080", "DATA=/var/lib/ds"]):
        result = subprocess.run(["make", "-n", *target], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        outputs[" ".join(target)] = result.stdout
    assert "durable-streams-server --host 127.0.0.1 --port 4437 --data-dir ./data" in outputs["serve"]
    assert "--port 8080 --data-dir /var/lib/ds" in outputs["serve PORT=8080 DATA=/var/lib/ds"]
    assert "ruff check" in outputs["test"] and "mypy" in outputs["test"] and "pytest" in outputs["test"]
    # The commands land in .venv/bin, off PATH: the README says how to call them.
    assert "$(BIN)/python -m pip install --quiet -e '.[server]'" in (REPO_ROOT / "Makefile").read_text()
    scripts = {entry.split("=")[0].strip() for entry in setup_arguments()["entry_points"]["console_scripts"]}
    assert scripts == {"durable-streams", "durable-streams-server"}
    for page in (README, REPO_ROOT / "docs" / "guides" / "running-the-server.md"):
        text = page.read_text(encoding="utf-8")
        assert all(f".venv/bin/{script}" in text for script in scripts) and "source .venv/bin/activate" in text, page


# -- the server ----------------------------------------------------------------------------------


def test_try_it_and_data_layout(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """The curl walk-through, against a server that ends SSE connections after a second (so curl -N returns)."""
    curl, layout = blocks_for("test_try_it_and_data_layout")
    server = server_factory("--sse-reconnect-ms", "1000")
    result = run_bash(substitute(curl.text, {DEFAULT_URL: server.url}), cwd=tmp_path)
    assert '[{"id":1},{"id":2}]' in result.stdout
    assert "event: control" in result.stdout  # the SSE read answered with the tail, then the server ended it

    assert layout.lang == "text"
    data_dir = server.data_dir
    wal_example, table_dir = (line.split()[0] for line in layout.text.splitlines()[1:3])
    assert re.fullmatch(r"wal/\d{20}\.wal", wal_example)
    assert any(re.fullmatch(r"\d{20}\.wal", path.name) for path in (data_dir / "wal").iterdir())
    assert (data_dir / table_dir / "_delta_log").is_dir(), f"no Delta table at <data-dir>/{table_dir}"


def test_quickstart(spark: SparkSession, server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """The quickstart's steps in order against a live server (``make serve`` itself is checked by
    ``test_make_commands``), the README's Spark example among them, then Ctrl-C and the clean-up."""
    (readme_spark, prerequisites, create, write, read, query, status, clean_up) = blocks_for("test_quickstart")
    versions = run_bash(prerequisites.text, cwd=tmp_path)
    python = re.search(r"Python 3\.(\d+)", versions.stdout)
    assert python and int(python.group(1)) >= 11, versions.stdout
    assert re.search(r'version "(17|21)[."]', versions.stderr), versions.stderr  # (java -version writes to stderr)

    server = server_factory(data_dir=tmp_path / "data")
    for block in (create, write):
        run_bash(substitute(block.text, {DEFAULT_URL: server.url}), cwd=tmp_path)
    orders = run_bash(substitute(read.text, {DEFAULT_URL: server.url}), cwd=tmp_path).stdout
    assert orders == '[{"id":1},{"id":2},{"id":3}]'

    assert query.text == readme_spark.text  # the README's example is the quickstart's step 6
    namespace: dict[str, Any] = {}
    exec(substitute(query.text, {DEFAULT_URL: server.url}), namespace)
    progress = namespace["query"].recentProgress
    assert namespace["query"].exception() is None
    assert sum(batch["numInputRows"] for batch in progress) == 3  # the three orders, printed by the console sink

    answer = run_bash(substitute(status.text, {DEFAULT_URL: server.url}), cwd=tmp_path).stdout
    assert answer.strip() == f"308 {server.url}/ui/"

    assert server.proc is not None
    server.proc.send_signal(signal.SIGINT)  # Ctrl-C
    assert server.proc.wait(timeout=60) == 0
    assert (tmp_path / "data" / "wal").is_dir()
    run_bash(clean_up.text, cwd=tmp_path)
    assert not (tmp_path / "data").exists()


def test_embedding_example(tmp_path: Path) -> None:
    (block,) = blocks_for("test_embedding_example")
    namespace: dict[str, Any] = {}
    exec(substitute(block.text, {'Path("/var/lib/ds")': f"Path({str(tmp_path / 'ds')!r})"}), namespace)
    with TestClient(namespace["app"]) as client:
        url = "/v1/stream/embedded"
        assert client.put(url, headers={"Content-Type": "text/plain"}).status_code == 201
        assert client.post(url, headers={"Content-Type": "text/plain"}, content=b"hello").status_code == 204
        assert client.get(url, params={"offset": "-1"}).text == "hello"
    assert (tmp_path / "ds" / "wal").is_dir()


def test_security_examples(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """The token file, the HTTPS server command and the client calls, as written (a self-signed
    certificate stands in for cert.pem/key.pem; loopback stands in for 0.0.0.0)."""
    tokens, serve, calls = blocks_for("test_security_examples")
    assert tokens.lang == "json"
    (tmp_path / "tokens.json").write_text(tokens.text)
    cert, key = self_signed_certificate(tmp_path)
    cert.rename(tmp_path / "cert.pem")
    key.rename(tmp_path / "key.pem")
    command = shlex.split(serve.text)
    assert command[:3] == ["durable-streams-server", "--host", "0.0.0.0"], command
    files = {"tokens.json", "cert.pem", "key.pem"}
    server = server_factory(*(str(tmp_path / arg) if arg in files else arg for arg in command[3:]))

    url = f"https://127.0.0.1:{server.port}"
    result = run_bash(substitute(calls.text, {"https://127.0.0.1:4437": url}), cwd=tmp_path)
    assert '[{"id":1}]' in result.stdout and '{"status":"ready"}' in result.stdout, result.stdout
    assert re.search(r"durable_streams_wal_bytes \d", result.stdout), result.stdout

    # The hashed read-only token covers bucket team-a only; the admin token may create it.
    admin, dashboards = bearer("admin-2f9c4e1b7a6d5c3e"), bearer("dashboards-0f1e2d3c4b5a6978")

    def status(method: str, path: str, headers: dict[str, str] | None = None) -> int:
        # verify per request: requests lets REQUESTS_CA_BUNDLE override a Session's verify
        return requests.request(method, url + path, headers=headers, verify=str(tmp_path / "cert.pem")).status_code

    assert status("PUT", "/team-a", admin) == 201
    assert status("GET", "/team-a/streams", dashboards) == 200
    assert status("PUT", "/team-a/kpis", dashboards) == 403
    assert status("GET", "/v1/stream/orders", dashboards) == 403
    assert status("GET", "/v1/stream/orders") == 401


def test_s3_examples(moto: MotoServer, tmp_path: Path) -> None:
    """Both commands, verbatim but for credentials and endpoint, serve streams stored in (moto's) S3.

    The AWS one names no endpoint, so here the object store finds moto through the environment
    (AWS_ENDPOINT_URL, which delta-rs reads like the AWS SDKs do).
    """
    s3 = boto3_client(moto)
    if "my-bucket" not in {bucket["Name"] for bucket in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket="my-bucket")
    aws, compatible = blocks_for("test_s3_examples")
    commands = [
        (
            substitute(aws.text, {"AWS_ACCESS_KEY_ID=…": "AWS_ACCESS_KEY_ID=testing", "=…": "=testing"}),
            {"AWS_ENDPOINT_URL": moto.endpoint, "AWS_ALLOW_HTTP": "true"},
        ),
        (substitute(compatible.text, {"http://127.0.0.1:9000": moto.endpoint, "minioadmin": "testing"}), {}),
    ]
    for number, (command, env) in enumerate(commands):
        prefix = f"durable-streams-{number}"
        command = substitute(command, {"s3://my-bucket/durable-streams": f"s3://my-bucket/{prefix}"})
        port = free_port()
        script = f"exec {command.strip()} --port {port} --data-dir {tmp_path / f'data{number}'}"
        with _background(script, tmp_path / f"server{number}.log", port, env) as url, Client(url) as client:
            stream = client.stream("v1/stream/on-s3")
            stream.create("text/plain")
            stream.append(b"stored in S3")
            assert b"".join(message.data for message in stream.read("-1")) == b"stored in S3"
        listed = s3.list_objects_v2(Bucket="my-bucket", Prefix=f"{prefix}/streams/_delta_log/")
        assert listed.get("KeyCount", 0) > 0, f"no Delta log under s3://my-bucket/{prefix}"


def test_cluster_example(moto: MotoServer, tmp_path: Path) -> None:
    """The cluster command, verbatim but for the store, addresses and shard count (two, not twelve
    processes on this machine), serves streams stored in each shard's table through the node."""
    (block,) = blocks_for("test_cluster_example")
    bucket = f"readme-cluster-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    port = free_port()
    token = uuid.uuid4().hex
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([{"name": "app", "token": token, "scope": "write"}]))
    secret = tmp_path / "cluster-secret"
    secret.write_text(uuid.uuid4().hex + uuid.uuid4().hex + "\n")
    command = substitute(
        block.text,
        {
            "--host 0.0.0.0": "--host 127.0.0.1",  # (loopback only on a test machine)
            "http://host1:4437": f"http://127.0.0.1:{port}",
            "/etc/ds/tokens.json": str(tokens),
            "/etc/ds/cluster-secret": str(secret),
            "s3://bucket/streams": f"s3://{bucket}/streams",
            "/var/lib/ds": str(tmp_path / "node"),
            "--shards 12": "--shards 2",
        },
    )
    env = {**moto.storage_options(), "AWS_ALLOW_HTTP": "true", "DURABLE_STREAMS_PORT": str(port)}
    with _background(command, tmp_path / "node.log", port, env) as url:
        wait_for(lambda: all(shard["state"] == "serving" for shard in _cluster_view(url)["shards"]), timeout_s=60)
        assert requests.get(f"{url}/v1/stream/one", timeout=10).status_code == 401  # (tokens are on)
        with Client(url, token=token) as client:
            for name in ("one", "two", "three"):
                stream = client.stream(f"v1/stream/{name}")
                stream.create("text/plain")
                stream.append(name.encode())
                assert b"".join(message.data for message in stream.read("-1")) == name.encode()
        assert len(_cluster_view(url)["shards"]) == 2
    listed = boto3_client(moto).list_objects_v2(Bucket=bucket, Prefix="streams/shard-")
    assert {key["Key"].split("/")[1] for key in listed["Contents"]} == {"shard-0000", "shard-0001"}


def test_cluster_on_one_machine(tmp_path: Path) -> None:
    """The two nodes as written (other ports; the relative paths in a temporary directory), then the curl
    lines through both nodes, then the clean-up."""
    start, use, clean_up = blocks_for("test_cluster_on_one_machine")
    commands = [line.removesuffix("&").strip() for line in start.text.splitlines() if line.strip()]
    assert len(commands) == 2 and all(line.endswith("&") for line in start.text.splitlines() if line.strip())
    ports = {"4437": free_port(), "4438": free_port()}
    paths = {f"./{name}": str(tmp_path / name) for name in ("cluster-root", "n1", "n2")}
    with contextlib.ExitStack() as nodes:
        urls = {}
        for number, (command, (old, port)) in enumerate(zip(commands, ports.items(), strict=True), start=1):
            node = {"./cluster-root": paths["./cluster-root"], f"./n{number}": paths[f"./n{number}"]}
            command = substitute(command, {f"--port {old}": f"--port {port}", **node})
            urls[old] = nodes.enter_context(_background(f"exec {command}", tmp_path / f"n{number}.log", port, {}))
        served = lambda: [shard["state"] for shard in _cluster_view(urls["4437"])["shards"]] == ["serving"] * 4  # noqa: E731
        wait_for(served, timeout_s=60)
        replacements = {f"http://127.0.0.1:{old}": url for old, url in urls.items()}
        result = run_bash(substitute(use.text, replacements), cwd=tmp_path)
        assert '[{"id":1},{"id":2}]' in result.stdout
        assert '["serving","serving","serving","serving"]' in result.stdout
        holders = {shard["holder"] for shard in _cluster_view(urls["4438"])["shards"]}
        assert holders <= {"n1", "n2"} and holders, holders
    for name in ("cluster-root", "n1", "n2"):
        assert (tmp_path / name).is_dir()
    run_bash(clean_up.text, cwd=tmp_path)
    assert not any((tmp_path / name).exists() for name in ("cluster-root", "n1", "n2"))


def _cluster_view(url: str) -> dict[str, Any]:
    view: dict[str, Any] = requests.get(f"{url}/v1/cluster", timeout=10).json()
    return view


def boto3_client(moto: MotoServer) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=moto.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@contextmanager
def _background(script: str, log: Path, port: int, env: dict[str, str]) -> Iterator[str]:
    """A README server command run by bash until the block ends (then SIGTERM); yields its URL."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT, env=shell_env(**env), start_new_session=True
        )
    try:
        _wait_until_listening(port, proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:  # (the whole process group: bash, the server, a cluster node's shard servers)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        # Until every process of the group has ended, not bash alone: a script that is more than
        # one command (the cluster example's comment line) runs the server as bash's child, and
        # bash ends at once on SIGTERM. The node then went on stopping unwaited, in a session of
        # its own: nothing ended it if its stop did not end, and it could outlive pytest.
        with contextlib.suppress(AssertionError):  # (then SIGKILL, below)
            wait_for(lambda: not _group_runs(proc.pid), timeout_s=30, interval_s=0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _group_runs(group: int) -> bool:
    """Whether a process of process group ``group`` runs (a zombie does not count)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, _, pgrp = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            except OSError:  # (gone meanwhile)
                continue
            if int(pgrp) == group and state != "Z":
                return True
    return False


def test_reading_the_delta_table(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """With ``--durability delta`` an acknowledged append is in the table: the example reads it at once."""
    (block,) = blocks_for("test_reading_the_delta_table")
    server = server_factory("--durability", "delta", data_dir=tmp_path / "data")
    with Client(server.url) as client:
        stream = client.stream("v1/stream/in-delta")
        stream.create("application/json")
        stream.append_json_batch([{"n": 1}, {"n": 2}])
    namespace: dict[str, Any] = {}
    cwd = Path.cwd()
    os.chdir(tmp_path)  # the example's relative path: ./data/delta/streams
    try:
        exec(block.text, namespace)
    finally:
        os.chdir(cwd)
    messages: pa.Table = namespace["messages"]
    rows = [row for row in messages.to_pylist() if row["stream"] == "v1/stream/in-delta"]
    assert [json.loads(row["data"])["n"] for row in rows] == [1, 2]  # sorted by the example, in stream order
    assert messages.sort_by("seq").num_rows == messages.num_rows  # plain columns: pyarrow's functions take them


def test_extension_curl_examples(server: ServerProcess, tmp_path: Path) -> None:
    (block,) = blocks_for("test_extension_curl_examples")
    result = run_bash(substitute(block.text, {DEFAULT_URL: server.url}), cwd=tmp_path)
    assert '"stream_id":"user-1"' in result.stdout.replace(" ", "")
    headers = result.stdout.lower()  # curl -i: HTTP/1.1 header names are case-insensitive
    assert "content-type: multipart/mixed" in headers
    assert "stream-snapshot-offset: 0000000000000001_0000000000000000" in headers
    assert '{"op":"set","v":2}' in result.stdout  # the message after the snapshot, in the bootstrap


def test_retention_examples(server: ServerProcess, tmp_path: Path) -> None:
    """The curl lines, then the Python lines, against one server: each leaves the stream as it says."""
    shell, python = blocks_for("test_retention_examples")
    result = run_bash(substitute(shell.text, {DEFAULT_URL: server.url}), cwd=tmp_path)
    headers = result.stdout.lower()  # curl -I: header names are case-insensitive
    assert "stream-retention-max-bytes: 1073741824" in headers and "stream-retention-max-age:" not in headers
    assert "stream-earliest-offset: 0000000000000000_0000000000000000" in headers
    script = substitute(python.text, {DEFAULT_URL: server.url})
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "0000000000000000_0000000000000000\n"
    meta = requests.head(server.stream_url("events"), timeout=10).headers
    assert meta["Stream-Retention-Max-Bytes"] == str(1 << 30) and "Stream-Retention-Max-Age" not in meta


def test_consumer_examples(server: ServerProcess) -> None:
    """The listing's shape is what a server answers; the alert rule's metrics and labels exist."""
    listing, alert = blocks_for("test_consumer_examples")
    (example,) = json.loads(listing.text)["consumers"]
    orders = server.stream_url("orders")
    assert requests.put(orders, headers={"Content-Type": "application/json"}, timeout=10).status_code == 201
    for n in range(4):
        requests.post(orders, data=b'{"n": %d}' % n, headers={"Content-Type": "application/json"}, timeout=10)
    progress = {"offsets": {"orders": example["offset"]}}
    assert requests.put(server.stream_url("__ds/consumers/etl"), json=progress, timeout=10).status_code == 200
    (row,) = requests.get(f"{server.url}/v1/consumers", timeout=10).json()["consumers"]
    assert {key: type(value) for key, value in row.items()} == {key: type(value) for key, value in example.items()}
    assert (row["consumer"], row["stream"], row["offset"], row["lag_messages"]) == (
        example["consumer"],
        example["stream"],
        example["offset"],
        example["lag_messages"],
    )

    (rule,) = yaml.safe_load(alert.text)["groups"][0]["rules"]
    metrics = requests.get(f"{server.url}/metrics", timeout=10).text
    for name in re.findall(r"durable_streams_\w+", rule["expr"]):
        series = re.search(rf"^{name}\{{(.*)\}} ", metrics, re.MULTILINE)
        assert series is not None, f"{name} is not exported"
        labels = set(re.findall(r'(\w+)="', series.group(1)))
        assert set(re.findall(r"\$labels\.(\w+)", rule["annotations"]["summary"])) <= labels


# -- Spark -----------------------------------------------------------------------------------------


def test_session_reads_spark_defaults(tmp_path: Path) -> None:
    """The two blocks in a fresh process (a second SparkSession cannot share this one's JVM)."""
    env_block, session_block = blocks_for("test_session_reads_spark_defaults")
    settings = read_spark_defaults()
    check = f"for key in {sorted(settings)!r}:\n    print(key, spark.conf.get(key))\nspark.stop()\n"
    script = (
        substitute(env_block.text, {"/path/to/pyspark-durable-streams": shlex.quote(str(REPO_ROOT))})
        + f"python - <<'EOF'\n{session_block.text}{check}EOF\n"
    )
    result = run_bash(script, cwd=tmp_path, timeout=180)
    lines = result.stdout.splitlines()
    assert lines[0] == "true"
    assert dict(line.split(" ", 1) for line in lines[1:]) == settings


def test_spark_settings_file_documents_the_delta_settings() -> None:
    """The commented Delta lines of spark-defaults.conf are the ones configure_delta sets."""
    text = (REPO_ROOT / "spark-defaults.conf").read_text(encoding="utf-8")
    commented = dict(re.findall(r"^# (spark\.[\w.]+)\s+(\S+)$", text, flags=re.MULTILINE))
    assert {key: commented[key] for key in DELTA_SETTINGS} == DELTA_SETTINGS
    assert re.fullmatch(r"io\.delta:delta-spark_2\.13:\d+\.\d+\.\d+", commented["spark.jars.packages"])
    assert not set(commented) & set(read_spark_defaults()), "a Delta setting is active: it needs jars"


def test_spark_examples(spark: SparkSession, server: ServerProcess, tmp_path: Path) -> None:
    streaming, batch = blocks_for("test_spark_examples")
    with Client(server.url) as client:
        orders = client.stream("v1/stream/orders")
        orders.create("application/json")
        orders.append_json_batch([{"id": i} for i in range(1, 6)])

    namespace: dict[str, Any] = {"spark": spark}
    replacements = {DEFAULT_URL: server.url, '"/tmp/ckpt"': repr(str(tmp_path / "ckpt"))}
    exec(substitute(streaming.text, replacements), namespace)
    query = namespace["query"]
    query.stop()  # a no-op: the example's query (availableNow) has copied everything and stopped
    assert query.exception() is None
    with Client(server.url) as client:
        copy = client.stream("v1/stream/orders-copy")
        assert copy.metadata().content_type == "application/json"  # the source's content type, not octet-stream
        copied = [message.json() for message in copy.read("-1")]
    assert copied == [{"id": i} for i in range(1, 6)]  # message for message
    cli = [sys.executable, "-m", "pyspark_durable_streams.client.cli", "--url", server.url]
    cat = subprocess.run(
        [*cli, "cat", "v1/stream/orders-copy"],
        capture_output=True,
        text=True,
        check=True,
        env=shell_env(),
    )
    assert cat.stdout.splitlines() == [json.dumps({"id": i}, separators=(",", ":")) for i in range(1, 6)]

    for _ in range(2):  # the batch job, twice: producerId makes the second run store nothing
        exec(substitute(batch.text, {DEFAULT_URL: server.url}), namespace)
    with Client(server.url) as client:
        big = [message.json() for message in client.stream("v1/stream/big-orders").read("-1")]
    assert sorted(big, key=lambda order: order["id"]) == [{"id": i} for i in range(2, 6)]


def test_delta_session_example(tmp_path: Path) -> None:
    """Here (no delta-spark, no Maven Central) the example must stop at once, naming the extra to install."""
    (block,) = blocks_for("test_delta_session_example")
    result = subprocess.run(
        [sys.executable, "-c", block.text],
        cwd=tmp_path,
        env=shell_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "DeltaExtraMissing" in result.stderr
    assert "pip install 'pyspark-durable-streams[delta]'" in result.stderr


# -- the Python client and the command line ------------------------------------------------------


def test_client_examples(server: ServerProcess, tmp_path: Path) -> None:
    """The client blocks continue each other: one script, against a live server named by DURABLE_STREAMS_URL."""
    script = "\n".join(block.text for block in blocks_for("test_client_examples"))
    for run in ("first", "again"):  # a reader who runs the examples twice gets the same output
        result = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=shell_env(DURABLE_STREAMS_URL=server.url),
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, f"README example failed ({run} run):\n{result.stderr}"
        out = result.stdout
        assert out.startswith("True\nFalse\n") and "live: {'id': 4}" in out and "409" in out
        ids = [int(line.split("'id': ")[1].rstrip("}")) for line in out.splitlines() if line.startswith("0")]
        assert ids == [1, 2, 3]  # one message, then two in one request
        assert "1000 " in out  # the producer's acknowledged messages
        assert "Gone" in out and "after the snapshot: {'op': 'set', 'v': 3}" in out and "b'{\"v\": 2}'" in out


def test_client_command_line(server: ServerProcess, tmp_path: Path) -> None:
    """The CLI walk-through in a directory holding the files it names (and jq, which it uses)."""
    (block,) = blocks_for("test_client_command_line")
    assert shutil.which("jq"), "jq is missing: the README's command-line example uses it"
    big_log = "".join(f"log line {i}: {'x' * 60}\n" for i in range(40_000)).encode()  # > 2 MiB: several chunks
    (tmp_path / "big.log").write_bytes(big_log)
    events = [{"event": i, "tags": ["a", "b"]} for i in range(5)]
    (tmp_path / "events.json").write_text(json.dumps(events, indent=2))  # a JSON array, pretty-printed

    result = run_bash(substitute(block.text, {DEFAULT_URL: server.url}), cwd=tmp_path)
    out = result.stdout.encode()
    assert big_log in out  # cat printed the log as stored
    compact = [json.dumps(event, separators=(",", ":")) for event in events]
    assert "\n".join(compact[3:] + compact) in result.stdout  # tail -n 2, then tail -f: one message per event
    assert re.search(r"^doc\tOpen\tapplication/json\t", result.stdout, flags=re.MULTILINE)  # ls --long
    assert "next-offset " in result.stderr and "snapshot-offset 0000000000000002_" in result.stderr
    assert json.loads((tmp_path / "state.json").read_text()) == {"v": 2}
    with Client(server.url) as client:
        assert client.stream("v1/stream/events").metadata().closed
        assert client.stream("my-bucket/doc").metadata().snapshot_offset is not None
        with pytest.raises(Exception, match="404"):
            client.stream("v1/stream/logs").metadata()  # removed by the last line
