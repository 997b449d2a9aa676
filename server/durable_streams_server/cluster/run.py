"""Starting a cluster node from the command line (``durable-streams-server --cluster``).

The node reads (or, first on a new root, creates) the root's cluster record
(``shards.Layout``), then serves its router (``router``) with uvicorn; the router's
lifespan runs the supervisor (``node``), which starts a shard server per held shard. A node
whose id another live process runs with refuses to start (``membership``).

A root that already holds a single server's location (its table, ``streams/_delta_log``,
and no cluster record) is adopted as a cluster of one shard, the root itself: its table,
WAL (under the same node id and data dir) and streams open as they are.
"""

from __future__ import annotations

import argparse
import logging
from ipaddress import ip_address
from pathlib import Path

import uvicorn

from ..config import ServerConfig
from ..storage.delta_log import TABLE_NAME
from ..storage.ownership import node_id_for
from .membership import IdInUse, wait_until_id_free
from .node import NodeSettings, Supervisor
from .objects import ConditionalObjects, ObjectStoreError, open_objects
from .proxy import relay_read_timeout_s
from .router import ClusterRouter
from .secret import SecretFileError, cluster_secret
from .shards import LAYOUT_KEY, Layout, LayoutError
from .workers import ShardServerSpec, passthrough_args

log = logging.getLogger("durable_streams_server.cluster")
SINGLE_SERVER_MARKER = f"{TABLE_NAME}/_delta_log/"


def open_layout(objects: ConditionalObjects, shards: int) -> Layout:
    """The root's cluster record, created with ``shards`` if there is none (``Layout``)."""
    found = objects.get(LAYOUT_KEY)
    if found is None:
        adopted = bool(objects.list_keys(SINGLE_SERVER_MARKER))
        if adopted and shards != 1:
            log.info("adopting a single server's storage location as a cluster of one shard")
        layout = Layout(1, "root") if adopted else Layout(shards)
        if objects.create(LAYOUT_KEY, layout.to_bytes()) is None:
            found = objects.get(LAYOUT_KEY)  # another node created it first
        else:
            return layout
    if found is None:
        raise LayoutError(f"{LAYOUT_KEY} vanished while it was being read")
    return Layout.from_bytes(found.body)


def advertise_url(args: argparse.Namespace) -> str:
    if args.advertise_url:
        return str(args.advertise_url).rstrip("/")
    host = str(args.host)
    try:
        unspecified = ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        unspecified = False
    if unspecified:
        raise SystemExit(f"--cluster with --host {host} needs --advertise-url: the URL other nodes and clients reach")
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if args.tls_certfile else 'http'}://{host}:{args.port}"


def run_node(args: argparse.Namespace, argv: list[str], config: ServerConfig) -> None:
    if not config.storage_uri:
        raise SystemExit("--cluster needs --storage-uri: the storage root every node of the cluster shares")
    try:
        objects = open_objects(config.storage_uri, config.storage_options)
        layout = open_layout(objects, args.shards)
        secret_file = Path(args.cluster_secret_file) if args.cluster_secret_file else None
        secret = cluster_secret(objects, secret_file)
    except SecretFileError as exc:
        raise SystemExit(str(exc)) from None
    except (ValueError, LayoutError) as exc:
        raise SystemExit(f"--storage-uri {config.storage_uri}: {exc}") from None
    url = advertise_url(args)
    node_id = node_id_for(config.data_dir, config.node_id)
    try:
        wait_until_id_free(objects, node_id, args.lease_ttl_s)
    except (IdInUse, ObjectStoreError) as exc:
        raise SystemExit(f"--node-id {node_id}: {exc}") from None
    settings = NodeSettings(
        node_id=node_id,
        advertise_url=url,
        storage_uri=config.storage_uri,
        durability=config.durability,
        lease_ttl_s=args.lease_ttl_s,
        adopt_wal=config.take_over == "force",
    )
    spec = ShardServerSpec(
        host=args.host,
        advertise_url=url,
        data_dir=config.data_dir,
        node_id=node_id,
        shards=layout.shards,
        passthrough=tuple(passthrough_args(argv)),
        adopted_root=layout.placement == "root",
        secret=secret,
    )
    log.info("cluster node starting", extra={"node_id": node_id, "url": url, "shards": layout.shards})
    read_timeout_s = relay_read_timeout_s(config.long_poll_timeout_ms, config.sse_reconnect_ms)
    router = ClusterRouter(Supervisor(settings, layout, objects, spec), relay_read_timeout_s=read_timeout_s)
    uvicorn.run(
        router,
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=args.access_log,
        timeout_graceful_shutdown=5,
        ssl_certfile=args.tls_certfile,
        ssl_keyfile=args.tls_keyfile,
    )
