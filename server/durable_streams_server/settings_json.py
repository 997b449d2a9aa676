"""``Settings`` as JSON: how a cluster node hands a shard server its settings, as data.

The node writes one JSON document to the shard server's stdin and closes it
(``cluster.node.workers``); the shard server (``durable-streams-server shard-server``) imports
everything first, then blocks reading it, so a process can be started before its settings are
known (a warm spare) and given them when a shard needs it. Nothing is on its command line, so no
option table has to be kept in step with the parser, and the secrets it carries (the cluster's
credential, the token digests, storage credentials) are in no argv and no file: a pipe only the
child reads. Decoding builds the dataclasses again, so the shard server checks every value as a
command line's would be checked.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .config import ServerConfig
from .protocol.tokens import AuthConfig, parse_tokens
from .settings import Listen, Logs, NodeOptions, Settings

FORMAT = 1
"""The document's version: a shard server refuses another (a node and its servers are one install)."""


class SettingsFormatError(ValueError):
    """The document is not a ``Settings`` of this version; the message says what is wrong."""


def _grants(auth: AuthConfig) -> list[dict[str, object]]:
    """The grants in the token file's own format, by digest (``token_sha256``): no token is kept."""
    return [
        {
            "name": grant.name,
            "scope": grant.scope,
            "buckets": sorted(grant.buckets),
            "prefixes": list(grant.prefixes),
            "token_sha256": grant.digest.hex(),
        }
        for grant in auth.grants
    ]


def _plain(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, AuthConfig):
        return _grants(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _fields(instance: object) -> dict[str, object]:
    return {field.name: _plain(getattr(instance, field.name)) for field in dataclasses.fields(instance)}  # type: ignore[arg-type]


def settings_to_json(settings: Settings) -> bytes:
    document = {
        "format": FORMAT,
        "server": _fields(settings.server),
        "listen": _fields(settings.listen),
        "logs": _fields(settings.logs),
        "cluster": _fields(settings.cluster) if settings.cluster is not None else None,
        "allow_unauthenticated": settings.allow_unauthenticated,
        "cluster_parent": settings.cluster_parent,
    }
    return json.dumps(document).encode()


def _server(fields: dict[str, Any]) -> ServerConfig:
    auth = fields.pop("auth")
    return ServerConfig(
        **{
            **fields,
            "data_dir": Path(fields["data_dir"]),
            "allow_private_webhook_urls": tuple(fields["allow_private_webhook_urls"]),
            "auth": parse_tokens(json.dumps(auth), "the node's tokens") if auth is not None else None,
        }
    )


def settings_from_json(data: bytes) -> Settings:
    """The ``Settings`` ``settings_to_json`` wrote; ``SettingsFormatError`` naming what is wrong."""
    try:
        document = json.loads(data)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            found = document.get("format") if isinstance(document, dict) else None
            raise SettingsFormatError(f"expected a settings document of format {FORMAT}, got format {found!r}")
        cluster = document["cluster"]
        if cluster is not None and cluster["cluster_secret_file"] is not None:
            cluster = {**cluster, "cluster_secret_file": Path(cluster["cluster_secret_file"])}
        return Settings(
            server=_server(dict(document["server"])),
            listen=Listen(**document["listen"]),
            logs=Logs(**document["logs"]),
            cluster=None if cluster is None else NodeOptions(**cluster),
            allow_unauthenticated=bool(document["allow_unauthenticated"]),
            cluster_parent=int(document["cluster_parent"]),
        )
    except SettingsFormatError:
        raise
    except (ValueError, KeyError, TypeError) as exc:  # (ConfigError and AuthConfigError among them)
        raise SettingsFormatError(f"not a usable settings document: {type(exc).__name__}: {exc}") from None
