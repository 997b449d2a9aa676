"""The HTTP layer: the protocol's URLs mapped onto the engine, as an ASGI app and on a fast path.

Theory of operation, outside in:

- **The app** (``app.DurableStreamsApp``): owns storage and engine for one server, starts them on
  its lifespan (or first request), and is an ASGI app (``asgi``) a user can mount in their own.
  Its routing shell exists at once; what it serves with (storage, engine, every handler) is
  assembled in one step when it starts (``started.assemble``) and handed to each route.
- **The request policy** (``request_policy.RequestPolicy``): what every request passes, on
  either path -- admit (auth: ``auth``/``policy``; limits: ``limits``), observe (``metrics``;
  the live-reader slot released) and decorate (the security headers).
- **The gate** (``gate.Gate``): the ASGI app itself, applying the policy around the routes; the
  base route's stream requests go straight to their handler, everything else through the
  Starlette router (``routes``).
- **The handlers**: a stream's (``streams.StreamHandlers``: create, append, read, long-poll,
  SSE via ``sse``, HEAD, delete; the answers' headers in ``read_answers``; a read's, a HEAD's and
  the fast path's writes' answers as an ``answers.Answer``, which the app's path makes a Starlette
  ``Response`` and the fast path writes from its headers as they are), the extensions'
  (``extensions``: buckets, snapshots, bootstrap), read plans and their files (``read_plans``),
  subscriptions (``subscriptions``). No protocol decisions here: those are ``protocol``'s and
  the engine's.
- **The fast path** (``fastpath/``): uvicorn's connection protocol extended to guard every
  request head and to serve a stream's most frequent requests from its parser callbacks, with
  the same policy and handlers. It builds on this package, never the other way: a handler
  that parks a long-poll asks the request's ``read_answers.Parking`` whether the connection
  answers it at the wake; the ASGI path's never does. Only the server's assembly
  (``server.http_protocol``) plugs it in, and only it uses uvicorn's internals.
"""
