"""One server assembled from a ``ServerConfig``: storage, engine, the app, and its connection protocol.

``build_app(config)`` maps the configuration onto the layers: the HTTP limits and the token
grants go to the app (``http/app.py``), the rest to ``open_storage``, which the app's starter
calls when it starts (on its lifespan startup, or on its first request when mounted): it builds
the storage and the engine and recovers their state, Delta + WAL replayed into the engine; the
starter then assembles the handlers over them (``http/started.py``). On a cluster's shard server
it plugs in what makes it one (``cluster.shard.serving``: the app's admission, its internal
routes, the subscriptions' view of the other shards), where the layers leave a port for it.
Nothing touches the disk before that, so building an app is cheap and an embedder can create
it at import time; ``create_app(config)`` is its ASGI app.

Served by uvicorn, the app gets its connection protocol from ``http_protocol``: the guards of
request heads, and the fast path (``http/fastpath/``), which serves the app's stream requests
from the connection's parser callbacks. This is the one place that plugs the fast path in.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable

from starlette.types import ASGIApp

from .cluster.shard.serving import ShardServing
from .config import ServerConfig
from .engine.engine import Engine, EngineConfig
from .engine.memory_writes import write_share
from .engine.subscriptions import SubscriptionManager
from .engine.wakes import SubscriptionSettings
from .http.app import DurableStreamsApp
from .http.fastpath import HttpParser, connection_protocol
from .http.limits import HttpLimits, LiveReaders
from .http.started import Started, assemble
from .protocol.retention import RetentionPolicy
from .protocol.webhook_rules import parse_networks
from .storage import start_refusal
from .storage.committer import Storage, StorageConfig
from .storage.compaction import CompactionConfig
from .storage.data_dir_lock import DataDirLock
from .storage.observer import StorageObserver
from .storage.ownership import Node, OwnershipError, node_id_for, wal_id_for

log = logging.getLogger("durable_streams_server.http")  # the "ready" event keeps its logger from before


def open_storage(config: ServerConfig, observer: StorageObserver) -> tuple[Storage, Engine]:
    """Storage and engine for ``config``, their state recovered (the storage not yet started),
    the data directory locked first (``storage/data_dir_lock.py``) and until the storage closes."""
    try:
        lock = DataDirLock.acquire(config.data_dir)
    except OwnershipError as error:
        _refused(config, error)
        raise
    try:
        storage, engine = _recovered(config, observer)
    except BaseException as error:
        lock.release()
        if isinstance(error, OwnershipError):  # (the start's one line, above the server's traceback)
            _refused(config, error)
        raise
    if config.cluster_shard is not None:
        start_refusal.clear(config.data_dir)
    storage.hold_until_closed(lock)
    return storage, engine


def _refused(config: ServerConfig, error: OwnershipError) -> None:
    log.critical("start refused", extra={"reason": str(error)})
    if config.cluster_shard is not None:  # (for the node that started it: ``storage/start_refusal.py``)
        start_refusal.note(config.data_dir, str(error))


def _recovered(config: ServerConfig, observer: StorageObserver) -> tuple[Storage, Engine]:
    storage = Storage(
        StorageConfig(
            data_dir=config.data_dir,
            storage_uri=config.resolved_storage_uri,
            storage_options=config.storage_options,
            durability=config.durability,
            flush_interval_s=config.flush_interval_ms / 1000,
            max_wal_bytes=config.max_wal_bytes,
            compaction=CompactionConfig(
                interval_s=config.compaction_interval_s,
                target_file_bytes=config.compaction_target_file_bytes,
                vacuum_retention_hours=config.vacuum_retention_hours,
                log_retention_hours=config.log_retention_hours,
                memory_bytes=config.memory_budget // 8 if config.memory_budget else 64 * 1024 * 1024,
                spill_dir=config.data_dir / "compaction",
            ),
            read_plan_ttl_s=config.read_plan_ttl_s,
            node=Node(
                node_id_for(config.data_dir, config.node_id),
                url=config.advertise_url or "",
                data_dir=str(config.data_dir.resolve()),
                durability=config.durability,
                wal_id=wal_id_for(config.data_dir),
                take_over=config.take_over,
                take_over_timeout_s=config.take_over_timeout_s,
            ),
            history_parked_bytes=config.memory_budget // 8 if config.memory_budget else 64 * 1024 * 1024,
        ),
        observer=observer,
    )
    engine_config = EngineConfig(
        tail_cache_bytes=config.tail_cache_bytes,
        history_cache_bytes=config.history_cache_bytes,
        memory_budget_bytes=config.memory_budget - config.memory_budget // 8,
        rss_budget_bytes=config.memory_budget if config.memory_guard == "on" else 0,
        max_streams_per_bucket=config.max_streams_per_bucket,
        idle_stream_ms=config.idle_stream_s * 1000,
        tombstone_retention_ms=config.tombstone_retention_s * 1000,
        default_retention=RetentionPolicy(
            max_age_s=config.retention_max_age_s or None,
            max_bytes=config.retention_max_bytes or None,
            max_messages=config.retention_max_messages or None,
        ),
    )
    engine = Engine(storage, engine_config)
    if config.cluster_shard is not None:
        storage.on_fenced.append(_stop_when_fenced)
    engine.load(storage.recover())
    log.info(
        "ready",
        extra={
            "storage_uri": config.resolved_storage_uri,
            "durability": config.durability,
            "node_id": storage.node.node_id,
            "owner_epoch": storage.owner.epoch if storage.owner else 0,
            "streams": len(engine.streams),
        },
    )
    return storage, engine


def _stop_when_fenced(error: OwnershipError) -> None:
    """A cluster's shard server that is no longer its shard's owner (handed over, or a newer
    owner claimed the location while this server ran on, its node paused) stops at once rather
    than answer ``NOT_OWNER`` and stale reads to the clients that hold its URL: they meet a
    refused connection, which every client of a cluster takes for "the shard is moving", and go
    back to a node, which sends them to the shard's new server. Its node, if alive, sees it exit."""
    log.error("no longer the shard's owner: this shard server stops", extra={"reason": str(error)})
    os.kill(os.getpid(), signal.SIGTERM)  # (uvicorn's graceful shutdown: the storage closes, nothing to flush)


def open_server(config: ServerConfig, observer: StorageObserver) -> tuple[Storage, Engine, SubscriptionManager]:
    """``open_storage``, and the subscription manager over its engine (started by the app)."""
    storage, engine = open_storage(config, observer)
    settings = SubscriptionSettings(
        allowed_networks=parse_networks(config.allow_private_webhook_urls),
        retry_initial_s=config.webhook_retry_initial_ms / 1000,
        retry_max_s=config.webhook_retry_max_ms / 1000,
        delivery_timeout_s=config.webhook_timeout_ms / 1000,
    )
    return storage, engine, SubscriptionManager(engine, settings)


def http_limits(config: ServerConfig) -> HttpLimits:
    return HttpLimits(
        max_body_bytes=config.max_body_bytes,
        max_read_bytes=config.max_read_bytes,
        long_poll_timeout_s=config.long_poll_timeout_ms / 1000,
        sse_reconnect_s=config.sse_reconnect_ms / 1000,
        request_timeout_s=config.request_timeout_s,
        max_header_bytes=config.max_header_bytes,
        max_live_readers=config.max_live_readers,
        rate_limit_rps=config.rate_limit_rps,
        rate_limit_burst=config.rate_limit_burst,
        write_bytes=write_share(config.memory_budget),
    )


def build_app(config: ServerConfig | None = None, on_started: Callable[[], object] | None = None) -> DurableStreamsApp:
    """The app serving the Durable Streams protocol with the given configuration (its ``asgi``
    attribute is the ASGI app); ``on_started`` is called once it has started (its storage
    recovered and running)."""
    config = config or ServerConfig()
    limits = http_limits(config)
    live_readers = LiveReaders(limits.max_live_readers)
    shard = ShardServing.of(config)

    def starter(observer: StorageObserver) -> Started:
        opened = open_server(config, observer)
        if shard is None:
            return assemble(opened, limits, live_readers)
        # (a shard server's: the base surface's subscriptions live in one shard and see every
        # shard's streams, ``cluster.shard.remote_streams``; and the internal routes)
        return assemble(opened, limits, live_readers, shard.plug(opened[1], opened[2], live_readers))

    admission = shard.guard if shard is not None else None
    return DurableStreamsApp(starter, limits, live_readers, config.auth, on_started, admission)


def create_app(config: ServerConfig | None = None, on_started: Callable[[], object] | None = None) -> ASGIApp:
    """An ASGI app serving the Durable Streams protocol with the given configuration;
    ``on_started`` is called once it has started (its storage recovered and running)."""
    return build_app(config, on_started).asgi


def http_protocol(
    app: DurableStreamsApp, config: ServerConfig, parser: HttpParser = "httptools"
) -> type[asyncio.Protocol]:
    """The connection protocol class to give uvicorn (``http=``) for ``app.asgi``: the guards of
    request heads (``--request-timeout-s``, ``--max-header-bytes``), and with ``config.fast_path``
    on the fast path serving the app's stream requests (``http/fastpath/``; httptools only).
    With h11, also pass ``max_header_bytes`` as uvicorn's ``h11_max_incomplete_event_size``."""
    serve = app if config.fast_path == "on" else None
    # (stopping: live readers answered at once, not held for uvicorn's graceful timeout and cut)
    ending = (app.live_readers.end,)
    return connection_protocol(parser, config.request_timeout_s, config.max_header_bytes, serve, ending)
