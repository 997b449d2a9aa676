"""Cluster mode, in one room: all the code that exists only because servers run as a cluster.

Theory of operation
-------------------
A cluster is two kinds of process over one storage root. A **node** (``durable-streams-server
--cluster``) holds shard leases and answers every URL of the cluster by sending it to its shard.
A **shard server** is started by a node for each shard it holds: a complete single server of
that shard's storage location, with a few parts that make it one shard of many. Their code
lives apart, named so:

* ``node/``: a node's process. Its supervisor (``node.supervisor``, with ``leases``,
  ``renewals``, ``membership``, ``balance``, ``probes``, ``lease_view`` and the routing table,
  ``routes``), the shard servers it starts (``workers``), the credential it makes
  (``secret``), the cluster's records on storage (``shards``, ``objects``), and its router with
  the relay (``router``, ``proxy``, ``upstream``); ``run`` starts it all.
* ``shard/``: what runs inside a shard server. The guard that sends another shard's path back
  to the router (``guard``), the cluster's credential on the internal routes (``credential``),
  the subscriptions' view of the other shards' streams (``shard_reports``, ``remote_streams``,
  ``peers``, ``reporter``, the internal endpoints ``internal``), forks of another shard's stream
  (``fork_copies``, ``fork_exports``, ``export_frames``), and dying with its node (``parent``).
  ``serving`` is what the server's assembly plugs in.
* ``paths``: the one rule both kinds use, which shard a request path belongs to.

The rules (``tests/test_cluster_room.py`` checks them):

1. **Nothing below imports the cluster.** ``protocol``, ``storage``, ``engine`` and ``http``
   leave a port where a shard server differs, each with a single server's default:
   ``http.ports`` (a request's admission, none; the routes only a cluster uses and forks of
   streams held elsewhere: 404, and every fork local) and ``engine.subscribed_streams`` (the
   streams the subscriptions see: this engine's). The assembly plugs the cluster's in:
   ``server.py`` (``shard.serving``), ``serve.py`` (``shard.parent``) and ``cli.py``
   (``node.run``); nothing else outside this package imports it, ``config.py`` neither it nor
   the HTTP layer. (The URL space stays one table, ``http.routes``: it names the internal routes
   a single server answers 404.)
2. **The node and the shard server never import each other.** They run in different processes
   and talk only through what they send: a node hands a shard server its settings as data
   (``settings_json``), shard servers reach each other through a node's router. What both need
   is a module of this package itself (``paths``), which imports neither side.
3. **State stays where the storage is.** What a shard's location records whoever serves it
   stays in the engine: a copied fork's source and link, its pending unlinks and the fork
   links' counts (``engine.copied_forks``, ``engine.fork_links``), so a single server given a
   shard's location replays and keeps them exactly as a shard server does. The cluster owns the
   talking: asking for exports, sending unlinks, reporting tails.
4. **One error rendering.** What a node's router says itself (a shard moving, a lost relay, a
   redirect) is a protocol error rendered by ``protocol.errors.rendered``, as every server's is.
"""
