"""A cluster node's process: its supervisor, leases and membership, the shard servers it starts,
and its router (the cluster package's docstring says how it is laid out and what it may import)."""
