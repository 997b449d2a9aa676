"""Shard servers: one child process per shard a node holds, each a complete single server.

A shard is served by ``durable-streams-server`` itself, run on the shard's storage location
(``shards.Layout.shard_uri``) with its own data directory (``<data-dir>/shards/<kkkk>``:
its WAL), port and advertised URL. A node thus uses one core per shard it serves, and a
shard's server is exactly the single server the conformance suite checks, with two extra
settings: ``cluster_shard`` (``k/N``) makes it send a request for another shard's stream back
to the node's router (307) instead of serving it, and ``cluster_parent`` makes it die with the
node (the kernel kills it when the node's supervisor thread ends: ``cluster.shard.parent``), so
a node killed with ``kill -9`` leaves no shard server acknowledging behind it.

A shard server gets its settings as data, not as a command line: the node's own ``Settings``
with the shard's parts replaced (``ShardServerSpec.settings``), written as JSON to the
process's stdin (``settings_json``). The process (``durable-streams-server shard-server``)
imports everything, then waits for them (``spawn_shard_server``, ``send_settings``): one may be
started before its shard is known. Its command line names nothing, so no option table is kept
in step with the parser, and no secret is in an argv or a file.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast, get_args
from urllib.parse import urlsplit, urlunsplit

import httpx

from ...http.routes import READY_PID_HEADER
from ...settings import Settings
from ...settings_json import settings_to_json
from ...storage.durability import Durability
from ...storage.ownership import TakeOver
from .leases import LeaseRecord

log = logging.getLogger("durable_streams_server.cluster")

TAKE_OVER_TIMEOUT_S = 2.0
"""How long a shard server taking a *free* lease's location waits for an owner that never let go
(a server stopped before its own claim or release finished) to hand over before claiming it. A
location under an *expired* lease is claimed at once (``Supervisor._acquire``): its holder's
servers were killed when the lease's validity ended, so none is left to answer."""

CLEAN_EXITS = (0, -signal.SIGTERM)
"""A shard server's exit codes after its shutdown ran to its end (uvicorn raises the SIGTERM
it handled again once shut down); a drain is only asked of a ready server, whose handler is set."""

START_ATTEMPTS = 3
"""How many times a node starts a shard's server that exits before it is ready, while it holds
the lease, before it releases the lease for another node to try. A failed start is most often
passing (a store request that failed during the take-over, the watchdog's kill on a lease whose
late renewal then landed, a spare that died): released at once, the shard moved to a node that
held its share, the move the balance rule never makes. A node that cannot start it (a broken
data dir) still lets go, a few starts later."""


@dataclass(frozen=True)
class TakeOverPlan:
    """How a shard server takes its location over from whoever held the lease before."""

    mode: str
    """"ask" even for a free lease: its location may still name an owner that never let go (a
    server stopped before its own claim or release finished: a drain's timeout, a start that
    failed). Asking costs nothing when the location is free or this node's; past the timeout
    a delta-durability owner's location is claimed and a WAL owner's refused (its records are
    on its disk). "force" only for a WAL holder's expired lease, which ``leases.may_take``
    allows only for the leases expired at this node's start, with ``--take-over force``."""
    owner_wait_s: float
    """An expired lease's holder had its servers killed when the lease's validity ended (and
    the claim's epoch fences any still running): nobody is left to hand over, so no wait."""
    taken_from: str | None
    """The holder of the expired lease taken (this node's own id when it takes back a lease it
    lost: its renewals did not reach the store in time); ``None``: the lease was free."""

    @classmethod
    def of(cls, previous: LeaseRecord | None, node_id: str) -> TakeOverPlan:
        if previous is None or previous.free:
            return cls("ask", TAKE_OVER_TIMEOUT_S, None)
        if previous.holder == node_id:  # (its own servers were killed when the validity ended)
            return cls("ask", TAKE_OVER_TIMEOUT_S, node_id)
        return cls("force" if previous.durability == Durability.WAL else "ask", 0.0, previous.holder)


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
    take_over: str = "no"
    take_over_timeout_s: float = TAKE_OVER_TIMEOUT_S
    attempt: int = 1
    """Which start of this shard's server this is, counting the ones that failed before it was ready."""

    @property
    def exited(self) -> bool:
        return self.proc.poll() is not None

    def ready(self, client: httpx.Client) -> bool:
        """Listening, its storage recovered and the location claimed: its ``/readyz`` says 200,
        from its own process. Another process may listen on the port this node chose for it (the
        port was free when chosen; this server then fails to bind it and exits): that one's 200
        published this shard at a stranger's URL, where its clients' requests were answered."""
        if self.exited:
            return False
        try:
            answer = client.get(f"{self.url}/readyz", timeout=0.5)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200 and answer.headers.get(READY_PID_HEADER) == str(self.proc.pid)

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

    def may_let_go(self, durability: Durability) -> bool:
        """Whether its shard's lease may be released now that it stopped and is gone: not if it
        acknowledged from this node's WAL and did not exit cleanly (it may not have flushed, and
        its location still names it: a node taking the free lease would time out and refuse)."""
        if durability != Durability.WAL or self.proc.returncode in CLEAN_EXITS:
            return True
        code = self.proc.returncode
        log.error("WAL shard server did not exit cleanly: its lease is kept", extra={"shard": self.shard, "code": code})
        return False


class SpareServer:
    """One shard-server process started ahead of need, its imports done, waiting for its
    settings: a shard this node takes (a failover, a move) starts serving without paying for a
    process start first (measured: 0.9 s from spawn to waiting on an idle machine, 2-3 s while
    the machine is busy, as it is when a node has just died and the others take its shards).
    It costs one idle process (154 MiB of RSS measured here). Started and taken on the supervisor's
    thread (``PR_SET_PDEATHSIG`` follows the thread that started the process); a node that dies
    closes its pipe, and the spare, reading no settings, exits."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def take(self) -> tuple[subprocess.Popen[bytes], bool]:
        """The waiting spare (and ``True``), or a new process when there is none (``False``)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            return proc, True
        return spawn_shard_server(), False

    def refill(self) -> None:
        """Start a spare if none waits (call it when no shard server is starting: it competes for CPU)."""
        if self._proc is None or self._proc.poll() is not None:
            self._proc = spawn_shard_server()

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


@dataclass(frozen=True)
class ShardServerSpec:
    """What every shard server of one node shares."""

    host: str
    advertise_url: str
    data_dir: Path
    node_id: str
    shards: int
    base: Settings
    """The node's own settings: its shard servers run with them, their shard's parts replaced."""
    secret: str = ""
    """The cluster's internal credential, given to shard servers with their settings."""
    adopted_root: bool = False
    """The one shard is a single server's location (``shards.Layout``, placement ``root``): its
    server uses the node's data dir itself, where that server's WAL and node id are."""
    spare: SpareServer = field(default_factory=SpareServer, compare=False)

    def shard_data_dir(self, shard: int) -> Path:
        return self.data_dir if self.adopted_root else self.data_dir / "shards" / f"{shard:04d}"

    def settings(
        self, shard: int, storage_uri: str, port: int, *, take_over: str, take_over_timeout_s: float
    ) -> Settings:
        """``shard``'s server's settings: the node's, with the shard's location, data dir, port,
        URL and take-over, and the cluster's parts (shard, router, credential, parent) set."""
        if take_over not in get_args(TakeOver):
            raise ValueError(f"take_over must be one of {', '.join(get_args(TakeOver))}, got {take_over!r}")
        server = replace(
            self.base.server,
            data_dir=self.shard_data_dir(shard),
            storage_uri=storage_uri,
            node_id=self.node_id,
            advertise_url=url_with_port(self.advertise_url, port),
            take_over=cast(TakeOver, take_over),
            take_over_timeout_s=take_over_timeout_s,
            cluster_shard=f"{shard}/{self.shards}",
            cluster_router=self.advertise_url,
            cluster_secret=self.secret,
        )
        listen = replace(self.base.listen, host=self.host, port=port)
        return replace(self.base, server=server, listen=listen, cluster=None, cluster_parent=os.getpid())

    def start(
        self, shard: int, storage_uri: str, *, take_over: str, take_over_timeout_s: float = TAKE_OVER_TIMEOUT_S
    ) -> ShardServer:
        """Start ``shard``'s server (call it from the node's supervisor thread: the server dies
        with the thread that started it)."""
        port = free_port(self.host)
        settings = self.settings(shard, storage_uri, port, take_over=take_over, take_over_timeout_s=take_over_timeout_s)
        proc, spare = self.spare.take()
        send_settings(proc, settings)
        url = settings.server.advertise_url or ""
        log.info(
            "shard server starting",
            extra={"shard": shard, "url": url, "pid": proc.pid, "take_over": take_over, "spare": spare},
        )
        return ShardServer(shard, url, proc, take_over=take_over, take_over_timeout_s=take_over_timeout_s)

    def start_again(self, failed: ShardServer, storage_uri: str) -> ShardServer:
        """``failed``'s shard started again as it was (its take-over too: the location may
        not be this node's yet), counted as its next attempt (``START_ATTEMPTS``)."""
        take_over, timeout_s = failed.take_over, failed.take_over_timeout_s
        server = self.start(failed.shard, storage_uri, take_over=take_over, take_over_timeout_s=timeout_s)
        server.attempt = failed.attempt + 1
        return server


SHARD_SERVER_COMMAND = (sys.executable, "-m", "durable_streams_server", "shard-server")
"""A shard server's whole command line: its settings come on stdin."""


def spawn_shard_server() -> subprocess.Popen[bytes]:
    """A shard server process that imports everything, then waits for ``send_settings``."""
    return subprocess.Popen(SHARD_SERVER_COMMAND, stdin=subprocess.PIPE)


def send_settings(proc: subprocess.Popen[bytes], settings: Settings) -> None:
    """Hand ``proc`` (``spawn_shard_server``'s) its settings: it starts serving with them."""
    if proc.stdin is None:
        raise ValueError("the process was not started with a pipe for its settings")
    try:
        proc.stdin.write(settings_to_json(settings))
        proc.stdin.close()
    except BrokenPipeError:  # (it exited before reading them: its supervisor sees it exited)
        pass
