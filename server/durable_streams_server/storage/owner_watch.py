"""The owner's side of ownership while it serves: noticing a handover request or a newer owner.

A claim (``owner_log.claim_table``) happens once, before the server serves. From then on the
owner looks at the table every ``Node.poll_interval_s`` (a refresh of the Delta log: one
listing on an object store):

* **a handover was asked for** (another node started with ``--take-over``): new writes are
  refused (``OWNER_MOVING``, retry soon: the client's retry meets the new owner behind the same
  address, or this refusal again); everything already submitted is flushed into Delta, then the
  release is committed and this server refuses writes for good (``NOT_OWNER``);
* **a newer owner claimed the table** (a forced takeover): this server is fenced at once, without
  waiting for its next commit to be refused.

Fenced means: writes refused (``NOT_OWNER``), every request still waiting for durability
answered with that refusal instead of an acknowledgement, the flusher stopped. Records of a WAL
that were acknowledged and not yet in Delta are named in the log (a forced takeover gives them
up; see ``ownership``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .admission import Admission
from .delta_log import DeltaLog
from .ownership import Fenced, OwnershipError

log = logging.getLogger("durable_streams_server.storage")

_FLUSHED_POLL_S = 0.02


class OwnerWatch:
    def __init__(
        self,
        delta: DeltaLog,
        admission: Admission,
        poll_interval_s: float,
        *,
        flush: Callable[[], None],
        flushed: Callable[[], bool],
        on_fenced: Callable[[OwnershipError], None],
    ) -> None:
        self._delta = delta
        self._admission = admission
        self._poll_interval_s = poll_interval_s
        self._flush = flush
        self._flushed = flushed
        self._on_fenced = on_fenced

    async def run(self) -> None:
        while self._admission.fenced is None:
            await asyncio.sleep(self._poll_interval_s)
            try:
                asked = await asyncio.to_thread(self._delta.handover_asked)
            except Fenced as fenced:
                self._on_fenced(fenced)
                return
            except Exception as error:  # the store unreachable: the flusher reports it too
                log.warning("ownership check failed", extra={"error": str(error)})
                continue
            if asked:
                await self.hand_over()
                return

    async def hand_over(self) -> None:
        """Refuse new writes, flush what was submitted, release the table, refuse writes for good."""
        log.warning("handing the storage over: refusing new writes, flushing")
        self._admission.moving = True
        while not self._flushed():
            if self._admission.fenced is not None:
                return  # (fenced while flushing: the flusher said so)
            self._flush()
            await asyncio.sleep(_FLUSHED_POLL_S)
        try:
            await asyncio.to_thread(self._delta.release)
        except OwnershipError as error:
            self._on_fenced(error)
            return
        log.warning("handed the storage over")
        self._on_fenced(OwnershipError("this server handed its storage over to another node"))
