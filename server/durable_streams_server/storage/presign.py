"""S3 presigned request URLs (AWS Signature Version 4, query-string form), no SDK needed.

A read plan on an ``s3://`` table hands executors one URL per data file: a GET signed with
the server's storage credentials (the ones in its storage options, or the standard
``AWS_*`` environment variables), valid for ``expires_s`` seconds. Executors thus read the
files straight from S3 without ever holding a key. ``UNSIGNED-PAYLOAD`` and the ``host``
header are all that is signed, so a ``Range`` header may be added by the reader.

The same signer serves the server's own requests (``S3Presigner.signed``: any method, extra
query parameters, the bucket itself for listings): cluster mode's conditional objects
(``cluster.node.objects``) send PUTs whose ``If-Match`` / ``If-None-Match`` headers ride unsigned,
as a reader's ``Range`` does.

With an endpoint (``AWS_ENDPOINT_URL``: MinIO, moto, …) URLs are path-style
(``<endpoint>/<bucket>/<key>``); otherwise virtual-hosted AWS URLs
(``https://<bucket>.s3.<region>.amazonaws.com/<key>``).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

_ALIASES = {
    "key": ("aws_access_key_id", "access_key_id"),
    "secret": ("aws_secret_access_key", "secret_access_key"),
    "token": ("aws_session_token", "session_token", "aws_token", "token"),
    "region": ("aws_region", "region", "aws_default_region"),
    "endpoint": ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"),
}


def _option(options: Mapping[str, str], name: str) -> str | None:
    lowered = {key.lower(): value for key, value in options.items()}
    for alias in _ALIASES[name]:
        if lowered.get(alias):
            return lowered[alias]
        if os.environ.get(alias.upper()):
            return os.environ[alias.upper()]
    return None


def _uri_encode(text: str, *, slash: bool = False) -> str:
    return quote(text, safe="-_.~/" if slash else "-_.~")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class S3Presigner:
    """Signs GETs of the objects under one ``s3://bucket/prefix`` table root."""

    bucket: str
    prefix: str
    access_key: str
    secret_key: str
    session_token: str | None
    region: str
    endpoint: str | None

    @classmethod
    def for_table(cls, uri: str, storage_options: Mapping[str, str]) -> S3Presigner | None:
        """A presigner for an ``s3://`` (or ``s3a://``) table with static credentials; else ``None``."""
        parts = urlsplit(uri)
        if parts.scheme not in ("s3", "s3a"):
            return None
        key, secret = _option(storage_options, "key"), _option(storage_options, "secret")
        if not key or not secret:
            return None
        endpoint = _option(storage_options, "endpoint")
        return cls(
            bucket=parts.netloc,
            prefix=parts.path.strip("/"),
            access_key=key,
            secret_key=secret,
            session_token=_option(storage_options, "token"),
            region=_option(storage_options, "region") or "us-east-1",
            endpoint=endpoint.rstrip("/") if endpoint else None,
        )

    def url(self, path: str, expires_s: int, now: datetime.datetime | None = None) -> str:
        """A presigned GET of the table's file ``path`` (relative to the table root)."""
        return self.signed("GET", path, expires_s, now=now)

    def signed(
        self,
        method: str,
        path: str | None,
        expires_s: int,
        *,
        query: Mapping[str, str] | None = None,
        now: datetime.datetime | None = None,
    ) -> str:
        """A presigned ``method`` URL of the file ``path`` under the root (the bucket itself if ``None``).

        ``query`` parameters (a listing's ``list-type``, ``prefix``, ...) are signed along.
        """
        now = now or datetime.datetime.now(datetime.UTC)
        key = None if path is None else f"{self.prefix}/{path}" if self.prefix else path
        if self.endpoint is not None:
            base = self.endpoint
            canonical_uri = "/" + _uri_encode(self.bucket)
            canonical_uri += "" if key is None else "/" + _uri_encode(key, slash=True)
        else:
            base = f"https://{self.bucket}.s3.{self.region}.amazonaws.com"
            canonical_uri = "/" + ("" if key is None else _uri_encode(key, slash=True))
        host = urlsplit(base).netloc
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        scope = f"{day}/{self.region}/s3/aws4_request"
        params = {
            **(query or {}),
            "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
            "X-Amz-Credential": f"{self.access_key}/{scope}",
            "X-Amz-Date": stamp,
            "X-Amz-Expires": str(expires_s),
            "X-Amz-SignedHeaders": "host",
        }
        if self.session_token:
            params["X-Amz-Security-Token"] = self.session_token
        encoded = sorted((_uri_encode(k), _uri_encode(v)) for k, v in params.items())  # by name, as SigV4 sorts
        query_text = "&".join(f"{k}={v}" for k, v in encoded)
        request = f"{method}\n{canonical_uri}\n{query_text}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(request.encode()).hexdigest()}"
        signing = _hmac(_hmac(_hmac(_hmac(f"AWS4{self.secret_key}".encode(), day), self.region), "s3"), "aws4_request")
        signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
        return f"{base}{canonical_uri}?{query_text}&X-Amz-Signature={signature}"
