"""Cluster mode: shards, leases, the node supervisor and its router."""
