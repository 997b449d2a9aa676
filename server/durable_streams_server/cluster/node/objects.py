"""Conditional objects: the storage primitive that cluster mode's leases are built on.

Small objects (``cluster.json``, ``leases/0003.json``, ``nodes/n1.json``) kept under a root
next to the data, read with their etag and written only on a condition: ``create`` succeeds
only if the key is absent, ``replace`` only if the etag presented is still the current one.
The store decides each condition atomically, so of two writers racing from the same read at
most one wins and the other gets ``None`` (re-read, then decide again). That compare-and-swap
is all a lease needs: holding, renewing and taking over are replaces from the etag last read,
so the sequence of owners is linearized by the store itself, never by home-made consensus
(DESIGN.md, "Never alone"). Time (expiry, clocks) is the caller's business, not this module's.

Etags change on every successful write, even of an identical body, so a writer holding a
stale etag can never win after the object went A -> B -> A (no ABA). To that end every stored
object starts with a header line ``#ds-object <token>`` naming a fresh random 128-bit token,
which ``get`` strips: on S3 the ETag is the MD5 of the content, so the token is what makes
two writes of one body differ; locally the token is the etag itself, read in the same file
and hence atomically with the body. (Rejected: ``inode-mtime-size`` of the file, as inode
numbers are reused once a replaced file is freed and mtimes advance by a clock tick, so two
quick writes of one size may repeat an etag; a generation counter in a sidecar, as readers
would then need the lock too.) An object written by other means reads whole, its etag S3's
ETag or, locally, the SHA-256 of its content.

Backends (``open_objects``):

- ``s3://bucket/prefix`` (and ``s3a://``): PUT with ``If-None-Match: *`` (create) or
  ``If-Match: <etag>`` (replace); S3 evaluates both atomically and answers 412 (or 409 for
  a conflicting concurrent write) to the loser. Requests are signed by the storage layer's
  presigner (``storage.presign``: query-string SigV4, ``host`` and ``UNSIGNED-PAYLOAD``
  signed, the condition headers riding unsigned) and sent with httpx, without proxies from
  the environment. An S3-compatible store must evaluate conditional writes atomically for
  cluster mode to be safe (MinIO and S3 do; moto checks, then writes, with no lock of its own
  between: a test store, not a lease base).
- a local directory (a path or ``file://``): one machine, any number of processes. ``create``
  writes a temp file, fsyncs it and hard-links it to the key (atomic, fails if the key
  exists); ``replace`` holds an ``flock`` on a sidecar ``.<name>.lock`` while it compares
  the current etag and renames a fsynced temp file over the key (then fsyncs the directory).
  Readers take no lock: a rename is atomic, so they see the old object or the new, whole.
  Not for network file systems, whose ``flock`` and ``link`` promise less.

``ObjectStoreError`` means the store failed or did not answer within ``timeout_s``: never a
lost race. After one on a write the outcome is unknown (the PUT may have landed), so a
caller re-reads before concluding anything. Key components may not start with ``.``: temp
and lock files live under such names. The API is synchronous (a supervisor thread's).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from ...storage.data_files import local_root
from ...storage.presign import S3Presigner

_HEADER = re.compile(rb"#ds-object ([0-9a-f]{32})\n")
_URL_TTL_S = 300
"""How long a signed request URL is valid (it is sent at once: only clock skew matters)."""


@dataclass(frozen=True)
class Versioned:
    """An object's body and the etag a ``replace`` presents to overwrite this version."""

    body: bytes
    etag: str


class ObjectStoreError(Exception):
    """The store failed or did not answer in time (never a lost race: that is ``None``)."""


class ConditionalObjects(Protocol):
    """Small objects under a root, written only on a condition (see the module docstring)."""

    def get(self, key: str) -> Versioned | None:
        """The object at ``key`` and its etag; ``None`` if absent."""
        ...

    def create(self, key: str, body: bytes) -> str | None:
        """Write ``key`` if absent: its new etag; ``None`` if the key exists."""
        ...

    def replace(self, key: str, body: bytes, etag: str) -> str | None:
        """Overwrite ``key`` if ``etag`` is current: the new etag; ``None`` if not (or absent)."""
        ...

    def list_keys(self, prefix: str) -> list[str]:
        """The keys under ``prefix`` (a string prefix, relative to the root), sorted."""
        ...

    def close(self) -> None:
        """Release connections (the object cannot be used after)."""
        ...


def open_objects(root_uri: str, storage_options: Mapping[str, str], *, timeout_s: float = 2.0) -> ConditionalObjects:
    """The conditional objects under ``root_uri``: ``s3://`` (``s3a://``) or a local directory."""
    scheme = urlsplit(root_uri).scheme
    if scheme in ("s3", "s3a"):
        signer = S3Presigner.for_table(root_uri, storage_options)
        if signer is None:
            raise ValueError(
                f"cluster mode on {root_uri} needs static S3 credentials (AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY in the storage options or the environment)"
            )
        return S3Objects(signer, timeout_s)
    root = local_root(root_uri)
    if root is None:
        raise ValueError(
            f"cluster mode supports s3:// (or s3a://) and local paths, not {scheme}:// (storage URI {root_uri})"
        )
    return LocalObjects(Path(root), timeout_s)


def _checked(key: str) -> str:
    """``key`` if it is a relative path whose components are non-empty and do not start with ``.``."""
    if not key or "\\" in key or "\0" in key or any(not part or part[0] == "." for part in key.split("/")):
        raise ValueError(f"invalid object key {key!r}: a relative path, no empty or dot-led components")
    return key


def _checked_prefix(prefix: str) -> str:
    if prefix:
        _checked(prefix + "_")  # a prefix may end in "/" or within a component
    return prefix


def _framed(body: bytes) -> tuple[str, bytes]:
    """A fresh write token and the stored form of ``body``: the header naming it, then ``body``."""
    token = secrets.token_hex(16)
    return token, b"#ds-object " + token.encode() + b"\n" + body


def _unframed(data: bytes) -> tuple[str | None, bytes]:
    """The write token and the body of stored ``data`` (``None`` and all of it: written by other means)."""
    header = _HEADER.match(data)
    if header is None:
        return None, data
    return header.group(1).decode(), data[header.end() :]


class S3Objects:
    """Objects under ``s3://bucket/prefix``, by signed requests over one httpx client."""

    page_size = 1000
    """Keys per ListObjectsV2 page (S3's maximum; tests lower it to page through few keys)."""

    def __init__(self, signer: S3Presigner, timeout_s: float) -> None:
        self._signer = signer
        self._client = httpx.Client(timeout=timeout_s, trust_env=False, follow_redirects=False)

    def get(self, key: str) -> Versioned | None:
        response = self._send("GET", _checked(key))
        if response.status_code == 404 and _error_code(response) != "NoSuchBucket":
            return None
        if response.status_code != 200:
            raise _failure("GET", key, response)
        return Versioned(_unframed(response.content)[1], _etag("GET", key, response))

    def create(self, key: str, body: bytes) -> str | None:
        return self._put(key, body, {"If-None-Match": "*"})

    def replace(self, key: str, body: bytes, etag: str) -> str | None:
        return self._put(key, body, {"If-Match": etag})

    def list_keys(self, prefix: str) -> list[str]:
        root = self._signer.prefix + "/" if self._signer.prefix else ""
        query = {"list-type": "2", "prefix": root + _checked_prefix(prefix), "max-keys": str(self.page_size)}
        keys: list[str] = []
        while True:
            response = self._send("GET", None, query=query)
            if response.status_code != 200:
                raise _failure("LIST", prefix, response)
            try:
                page = ElementTree.fromstring(response.content)
            except ElementTree.ParseError as exc:
                raise ObjectStoreError(f"LIST {prefix!r}: unreadable listing: {exc}") from exc
            keys += [(element.text or "")[len(root) :] for element in page.findall("{*}Contents/{*}Key")]
            token = page.findtext("{*}NextContinuationToken")
            if page.findtext("{*}IsTruncated") != "true" or not token:
                return sorted(keys)
            query["continuation-token"] = token

    def close(self) -> None:
        self._client.close()

    def _put(self, key: str, body: bytes, condition: dict[str, str]) -> str | None:
        response = self._send("PUT", _checked(key), content=_framed(body)[1], headers=condition)
        if response.status_code in (409, 412):
            return None  # another write won (409: S3's ConditionalRequestConflict, a concurrent one)
        if response.status_code == 404 and "If-Match" in condition and _error_code(response) != "NoSuchBucket":
            return None  # replace of an absent key
        if response.status_code != 200:
            raise _failure("PUT", key, response)
        return _etag("PUT", key, response)

    def _send(
        self,
        method: str,
        key: str | None,
        *,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> httpx.Response:
        url = self._signer.signed(method, key, _URL_TTL_S, query=query)
        try:
            return self._client.request(method, url, content=content, headers=headers)
        except httpx.HTTPError as exc:
            where = repr(key) if key else "listing"
            raise ObjectStoreError(f"{method} {where}: {type(exc).__name__}: {exc}") from exc


def _error_code(response: httpx.Response) -> str | None:
    """The ``Code`` of an S3 error response (``NoSuchKey``, ``NoSuchBucket``, ...)."""
    try:
        return ElementTree.fromstring(response.content).findtext("{*}Code") if response.content else None
    except ElementTree.ParseError:
        return None


def _failure(method: str, key: str, response: httpx.Response) -> ObjectStoreError:
    code = _error_code(response) or response.reason_phrase
    return ObjectStoreError(f"{method} {key!r}: HTTP {response.status_code} {code}")


def _etag(method: str, key: str, response: httpx.Response) -> str:
    etag: str = response.headers.get("ETag", "")
    if not etag:
        raise ObjectStoreError(f"{method} {key!r}: HTTP {response.status_code} without an ETag")
    return etag


class LocalObjects:
    """Objects as files under a local directory, safe across the processes of one machine."""

    def __init__(self, root: Path, timeout_s: float) -> None:
        self._root = root
        self._timeout_s = timeout_s

    def get(self, key: str) -> Versioned | None:
        try:
            data = (self._root / _checked(key)).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ObjectStoreError(f"get {key!r}: {exc}") from exc
        return _local_version(data)

    def create(self, key: str, body: bytes) -> str | None:
        path = self._root / _checked(key)
        token, data = _framed(body)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = _written_temp(path, data)
            try:
                os.link(temp, path)  # atomic, and refused if the key exists
            except FileExistsError:
                return None
            finally:
                temp.unlink()
            _fsync_dir(path.parent)
        except OSError as exc:
            raise ObjectStoreError(f"create {key!r}: {exc}") from exc
        return token

    def replace(self, key: str, body: bytes, etag: str) -> str | None:
        path = self._root / _checked(key)
        try:
            if not path.exists():
                return None  # objects are never deleted: an absent one stays absent until created
            with self._locked(path):
                if _local_version(path.read_bytes()).etag != etag:
                    return None
                token, data = _framed(body)
                temp = _written_temp(path, data)
                try:
                    os.replace(temp, path)
                except OSError:
                    temp.unlink(missing_ok=True)
                    raise
                _fsync_dir(path.parent)
        except OSError as exc:
            raise ObjectStoreError(f"replace {key!r}: {exc}") from exc
        return token

    def list_keys(self, prefix: str) -> list[str]:
        start = self._root / _checked_prefix(prefix).rpartition("/")[0]
        if not start.is_dir():
            return []
        keys: list[str] = []
        try:
            for directory, subdirectories, names in os.walk(start, onerror=_reraise):
                relative = Path(directory).relative_to(self._root).as_posix()
                base = "" if relative == "." else relative + "/"
                subdirectories[:] = [
                    name for name in subdirectories if name[0] != "." and _may_hold(base + name, prefix)
                ]
                keys += [base + name for name in names if name[0] != "." and (base + name).startswith(prefix)]
        except OSError as exc:
            raise ObjectStoreError(f"list {prefix!r}: {exc}") from exc
        return sorted(keys)

    def close(self) -> None:
        pass

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        """Hold an exclusive ``flock`` on ``path``'s sidecar lock file (at most ``timeout_s`` waiting)."""
        descriptor = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline, pause = time.monotonic() + self._timeout_s, 0.0005
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise ObjectStoreError(f"{path}: locked by another writer for {self._timeout_s}s") from None
                    time.sleep(pause)
                    pause = min(pause * 2, 0.01)
            yield
        finally:
            os.close(descriptor)  # releases the lock


def _local_version(data: bytes) -> Versioned:
    token, body = _unframed(data)
    return Versioned(body, token if token is not None else "sha256-" + hashlib.sha256(data).hexdigest())


def _written_temp(path: Path, data: bytes) -> Path:
    """A new, fsynced temp file next to ``path`` holding ``data``."""
    temp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    with open(temp, "xb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    return temp


def _fsync_dir(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _may_hold(directory: str, prefix: str) -> bool:
    """Whether keys under ``directory`` may start with ``prefix`` (a walk descends only there)."""
    return (directory + "/").startswith(prefix) or prefix.startswith(directory + "/")


def _reraise(error: OSError) -> None:
    raise error
