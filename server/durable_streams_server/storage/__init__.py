"""Durability: the write-ahead log and the Delta tier."""
