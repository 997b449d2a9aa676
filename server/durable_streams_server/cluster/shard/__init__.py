"""The code that runs inside a cluster's shard server: what makes a single server one shard of many."""
