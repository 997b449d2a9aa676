"""Spark source and sink for the Durable Streams protocol."""

__version__ = "0.1.0"
