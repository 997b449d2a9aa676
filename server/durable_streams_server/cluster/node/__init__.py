"""The code of a cluster node's process: its supervisor, leases and membership, and its router."""
