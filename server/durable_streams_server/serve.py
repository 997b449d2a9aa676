"""Serving a process's ``Settings``: the checks before listening, and the one place uvicorn starts.

A single server, a cluster's shard server (its settings handed over by its node) and a cluster
node's router all listen through ``run_uvicorn``, so a listening setting (TLS, keep-alive, the
connection limit, the event loop, trusted proxies, the access log) means the same for each.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl

import uvicorn
from starlette.types import ASGIApp

from .allocators import tune_allocators
from .cluster.shard.parent import die_with_parent
from .collector import freeze_start_up_objects
from .config import ServerConfig
from .server import build_app, http_protocol
from .settings import TOKENS_ENV, Listen, Settings

log = logging.getLogger("durable_streams_server")


def check_exposure(host: str, config: ServerConfig, allow_unauthenticated: bool) -> None:
    """Without tokens only loopback is served, unless the operator says the network is trusted."""
    if config.auth is not None or allow_unauthenticated:
        return
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host.lower() == "localhost"
    if not loopback:
        raise SystemExit(
            f"refusing to serve --host {host} without authentication: configure bearer tokens with "
            f"--auth-tokens-file (or {TOKENS_ENV}), or pass --allow-unauthenticated if every client "
            "that can reach this address may read and write all streams (e.g. behind an authenticating proxy)"
        )


def check_tls(certfile: str | None, keyfile: str | None) -> None:
    """Fail at startup with a message naming the files, not later inside uvicorn."""
    if (certfile is None) != (keyfile is None):
        raise SystemExit("--tls-certfile and --tls-keyfile go together: give both or neither")
    if certfile is not None:
        try:  # the empty password makes an encrypted key fail here instead of prompting
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile, password="")
        except (OSError, ssl.SSLError) as exc:
            raise SystemExit(
                f"cannot serve HTTPS with --tls-certfile {certfile} and --tls-keyfile {keyfile}: {exc} "
                "(both must be PEM files, the key unencrypted and matching the certificate)"
            ) from None


def check_listening(settings: Settings) -> None:
    """What every listening process checks before it starts: exposure and the TLS files."""
    check_exposure(settings.listen.host, settings.server, settings.allow_unauthenticated)
    check_tls(settings.listen.tls_certfile, settings.listen.tls_keyfile)


def run_uvicorn(
    app: ASGIApp,
    listen: Listen,
    *,
    http: type[asyncio.Protocol] | None = None,
    h11_max_incomplete_event_size: int | None = None,
) -> None:
    """Serve ``app`` as ``listen`` says until a signal stops it (``http``: the connection
    protocol class, uvicorn's own when ``None``)."""
    uvicorn.run(
        app,
        host=listen.host,
        port=listen.port,
        log_config=None,
        access_log=listen.access_log,
        timeout_graceful_shutdown=5,
        http=http or "auto",
        h11_max_incomplete_event_size=h11_max_incomplete_event_size,
        loop=listen.event_loop,
        forwarded_allow_ips=listen.forwarded_allow_ips,
        timeout_keep_alive=listen.keep_alive_timeout_s,
        # uvicorn counts the connection asking, so its limit is one above the connections served
        limit_concurrency=listen.max_connections + 1 if listen.max_connections else None,
        ssl_certfile=listen.tls_certfile,
        ssl_keyfile=listen.tls_keyfile,
    )


def _freeze_start_up() -> None:
    """The app has started: what start-up built lives as long as the process (``collector.py``)."""
    log.info("started", extra={"frozen_objects": freeze_start_up_objects()})


def serve(settings: Settings) -> None:
    """Run one server (a single server, or a shard server of a cluster) until it is stopped."""
    if settings.cluster_parent:
        die_with_parent(settings.cluster_parent)
    check_listening(settings)
    config, listen = settings.server, settings.listen
    auth = config.auth
    log.info(
        "starting",
        extra={
            **tune_allocators(),
            "host": listen.host,
            "port": listen.port,
            "data_dir": str(config.data_dir),
            "auth": ",".join(grant.name for grant in auth.grants) if auth is not None else "off",
            "tls": listen.tls_certfile is not None,
            "cluster_shard": config.cluster_shard,
        },
    )
    app = build_app(config, on_started=_freeze_start_up)
    run_uvicorn(
        app.asgi,
        listen,
        http=http_protocol(app, config, listen.http_parser),
        h11_max_incomplete_event_size=config.max_header_bytes or None,
    )
