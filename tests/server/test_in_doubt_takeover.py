"""A commit in doubt, then a takeover: the stale owner never takes the new owner's commits for its own.

Two real servers on one location on moto's S3 (``--durability delta``: an append is acknowledged
by its commit). The first reaches S3 through a loopback proxy (``fault_proxy``) that, while the
outage lasts, answers every request with ``403`` (an error the object store client does not
retry, so each commit attempt fails at once); the second reaches moto directly.

1. The first server acknowledges appends 0-2, then S3 goes away for it: append 3's commit fails
   and the producer gets ``503 COMMIT_IN_DOUBT``; the flusher keeps the batch and retries.
2. The second server takes the location over (``--take-over force``) and acknowledges appends 10
   and 11: it continues the LSNs from Delta, so its commits pass the first server's cut.
3. S3 comes back for the first server. Its next retry must see the newer owner (fenced), not an
   LSN at or past its cut: that LSN is the new owner's, and append 3 never landed.

The first server must never acknowledge append 3 (not to the producer's retry, not to a reader),
and the history read from the new owner must hold exactly what was acknowledged.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import requests
from fault_proxy import PASS, Fault, FaultProxy
from servers import MotoServer, ServerProcess, session, wait_for

JSON = {"Content-Type": "application/json"}
OUTAGE = Fault.status(403)
"""Not retried by the object store client (a 5xx or a refused connection is, for minutes)."""


class S3Outage(FaultProxy):
    """A proxy to moto answering every request with ``OUTAGE`` while ``down`` is set."""

    down = False

    def _next_fault(self, method: str) -> Fault:
        return OUTAGE if self.down else PASS


def _append(server: ServerProcess, n: int, producer: str, seq: int) -> requests.Response:
    """Append ``{"n": n}`` as request ``seq`` of an idempotent ``producer``."""
    headers = {**JSON, "Producer-Id": producer, "Producer-Epoch": "0", "Producer-Seq": str(seq)}
    return session().post(server.stream_url("s"), data=b'{"n": %d}' % n, headers=headers, timeout=60)


def _history(server: ServerProcess) -> list[int]:
    values: list[int] = []
    offset = "-1"
    while True:
        answer = session().get(server.stream_url("s"), params={"offset": offset}, timeout=60)
        assert answer.status_code == 200, answer.text
        values += [item["n"] for item in answer.json()]
        offset = answer.headers["Stream-Next-Offset"]
        if answer.headers.get("Stream-Up-To-Date") == "true":
            return values


def _said(server: ServerProcess, *texts: str) -> list[str]:
    """The lines of ``server``'s log holding any of ``texts``."""
    return [line for line in server.log_text().splitlines() if any(text in line for text in texts)]


def _fenced(server: ServerProcess) -> bool:
    """Whether ``server`` knows a newer owner took its storage over (its readiness says so)."""
    ready = session().get(f"{server.url}/readyz", timeout=60)
    return ready.status_code == 503 and "no longer owns its storage" in ready.text


def _error_code(answer: requests.Response) -> str:
    return str(answer.json()["error"]["code"]) if answer.status_code == 503 else str(answer.status_code)


def test_a_stale_owner_never_acknowledges_a_batch_a_newer_owners_commits_passed(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    bucket = f"in-doubt-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    durability = ["--durability", "delta"]
    with S3Outage(moto.port) as s3:
        through_proxy = [f"--storage-option=AWS_ENDPOINT_URL={s3.url}"]
        old = server_factory(*moto.server_args(f"s3://{bucket}/ds"), *through_proxy, *durability, "--node-id", "old")
        assert session().put(old.stream_url("s"), headers=JSON, timeout=60).status_code == 201
        for n in range(3):
            assert _append(old, n, "p", n).status_code in (200, 204)

        s3.down = True
        in_doubt = _append(old, 3, "p", 3)
        assert (in_doubt.status_code, _error_code(in_doubt)) == (503, "COMMIT_IN_DOUBT"), in_doubt.text

        new = server_factory(
            *moto.server_args(f"s3://{bucket}/ds"),
            *durability,
            "--node-id",
            "new",
            "--take-over",
            "force",
            data_dir=tmp_path / "new",
        )
        for seq, n in enumerate((10, 11)):
            assert _append(new, n, "q", seq).status_code in (200, 204)

        s3.down = False
        settled = ("records not flushed: a newer owner fenced this server", "delta commits succeed again")
        wait_for(lambda: _said(old, *settled), timeout_s=60, interval_s=0.2)
        wait_for(lambda: _fenced(old), message=lambda: _said(old, *settled))  # (its ownership check polls every second)

        assert _history(old) == [0, 1, 2], _said(old, *settled)
        retried = _append(old, 3, "p", 3)  # (the same request again, as the protocol's retries are)
        assert (retried.status_code, _error_code(retried)) == (503, "NOT_OWNER"), retried.text
        assert _history(new) == [0, 1, 2, 10, 11]
