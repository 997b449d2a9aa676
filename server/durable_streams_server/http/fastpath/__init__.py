"""The fast path: see ``protocol.py``."""
