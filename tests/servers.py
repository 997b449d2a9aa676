"""Real processes on loopback for the tests: our server, moto's S3 server and Azurite.

Everything here starts a genuine subprocess and talks to it over TCP; nothing is mocked.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

REPO_ROOT = Path(__file__).resolve().parent.parent


PORTS_FROM = 20000
"""``free_port``'s ports lie between here and the kernel's ephemeral range."""


def _port_slice() -> range:
    """This test process's own ports: an equal share, per pytest-xdist worker, of those between
    ``PORTS_FROM`` and the ephemeral range (where the kernel picks the port of every bind to
    port 0 and of every outgoing connection)."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0) % workers
    size = (ephemeral - PORTS_FROM) // workers
    return range(PORTS_FROM + worker * size, PORTS_FROM + (worker + 1) * size)


_ports: Iterator[int] | None = None


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now, and that no other test process is given.
    Not one the kernel picks (a bind to port 0): it handed a worker a port another worker had
    just been given, or one that a killed server had let go, which its restart then found
    taken. Each process takes its slice's ports in turn (``_port_slice``), from a random one."""
    global _ports
    if _ports is None:
        ports = _port_slice()
        first = random.randrange(len(ports))
        _ports = itertools.cycle([*ports[first:], *ports[:first]])
    for _ in range(1000):
        port = next(_ports)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # (in use, or a connection of its own still in TIME_WAIT)
                continue
            return port
    raise RuntimeError(f"no free port among 1,000 of {_port_slice()}")


def listener_on(port: int) -> socket.socket:
    """A socket listening on ``port`` of 127.0.0.1 (0: any free one): a port another process took."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


class PortTaken(RuntimeError):
    """The process could not listen on its port: another had taken it (``free_port`` only found
    it free a moment before, and a test on another worker may have been given it too)."""


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` itself listens on (its own sockets, in its network namespace);
    none once it is gone."""
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
        tables = [Path(f"/proc/{pid}/net/{name}").read_text() for name in ("tcp", "tcp6")]
    except OSError:  # (gone meanwhile)
        return set()
    sockets = set()
    for fd in descriptors:
        # (one fd closed between the listing and its readlink is skipped, not the process: a busy
        # server opens and closes files all the time, and its listening socket stays)
        with contextlib.suppress(OSError):
            sockets.add(os.readlink(fd))
    ports = set()
    for table in tables:
        for row in table.splitlines()[1:]:
            fields = row.split()  # (sl, local address:port in hex, remote, state, ..., inode at 9)
            if fields[3] == "0A" and f"socket:[{fields[9]}]" in sockets:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def listener_of(port: int, pids: Sequence[int]) -> int | None:
    """Which of ``pids`` listens on ``port`` (``None``: none of them; another process may)."""
    return next((pid for pid in pids if port in listening_ports(pid)), None)


def _children_by_parent() -> dict[int, list[int]]:
    """Every process's children, from one pass over ``/proc``."""
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            found.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    return found


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (a node's shard servers and its spare, a shell's server)."""
    return _children_by_parent().get(pid, [])


def _family(pid: int) -> list[int]:
    """``pid`` and every process descended from it."""
    by_parent = _children_by_parent()
    family, at = [pid], 0
    while at < len(family):
        family.extend(by_parent.get(family[at], []))
        at += 1
    return family


def _wait_until_listening(
    port: int, proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 30, host: str = "127.0.0.1"
) -> None:
    """Until ``proc`` itself listens on ``port``; ``PortTaken`` if it exited unable to."""

    def listening() -> bool:
        if proc.poll() is not None:
            log = log_path.read_text()[-4000:]
            taken = "address already in use" in log.rsplit("\n--- start ", 1)[-1].lower()
            raise (PortTaken if taken else RuntimeError)(f"process exited with {proc.returncode}; log:\n{log}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                # (the process itself or one it started, a shell running the server or a node's
                # router: another process that took the port would answer a connection as well)
                return listener_of(port, _family(proc.pid)) is not None
        except OSError:
            return False

    try:
        wait_for(listening, timeout_s)
    except AssertionError:
        proc.kill()
        proc.wait()
        raise RuntimeError(
            f"nothing listened on port {port} within {timeout_s}s; log:\n{log_path.read_text()[-4000:]}"
        ) from None


def _terminate(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, and SIGKILL if it has not exited 30 s later: never left running."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class ServerProcess:
    """``durable-streams-server`` running as a subprocess; killable and restartable."""

    data_dir: Path
    extra_args: Sequence[str] = ()
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables for the server process (e.g. DURABLE_STREAMS_AUTH_TOKENS)."""
    host: str = "127.0.0.1"
    """The address it serves (``--host``), reached from the test process."""
    command_prefix: Sequence[str] = ()
    """Run it through this (e.g. ``ip netns exec <namespace>``: tests/faults/netns.py)."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stream_url(self, name: str) -> str:
        return f"{self.url}/v1/stream/{name}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}-server-{self.port}.log"

    def start(self) -> ServerProcess:
        """Spawn it and wait until it listens. A first start whose port another process took
        meanwhile (``PortTaken``) starts again on another port; a restart keeps its port."""
        first = self.starts == 0
        for attempt in range(3):
            try:
                return self._spawn()
            except PortTaken:
                if not first or attempt == 2:
                    raise
                self.starts -= 1  # (it never served: a start on the new port is the first)
                self.port = free_port()
        raise AssertionError("unreachable")

    def _spawn(self) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            *self.command_prefix,
            sys.executable,
            "-m",
            "durable_streams_server",
            *(["--host", self.host] if self.host != "127.0.0.1" else []),
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            *self.extra_args,
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- start {self.starts} ---\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env={**os.environ, **self.env}
            )
        self.starts += 1
        _wait_until_listening(self.port, self.proc, self.log_path, host=self.host)
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no final flush."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        _terminate(self.proc)

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def refused_start(server: ServerProcess) -> str:
    """The log of ``server``'s start, which must be refused (exit code 3: a start the server
    refuses before it serves); killed if it started after all, so a failing test leaves none."""
    import pytest  # (here: the benchmarks import this module without pytest's)

    try:
        with pytest.raises(RuntimeError) as refused:
            server.start()
    finally:
        server.kill()
    assert server.proc is not None and server.proc.returncode == 3, server.log_text()[-4000:]
    return str(refused.value)


@dataclass
class MotoServer:
    """moto's S3-compatible server in server mode, on a loopback port."""

    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = Path("moto.log")
    host: str = "127.0.0.1"
    command_prefix: Sequence[str] = ()
    """Run it through this (e.g. ``ip netns exec <namespace>``: tests/faults/netns.py)."""

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, log_dir: Path) -> MotoServer:
        self.log_path = log_dir / f"moto-{self.port}.log"
        moto = Path(sys.executable).parent / "moto_server"
        if not moto.exists():
            raise RuntimeError("moto_server is missing: install the test extras (pip install -e '.[test]')")
        with open(self.log_path, "ab") as log:
            command = [*self.command_prefix, str(moto), "-H", self.host, "-p", str(self.port)]
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _wait_until_listening(self.port, self.proc, self.log_path, host=self.host)
        return self

    def stop(self) -> None:
        _terminate(self.proc)

    def storage_options(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def client(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def server_args(self, uri: str) -> list[str]:
        args = ["--storage-uri", uri]
        for key, value in self.storage_options().items():
            args += ["--storage-option", f"{key}={value}"]
        return args


AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's fixed development account and its published key."""


@dataclass
class AzuriteServer:
    """Azurite's Blob service (npm ``azurite``, installed in tests/emulators), on a loopback port."""

    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = Path("azurite.log")

    @property
    def endpoint(self) -> str:
        """The account's Blob endpoint, path-style (the account is the first path segment)."""
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    def start(self, log_dir: Path) -> AzuriteServer:
        self.log_path = log_dir / f"azurite-{self.port}.log"
        azurite = REPO_ROOT / "tests" / "emulators" / "node_modules" / ".bin" / "azurite-blob"
        if not azurite.exists():
            raise RuntimeError("azurite is missing: run make install-test (npm ci in tests/emulators)")
        command = [str(azurite), "--blobHost", "127.0.0.1", "--blobPort", str(self.port)]
        command += ["--inMemoryPersistence", "--disableTelemetry"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=log_dir)
        _wait_until_listening(self.port, self.proc, self.log_path)
        return self

    def stop(self) -> None:
        _terminate(self.proc)

    def storage_options(self) -> dict[str, str]:
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
            "AZURE_STORAGE_ENDPOINT": self.endpoint,
            "AZURE_ALLOW_HTTP": "true",
        }

    def create_container(self, name: str) -> None:
        """Create Container, authorized with the account key (Shared Key)."""
        date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
        version = "2021-08-06"
        to_sign = "PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{version}\n"
        to_sign += f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
        digest = hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest()
        headers = {
            "x-ms-date": date,
            "x-ms-version": version,
            "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(digest).decode()}",
        }
        response = session().put(f"{self.endpoint}/{name}", params={"restype": "container"}, headers=headers)
        assert response.status_code == 201, response.text

    def server_args(self, uri: str) -> list[str]:
        args = ["--storage-uri", uri]
        for key, value in self.storage_options().items():
            args += ["--storage-option", f"{key}={value}"]
        return args


def append_all(http: requests.Session, url: str, headers: dict[str, str], messages: list[bytes]) -> list[str]:
    """Append each message on its own; the tail after each."""
    tails = []
    for message in messages:
        response = http.post(url, headers=headers, data=message)
        assert response.status_code == 204, response.text
        tails.append(response.headers["Stream-Next-Offset"])
    return tails


def wait_for(
    predicate: Callable[[], object],
    timeout_s: float = 10.0,
    interval_s: float = 0.05,
    message: Callable[[], str] = str,
) -> None:
    """The suite's one wait: poll ``predicate()`` until it is truthy; after ``timeout_s``, an
    ``AssertionError`` saying so, with ``message()`` (what the state was) when given."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout_s}s {message()}".rstrip())
        time.sleep(interval_s)  # (the poll's interval: the one sleep of the suite's one wait)


def wal_segments(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "wal").glob("*.wal"))


def settled_wal_segments(data_dir: Path) -> list[Path]:
    """The WAL's segments once one is left. A server's first start writes a record of its own
    (the subscription signing keys); with a short flush interval its flush rotates the WAL
    moments later, and two segments exist for a few milliseconds."""
    wait_for(
        lambda: len(wal_segments(data_dir)) == 1,
        timeout_s=20,
        message=lambda: f"(segments: {[path.name for path in wal_segments(data_dir)]})",
    )
    return wal_segments(data_dir)


def wait_until_wal_flushed(data_dir: Path, before: list[Path]) -> None:
    """The flush into Delta rotates the WAL and deletes the segments it covered: one new,
    empty segment left means everything written so far is in Delta."""

    def flushed() -> bool:
        segments = wal_segments(data_dir)
        return len(segments) == 1 and segments != before and segments[0].stat().st_size == 0

    wait_for(flushed, timeout_s=20)


def session() -> requests.Session:
    http = requests.Session()
    http.trust_env = False
    return http


os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")


def read_all(http: requests.Session, url: str) -> bytes:
    """A catch-up read from the beginning to the tail, response after response."""
    body, offset = b"", "-1"
    while True:
        response = http.get(url, params={"offset": offset})
        assert response.status_code == 200, response.text
        body += response.content
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            return body


def numbered_stream(server: ServerProcess, stream: str, count: int) -> None:
    """A new JSON stream ``stream`` on ``server`` holding ``{"n": 0}`` to ``{"n": count - 1}``,
    each appended on its own (read back with ``numbers``)."""
    http, url, headers = session(), server.stream_url(stream), {"Content-Type": "application/json"}
    assert http.put(url, headers=headers, timeout=30).status_code == 201
    append_all(http, url, headers, [b'{"n": %d}' % n for n in range(count)])


def numbers(server: ServerProcess, stream: str) -> list[int]:
    """The ``n`` of every value of the JSON stream ``stream`` on ``server`` (``numbered_stream``)."""
    return [item["n"] for item in read_json(server.stream_url(stream))]


def read_json(url: str) -> list[Any]:
    """Every value of the JSON stream at ``url``, read from the beginning to the tail."""
    values: list[Any] = []
    offset = "-1"
    while True:
        answer = requests.get(url, params={"offset": offset}, timeout=30)
        assert answer.status_code == 200, answer.text
        values += answer.json()
        offset = answer.headers["Stream-Next-Offset"]
        if answer.headers.get("Stream-Up-To-Date") == "true":
            return values


def metric_sum(url: str, sample: str) -> float:
    """The sum of the samples on ``/metrics`` of the server at ``url`` (any URL of it) whose line
    starts with ``sample``: a name with its labels (``durable_streams_live_readers{mode="sse"}``),
    a labelled name's every sample (``durable_streams_live_readers{``), or an unlabelled one."""
    parts = urlsplit(url)
    text = session().get(f"{parts.scheme}://{parts.netloc}/metrics", timeout=10).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(sample)]
    assert values, f"no {sample} on /metrics:\n{text}"
    return sum(values)


def live_readers(url: str, mode: str = "") -> int:
    """The live readers of the server at ``url`` (any URL of it), from its gauge on ``/metrics``:
    long-polls waiting (``mode="long_poll"``: each from the moment it parked until its answer is
    done), SSE responses open (``"sse"``), or both (``""``)."""
    return int(metric_sum(url, "durable_streams_live_readers{" + (f'mode="{mode}"}}' if mode else "")))


def once_a_long_poll_waits(url: str, action: Callable[[], object]) -> threading.Thread:
    """A started thread (join it) that runs ``action`` once a long-poll waits at the server at
    ``url`` (any URL of it): an append that must wake a reader, not come before its request."""

    def run() -> None:
        wait_for(lambda: live_readers(url, "long_poll") >= 1, message=lambda: "(no long-poll waited)")
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def flushed(server: ServerProcess) -> Callable[[], bool]:
    """For ``wait_for``: nothing waits to be committed to Delta."""

    def check() -> bool:
        metrics = requests.get(f"{server.url}/metrics", timeout=5).text
        return "durable_streams_unflushed_bytes 0.0" in metrics

    return check
