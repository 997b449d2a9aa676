"""What runs inside a cluster's shard server: what makes a single server one shard of many,
plugged in by the server's assembly (``serving``; the cluster package's docstring says how it is
laid out and what it may import)."""
