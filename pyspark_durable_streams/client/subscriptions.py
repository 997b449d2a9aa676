"""Subscriptions (protocol sections 6-7): manage them, work pull-wakes, verify webhooks.

A subscription lives in the reserved ``__ds`` namespace of a stream root: the base surface
(``{base}/v1/stream/__ds/...``, ``Client.subscriptions()``) or a bucket
(``{base}/{bucket}/__ds/...``, ``Client.subscriptions("my-bucket")``); stream paths in it
are relative to that root.

- ``Subscriptions``: create (or re-confirm), read, delete, explicit membership, and the
  raw worker calls (``claim`` / ``ack`` / ``release``) of pull-wake subscriptions.
- ``PullWakeWorker``: the loop body of a worker: claim, read each pending stream from its
  acked offset, hand the messages to your function, ack, and finish the wake (or release
  it if the function raised, so another worker can take it at once).
- ``verify_webhook_signature``: what a webhook receiver checks before trusting a
  delivery: the ``Webhook-Signature`` header against the server's JWKS (Ed25519; needs
  the ``cryptography`` package).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import requests

from ._http import HTTP, Backoff
from .errors import ResponseError
from .models import Message
from .stream import Stream

JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Wake:
    """A claimed pull-wake: its fencing identity, the claim token, and the streams' offsets."""

    subscription_id: str
    wake_id: str
    generation: int
    token: str
    streams: Sequence[Mapping[str, Any]]
    """``{"path", "acked_offset", "tail_offset", "has_pending", ...}`` per linked stream."""

    @property
    def pending(self) -> list[Mapping[str, Any]]:
        return [stream for stream in self.streams if stream.get("has_pending")]


class Subscriptions:
    """The subscriptions of one stream root (``root``: ``v1/stream/`` or ``<bucket>/``)."""

    def __init__(self, transport: HTTP, root: str, *, backoff: Backoff) -> None:
        self.root = root.rstrip("/") + "/"
        self.url = transport.url(self.root + "__ds")
        self._transport = transport
        self._backoff = backoff

    def __repr__(self) -> str:
        return f"Subscriptions({self.url!r})"

    def stream(self, path: str) -> Stream:
        """The stream at ``path`` relative to this root."""
        return Stream(self._transport, self._transport.url(self.root + path), backoff=self._backoff)

    # -- management ---------------------------------------------------------------------

    def create(self, subscription_id: str, config: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Create the subscription (``config`` as the protocol's body: ``type``, ``pattern``
        and/or ``streams``, ``webhook: {"url"}`` or ``wake_stream``, ...). Returns
        ``(created, subscription)``: False when it existed with this configuration;
        ``Conflict`` (``SUBSCRIPTION_EXISTS``) when it exists with another."""
        response = self._call("PUT", subscription_id, "", config, ok=(200, 201))
        return response.status_code == 201, _json_object(response.json(), "PUT")

    def get(self, subscription_id: str) -> dict[str, Any]:
        return _json_object(self._call("GET", subscription_id, "", None, ok=(200,)).json(), "GET")

    def delete(self, subscription_id: str) -> None:
        self._call("DELETE", subscription_id, "", None, ok=(204,))

    def add_streams(self, subscription_id: str, paths: Sequence[str]) -> None:
        self._call("POST", subscription_id, "/streams", {"streams": list(paths)}, ok=(204,))

    def remove_stream(self, subscription_id: str, path: str) -> None:
        self._call("DELETE", subscription_id, f"/streams/{path}", None, ok=(204,))

    def jwks(self) -> dict[str, Any]:
        """The public signing keys webhook deliveries are signed with."""
        response = self._transport.request("GET", f"{self.url}/jwks.json", ok=(200,))
        return _json_object(response.json(), "GET")

    # -- pull-wake worker calls ------------------------------------------------------------

    def claim(self, subscription_id: str, worker: str) -> Wake | None:
        """Take the current wake's lease; None when nothing is pending. ``Conflict``
        (``ALREADY_CLAIMED``) while another worker holds it."""
        response = self._call("POST", subscription_id, "/claim", {"worker": worker}, ok=(200, 204))
        if response.status_code == 204:
            return None
        body = _json_object(response.json(), "POST")
        return Wake(subscription_id, body["wake_id"], int(body["generation"]), body["token"], body["streams"])

    def ack(self, wake: Wake, acks: Mapping[str, str], *, done: bool = False) -> bool:
        """Move acked offsets (path -> offset) and extend the lease (a heartbeat, also with
        no acks); ``done`` ends the wake. Returns whether another wake follows at once."""
        body = {
            "wake_id": wake.wake_id,
            "generation": wake.generation,
            "acks": [{"stream": path, "offset": offset} for path, offset in acks.items()],
            "done": done,
        }
        answer = self._call("POST", wake.subscription_id, "/ack", body, ok=(200,), token=wake.token).json()
        return bool(_json_object(answer, "POST").get("next_wake"))

    def release(self, wake: Wake) -> None:
        """Give the wake up unfinished: it becomes claimable again at once."""
        body = {"wake_id": wake.wake_id, "generation": wake.generation}
        self._call("POST", wake.subscription_id, "/release", body, ok=(204,), token=wake.token)

    def _call(
        self,
        method: str,
        subscription_id: str,
        suffix: str,
        body: Mapping[str, Any] | None,
        *,
        ok: tuple[int, ...],
        token: str | None = None,
    ) -> requests.Response:
        headers = dict(JSON)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"  # the wake token instead of the client's
        content = json.dumps(body).encode() if body is not None else None
        url = f"{self.url}/subscriptions/{subscription_id}{suffix}"
        return self._transport.request(method, url, ok=ok, headers=headers, content=content)


class PullWakeWorker:
    """Works one pull-wake subscription: ``run_once`` handles one wake (see the module doc).

    ``handle(path, messages)`` gets every message of one pending stream from its acked
    offset on; once it returns, that stream is acked up to what was read.
    """

    def __init__(
        self,
        subscriptions: Subscriptions,
        subscription_id: str,
        worker: str,
        handle: Callable[[str, list[Message]], None],
    ) -> None:
        self.subscriptions = subscriptions
        self.subscription_id = subscription_id
        self.worker = worker
        self.handle = handle

    def run_once(self) -> bool:
        """Claim, process and finish one wake; False when nothing was pending."""
        wake = self.subscriptions.claim(self.subscription_id, self.worker)
        if wake is None:
            return False
        try:
            acks: dict[str, str] = {}
            for stream in wake.pending:
                path = str(stream["path"])
                reader = self.subscriptions.stream(path).read(str(stream["acked_offset"]))
                with reader:
                    messages = list(reader)
                    self.handle(path, messages)
                    acks[path] = reader.offset
                self.subscriptions.ack(wake, {path: acks[path]})  # progress, and a heartbeat
        except BaseException:
            self.subscriptions.release(wake)
            raise
        self.subscriptions.ack(wake, acks, done=True)
        return True


def verify_webhook_signature(
    body: bytes, header: str, jwks: Mapping[str, Any], *, max_age_s: int = 300, now: float | None = None
) -> bool:
    """Whether ``Webhook-Signature: t=<unix s>,kid=<kid>,ed25519=<sig>`` signs ``body`` with
    a key of ``jwks`` and is at most ``max_age_s`` old (replay window)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        fields = dict(part.strip().split("=", 1) for part in header.split(","))
        timestamp = int(fields["t"])
        signature = _unb64url(fields["ed25519"])
    except (KeyError, ValueError):
        return False
    keys = [key for key in jwks.get("keys", []) if key.get("kid") == fields.get("kid") and key.get("crv") == "Ed25519"]
    if len(keys) != 1 or abs((time.time() if now is None else now) - timestamp) > max_age_s:
        return False
    try:
        public = Ed25519PublicKey.from_public_bytes(_unb64url(str(keys[0]["x"])))
        public.verify(signature, str(timestamp).encode() + b"." + body)
    except (InvalidSignature, ValueError, KeyError):
        return False
    return True


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _json_object(body: object, method: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ResponseError(f"{method} on a subscription answered {type(body).__name__}, not a JSON object")
    return body
