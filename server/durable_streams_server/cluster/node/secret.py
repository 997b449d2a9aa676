"""The cluster-internal credential's source: the operator's file, or one random secret per root.

The credential opens the cluster's internal routes only (``cluster.shard.credential``), never the
public surface. Where it comes from decides who can reach those routes:

* ``--cluster-secret-file`` (recommended where the storage root is readable by others, such as
  Spark jobs reading the Delta tables): the operator's secrets, one per line (blank lines and
  ``#`` comments ignored). The first is the one the cluster presents; every one is accepted.
  Rotation without a refused request: add the new secret as the second line on every node
  (a rolling restart), then make it the first (another), then remove the old one. Every node
  of a cluster must use the same file's secrets. Nothing is stored in the root.
* otherwise, the first node to start on a root creates ``_cluster/secret`` with put-if-absent
  (``objects.ConditionalObjects.create``) and every node reads that same object. Whoever can
  read the storage root can then read it, and so reach the internal routes: tail reports,
  stream listings and wake events of the subscriptions, and copies of a stream for a fork of
  another shard.

Either way a node hands the secret to the shard servers it starts with their settings, on
their stdin (``workers``), never on a command line or in their environment.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from .objects import ConditionalObjects

SECRET_KEY = "_cluster/secret"
MIN_LENGTH = 32
"""The shortest secret a file may hold (characters): the root's own is 43."""


class SecretFileError(ValueError):
    """A ``--cluster-secret-file`` that cannot serve: missing, empty, or a secret too short."""


def cluster_secret(objects: ConditionalObjects, secret_file: Path | None = None) -> str:
    """The cluster's secrets, one per line, the presented one first: the operator's file's, or
    the root's (created first if there is none)."""
    if secret_file is not None:
        return read_secret_file(secret_file)
    fresh = secrets.token_urlsafe(32)
    if objects.create(SECRET_KEY, fresh.encode()) is not None:
        return fresh
    found = objects.get(SECRET_KEY)
    if found is None:
        raise RuntimeError(f"{SECRET_KEY} vanished while it was being read")
    return found.body.decode()


def read_secret_file(path: Path) -> str:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SecretFileError(f"--cluster-secret-file {path}: {exc.strerror or exc}") from None
    lines = [line.strip() for line in text.splitlines()]
    found = [line for line in lines if line and not line.startswith("#")]
    if not found:
        raise SecretFileError(f"--cluster-secret-file {path}: no secret in it (one per line)")
    short = [index + 1 for index, line in enumerate(found) if len(line) < MIN_LENGTH]
    if short:
        raise SecretFileError(
            f"--cluster-secret-file {path}: secret number {short[0]} has fewer than {MIN_LENGTH} characters"
        )
    return "\n".join(found)
