"""Helpers of the sink tests: deterministic input files, and reading a stream back to count rows."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from pyspark_durable_streams.client import Client

SCHEMA = "f INT, i INT, k BIGINT"
"""Input rows: file number, line number in the file, and a globally unique key."""


def write_input(directory: Path, files: int, rows_per_file: int, *, start_file: int = 0) -> int:
    """JSON-lines files ``part-NNNN.json``; row ``k = f * rows_per_file + i``. Returns the row count."""
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(start_file, start_file + files):
        lines = (json.dumps({"f": f, "i": i, "k": f * rows_per_file + i}) for i in range(rows_per_file))
        tmp = directory / f".part-{f:04d}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(directory / f"part-{f:04d}.json")  # the file source must never see half a file
    return files * rows_per_file


def read_json(url: str) -> list[Any]:
    """Every message of a JSON stream, in stream order."""
    with Client(url) as client:
        return [message.json() for message in client.stream(url).read("-1", boundaries=False)]


def read_bytes(url: str) -> list[bytes]:
    """Every message of a byte stream (one per message: our server exposes boundaries)."""
    with Client(url) as client:
        return [message.data for message in client.stream(url).read("-1")]


def message_count(url: str) -> int:
    """Messages stored so far, from the tail offset (``SSSSSSSSSSSSSSSS_BBBB…``: the message sequence)."""
    with Client(url) as client:
        stream = client.stream(url)
        try:
            return int(stream.metadata().next_offset.split("_", 1)[0])
        except Exception:
            return 0


def assert_exactly_once(rows: list[dict[str, int]], total: int) -> None:
    """Each key 0..total-1 exactly once, and each input file's rows in file order (per-partition order)."""
    keys = [row["k"] for row in rows]
    duplicates = len(keys) - len(set(keys))
    missing = total - len(set(keys))
    assert duplicates == 0 and missing == 0 and len(keys) == total, (
        f"{len(keys)} rows stored for {total} written: {duplicates} duplicates, {missing} missing"
    )
    by_file: dict[int, list[int]] = defaultdict(list)
    for row in rows:
        by_file[row["f"]].append(row["i"])
    for f, lines in by_file.items():
        assert lines == sorted(lines), f"rows of input file {f} are out of order in the stream"
