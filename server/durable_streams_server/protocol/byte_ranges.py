"""HTTP ``Range`` requests of a file of known size (RFC 9110, section 14): one byte range.

Readers of planned data files ask for one range at a time (the footer, then the column
chunks of a row group). ``byte_range`` answers the ``[start, end)`` a ``Range`` header asks
for; ``None`` means the whole file (no header, a header this server ignores, as the RFC
allows: another unit, several ranges, a malformed one). A range that starts at or past the
end of a non-empty file cannot be satisfied (416, with the file's size). Pure.
"""

from __future__ import annotations

from .errors import RangeNotSatisfiable


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``[start, end)`` of a file of ``size`` bytes that ``header`` asks for; ``None``: all of it."""
    if header is None:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = (part.strip() for part in spec.partition("-"))
    if not dash or not _number_or_empty(first) or not _number_or_empty(last):
        return None
    if first == "":
        if last == "" or int(last) == 0:
            return None
        return max(0, size - int(last)), size  # a suffix: the last N bytes
    start = int(first)
    if last != "" and int(last) < start:
        return None
    if start >= size:
        raise RangeNotSatisfiable(
            f"the range starts at byte {start} of a {size}-byte file", headers={"Content-Range": f"bytes */{size}"}
        )
    return start, size if last == "" else min(size, int(last) + 1)


def _number_or_empty(text: str) -> bool:
    return text == "" or (text.isascii() and text.isdigit())
