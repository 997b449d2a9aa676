"""Shard servers: one child process per shard a node holds, each a complete single server.

A shard is served by ``durable-streams-server`` itself, run on the shard's storage location
(``shards.Layout.shard_uri``) with its own data directory (``<data-dir>/shards/<kkkk>``:
its WAL), port and advertised URL. A node thus uses one core per shard it serves, and a
shard's server is exactly the single server the conformance suite checks, with two extra
options: ``--cluster-shard k/N`` makes it send a request for another shard's stream back to
the node's router (307) instead of serving it, and makes it die with the node (the kernel
kills it when the node's supervisor thread ends: ``prctl(PR_SET_PDEATHSIG)``), so a node
killed with ``kill -9`` leaves no shard server acknowledging behind it.

The node's own options pass through to its shard servers, except those the node sets per
shard (``NODE_OPTIONS``).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from ..http.cluster_secret import CLUSTER_SECRET_ENV

log = logging.getLogger("durable_streams_server.cluster")

NODE_OPTIONS = {
    "--port": 1,
    "--data-dir": 1,
    "--storage-uri": 1,
    "--node-id": 1,
    "--advertise-url": 1,
    "--take-over-timeout-s": 1,
    "--shards": 1,
    "--lease-ttl-s": 1,
    "--cluster-secret-file": 1,
    "--cluster": 0,
}
"""Options of a node that its shard servers get per shard instead (name: values taken)."""
_TAKE_OVER_VALUES = ("no", "ask", "force")
TAKE_OVER_TIMEOUT_S = 2.0
"""How long a shard server taking a *free* lease's location waits for an owner that never let go
(a server stopped before its own claim or release finished) to hand over before claiming it. A
location under an *expired* lease is claimed at once (``Supervisor._acquire``): its holder's
servers were killed when the lease's validity ended, so none is left to answer."""


def passthrough_args(argv: Sequence[str]) -> list[str]:
    """``argv`` without the options in ``NODE_OPTIONS`` and ``--take-over`` (its value optional)."""
    kept: list[str] = []
    items = list(argv)
    index = 0
    while index < len(items):
        item = items[index]
        name = item.split("=", 1)[0]
        index += 1
        if name == "--take-over":
            if "=" not in item and index < len(items) and items[index] in _TAKE_OVER_VALUES:
                index += 1
            continue
        if name in NODE_OPTIONS:
            if "=" not in item:
                index += NODE_OPTIONS[name]
            continue
        kept.append(item)
    return kept


def child_env() -> dict[str, str]:
    """The node's environment without the variables of ``NODE_OPTIONS`` (``DURABLE_STREAMS_*``)."""
    dropped = {"DURABLE_STREAMS_" + name[2:].replace("-", "_").upper() for name in (*NODE_OPTIONS, "--take-over")}
    return {key: value for key, value in os.environ.items() if key not in dropped}


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def url_with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return urlunsplit((parts.scheme or "http", f"{host}:{port}", "", "", ""))


@dataclass
class ShardServer:
    """One shard's server process, from its start to its exit."""

    shard: int
    url: str
    proc: subprocess.Popen[bytes]
    stopping_since: float | None = None

    @property
    def exited(self) -> bool:
        return self.proc.poll() is not None

    def ready(self, client: httpx.Client) -> bool:
        """Listening, its storage recovered and the location claimed (its ``/readyz`` says 200)."""
        if self.exited:
            return False
        try:
            return client.get(f"{self.url}/readyz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        """Ask it to stop: it flushes what it acknowledged and releases its location."""
        if self.stopping_since is None and not self.exited:
            self.stopping_since = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """Stop it now (a lost lease): nothing more is acknowledged by it."""
        if not self.exited:
            self.proc.kill()
        self.proc.wait()


@dataclass(frozen=True)
class ShardServerSpec:
    """What every shard server of one node shares."""

    host: str
    advertise_url: str
    data_dir: Path
    node_id: str
    shards: int
    passthrough: tuple[str, ...]
    secret: str = ""
    """The cluster's internal credential, given to shard servers in their environment."""
    adopted_root: bool = False
    """The one shard is a single server's location (``shards.Layout``, placement ``root``): its
    server uses the node's data dir itself, where that server's WAL and node id are."""

    def shard_data_dir(self, shard: int) -> Path:
        return self.data_dir if self.adopted_root else self.data_dir / "shards" / f"{shard:04d}"

    def start(
        self, shard: int, storage_uri: str, *, take_over: str, take_over_timeout_s: float = TAKE_OVER_TIMEOUT_S
    ) -> ShardServer:
        """Start ``shard``'s server (call it from the node's supervisor thread: the server dies
        with the thread that started it)."""
        port = free_port(self.host)
        url = url_with_port(self.advertise_url, port)
        data_dir = self.shard_data_dir(shard)
        args = [
            *self.passthrough,
            "--host",
            self.host,
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--storage-uri",
            storage_uri,
            "--node-id",
            self.node_id,
            "--advertise-url",
            url,
            "--take-over",
            take_over,
            "--take-over-timeout-s",
            str(take_over_timeout_s),
            "--cluster-shard",
            f"{shard}/{self.shards}",
            "--cluster-router",
            self.advertise_url,
            "--cluster-parent",
            str(os.getpid()),
        ]
        env = {**child_env(), CLUSTER_SECRET_ENV: self.secret}
        proc = subprocess.Popen([sys.executable, "-m", "durable_streams_server", *args], env=env)
        log.info("shard server starting", extra={"shard": shard, "url": url, "pid": proc.pid, "take_over": take_over})
        return ShardServer(shard, url, proc)


def die_with_parent(parent_pid: int) -> None:
    """In a shard server: be killed by the kernel when the node that started it ends; exit now
    if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)
