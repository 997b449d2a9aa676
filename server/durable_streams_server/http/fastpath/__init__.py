"""The fast path: a stream's requests served from the connection's parser callbacks, and the
guards of every request head. The one place that uses uvicorn's internals.

uvicorn runs each HTTP/1.1 connection in a protocol object (``HttpToolsProtocol``, ``H11Protocol``)
that parses requests and runs the ASGI app for each in a task, through a
``RequestResponseCycle`` (``receive``/``send``, an ASGI message per body chunk and response
part). Two things here build on those classes, and so on names uvicorn does not document as
public (tests/server/test_uvicorn_internals.py lists each and fails, naming it, when one
changes; setup.py pins uvicorn to the range they were checked with):

- **The guards** (``guards.py``, ``deadline.py``), with either parser and whether or not the
  fast path is on: a request head must arrive within ``--request-timeout-s``, and a head still
  incomplete beyond ``--max-header-bytes`` is refused without buffering it; a refused head
  never overtakes the answers to requests pipelined before it.
- **The fast path** (httptools only; ``--fast-path on``, the default): the requests most of a
  busy server's work is made of -- small appends and creates, reads, long-polls and HEADs of a
  stream -- skip uvicorn's request cycle and the ASGI layers. ``FastPath`` (``route.py``) picks
  them when their head is parsed and answers them with the app's own handlers under the app's
  own request policy (``http/request_policy.py``); ``FastCycle`` (``cycle.py``) stands in for
  uvicorn's cycle on the connection and writes each answer in one piece; ``start_eagerly``
  (``eager.py``) runs a request that is likely answered without waiting in the parser's turn,
  making a task only if it does wait; a long-poll can be answered at its wake, from the group
  commit's completion (``parked.py``). The answers are the app's, to the byte
  (tests/server/test_lean_appends.py compares the two paths).

The arrows point one way: this package uses the app (``http/``) -- its handlers, its request
policy, its ``Parking`` hook for long-polls -- and nothing in ``http/`` imports it. Only the
server's assembly (``server.http_protocol``) plugs it in, by handing uvicorn
``connection_protocol(...)``; an app mounted in another ASGI server simply runs without it.
"""

from .protocol import HttpParser, connection_protocol
from .route import FastPath

__all__ = ["FastPath", "HttpParser", "connection_protocol"]
