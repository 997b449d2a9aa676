"""Starting a cluster node from the command line (``durable-streams-server --cluster``).

The node reads (or, first on a new root, creates) the root's cluster record
(``shards.Layout``), then serves its router (``router``) with uvicorn; the router's
lifespan runs the supervisor (``supervisor``), which starts a shard server per held shard. A node
whose id another live process runs with refuses to start (``membership``).

A root that already holds a single server's location (its table, ``streams/_delta_log``,
and no cluster record) is adopted as a cluster of one shard, the root itself: its table,
WAL (under the same node id and data dir) and streams open as they are.
"""

from __future__ import annotations

import logging
from ipaddress import ip_address

from ...serve import check_listening, run_uvicorn
from ...settings import Listen, Settings
from ...storage.delta_log import TABLE_NAME
from ...storage.ownership import node_id_for
from .membership import IdInUse, wait_until_id_free
from .node_settings import NodeSettings
from .objects import ConditionalObjects, ObjectStoreError, open_objects
from .proxy import relay_idle_s, relay_read_timeout_s
from .router import ClusterRouter
from .secret import SecretFileError, cluster_secret
from .shards import LAYOUT_KEY, Layout, LayoutError
from .supervisor import Supervisor
from .workers import ShardServerSpec

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


def advertise_url(given: str | None, listen: Listen) -> str:
    if given:
        return given.rstrip("/")
    host = listen.host
    try:
        unspecified = ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        unspecified = False
    if unspecified:
        raise SystemExit(f"--cluster with --host {host} needs --advertise-url: the URL other nodes and clients reach")
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if listen.tls_certfile else 'http'}://{host}:{listen.port}"


def run_node(settings: Settings) -> None:
    """Serve as a cluster node with ``settings`` (``settings.cluster`` set) until stopped; its
    shard servers run with the same settings, their shard's own parts replaced (``workers``)."""
    config, listen, options = settings.server, settings.listen, settings.cluster
    if options is None:
        raise ValueError("run_node needs a cluster node's settings (--cluster)")
    check_listening(settings)  # (as each shard server will: refused here once, not by every one)
    if not config.storage_uri:
        raise SystemExit("--cluster needs --storage-uri: the storage root every node of the cluster shares")
    try:
        objects = open_objects(config.storage_uri, config.storage_options)
        layout = open_layout(objects, options.shards)
        secret = cluster_secret(objects, options.cluster_secret_file)
    except SecretFileError as exc:
        raise SystemExit(str(exc)) from None
    except (ValueError, LayoutError) as exc:
        raise SystemExit(f"--storage-uri {config.storage_uri}: {exc}") from None
    url = advertise_url(config.advertise_url, listen)
    node_id = node_id_for(config.data_dir, config.node_id)
    try:
        wait_until_id_free(objects, node_id, options.lease_ttl_s)
    except (IdInUse, ObjectStoreError) as exc:
        raise SystemExit(f"--node-id {node_id}: {exc}") from None
    node_settings = NodeSettings(
        node_id=node_id,
        advertise_url=url,
        storage_uri=config.storage_uri,
        durability=config.durability,
        lease_ttl_s=options.lease_ttl_s,
        adopt_wal=config.take_over == "force",
    )
    spec = ShardServerSpec(
        host=listen.host,
        advertise_url=url,
        data_dir=config.data_dir,
        node_id=node_id,
        shards=layout.shards,
        base=settings,
        adopted_root=layout.placement == "root",
        secret=secret,
    )
    log.info("cluster node starting", extra={"node_id": node_id, "url": url, "shards": layout.shards})
    read_timeout_s = relay_read_timeout_s(config.long_poll_timeout_ms, config.sse_reconnect_ms)
    idle_s = relay_idle_s(listen.keep_alive_timeout_s)
    supervisor = Supervisor(node_settings, layout, objects, spec)
    router = ClusterRouter(supervisor, relay_read_timeout_s=read_timeout_s, relay_idle_s=idle_s)
    run_uvicorn(router, listen)
