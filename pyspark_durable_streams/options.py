"""Every option of the ``durable_streams`` format, declared once and validated in one place.

Each option is an ``Option`` spec: its documented name, how its text is parsed and checked
(a parser that raises ``OptionError`` naming it), its default, and the field of
``ReadOptions`` / ``WriteOptions`` / ``ConnectionOptions`` it fills. The tables
``CONNECTION``, ``READ`` and ``WRITE`` list the specs each direction accepts; the parse
functions apply them and then check what involves several options at once (exactly one
target, mutually exclusive names, offsets naming streams that are read).

The specs live in ``_options`` (``common``: parsers and connection options; ``range_limits``:
where a read starts and ends, one typed kind each; ``read``; ``write``); this module is the
stable import point for the rest of the package and for users.

Names follow Spark's Kafka source where they fit (``startingOffsets``, ``endingOffsets``,
``maxMessagesPerTrigger``, ``failOnDataLoss`` …). Spark passes option names
case-insensitively, so they are compared lower-cased. A bad or unknown option raises
``OptionError`` naming it, at ``load()`` for reads and at ``save()``/``start()`` for writes.
"""

from __future__ import annotations

from ._options.common import (
    CONNECTION,
    CONNECTION_OPTIONS,
    LATEST,
    TEST_HOOKS_ENV,
    ConnectionOptions,
    Option,
    OptionError,
    parse_connection_options,
    reject_unknown,
)
from ._options.range_limits import (
    EarliestStart,
    End,
    LatestEnd,
    LatestStart,
    SnapshotStart,
    SpecificEnd,
    SpecificStart,
    Start,
    StreamTimestampsStart,
    TimestampEnd,
    TimestampStart,
)
from ._options.read import READ, READ_OPTIONS, VALUE_TYPES, ReadOptions, parse_read_options
from ._options.write import WRITE, WRITE_OPTIONS, WriteOptions, parse_write_options

__all__ = [
    "CONNECTION",
    "CONNECTION_OPTIONS",
    "LATEST",
    "READ",
    "READ_OPTIONS",
    "TEST_HOOKS_ENV",
    "VALUE_TYPES",
    "WRITE",
    "WRITE_OPTIONS",
    "ConnectionOptions",
    "EarliestStart",
    "End",
    "LatestEnd",
    "LatestStart",
    "Option",
    "OptionError",
    "ReadOptions",
    "SnapshotStart",
    "SpecificEnd",
    "SpecificStart",
    "Start",
    "StreamTimestampsStart",
    "TimestampEnd",
    "TimestampStart",
    "WriteOptions",
    "parse_connection_options",
    "parse_read_options",
    "parse_write_options",
    "reject_unknown",
]
