"""The cluster-internal credential's source: one random secret per storage root.

The first node to start on a root creates ``_cluster/secret`` with put-if-absent
(``objects.ConditionalObjects.create``); every node reads that same object, so every shard
server of the cluster, whichever node started it, holds the same secret (handed over in
``http.cluster_secret.CLUSTER_SECRET_ENV``). Whoever can read the storage root can read it:
the same people who can read every stream anyway.
"""

from __future__ import annotations

import secrets

from .objects import ConditionalObjects

SECRET_KEY = "_cluster/secret"


def cluster_secret(objects: ConditionalObjects) -> str:
    """The root's secret, created first if there is none."""
    fresh = secrets.token_urlsafe(32)
    if objects.create(SECRET_KEY, fresh.encode()) is not None:
        return fresh
    found = objects.get(SECRET_KEY)
    if found is None:
        raise RuntimeError(f"{SECRET_KEY} vanished while it was being read")
    return found.body.decode()
