"""The CLI's ``append``: stdin or a file into a stream, by an idempotent producer.

A JSON stream takes a JSON document in one request (the server flattens a top-level array),
or ``--json-lines``, each line one message, every line checked before the first request. Byte
streams go in chunks of ``--chunk-size``; text streams too, each chunk ending at a line's end
(a reader takes each message as a row: a line cut in two would be two rows). ``--if-match`` is
one conditional request of the whole input.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import BinaryIO

from . import _cli_io as io
from ._client import Client
from .errors import PreconditionFailed
from .models import is_json
from .producer import Producer
from .stream import Stream

_CHUNK_BYTES = 1024 * 1024


def add_append_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stream")
    parser.add_argument("file", nargs="?", type=argparse.FileType("rb"), default="-", help="input (default stdin)")
    parser.add_argument("--json-lines", action="store_true", help="append each non-empty line as one JSON message")
    parser.add_argument("--close", action="store_true", help="close the stream after appending")
    parser.add_argument("--producer-id", help="default: a fresh random id for this run")
    parser.add_argument("--epoch", type=io.count, default=0, help="producer epoch (raise it when reusing an id)")
    parser.add_argument(
        "--chunk-size",
        type=io.positive,
        default=_CHUNK_BYTES,
        help="bytes per request for byte and text streams (a text stream's chunks end at line ends)",
    )
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, help="progress bar (default: if a TTY)")
    parser.add_argument(
        "--if-match",
        metavar="OFFSET",
        help="conditional append: the whole input in one request, stored only if the stream's tail is OFFSET "
        "(a Stream-Next-Offset; with --close, closed in the same request); exit 1 naming the tail if not",
    )


def append_command(client: Client, args: argparse.Namespace) -> int:
    """``append``: stdin or a file, by an idempotent producer (one conditional request with ``--if-match``)."""
    stream = client.stream(args.stream)
    source: BinaryIO = args.file
    if args.if_match is not None:
        return _append_if_match(stream, source, args)
    content_type = stream.resolve_content_type()
    if is_json(content_type) and not args.json_lines:
        # A JSON document is one request: the server needs it whole to flatten a top-level array.
        result = stream.append(source.read())
        print(f"appended 1 request; next-offset {result.next_offset}", file=sys.stderr)
    else:
        # JSON lines are all checked before the first request: a bad line appends nothing.
        if args.json_lines:
            items = io.json_lines(io.validated_json_lines(source))
        else:
            text = (content_type or "").lower().startswith("text/")
            items = io.chunks(source, args.chunk_size, at_line_ends=text)
        producer_id = args.producer_id or f"cli-{uuid.uuid4()}"
        producer = Producer(stream, producer_id, epoch=args.epoch, max_batch_bytes=args.chunk_size)
        with producer, io.upload_progress(source, args.progress) as bar:
            for item in items:
                producer.send(item.strip() if args.json_lines else item)
                bar.update(len(item))
        stats = producer.stats()
        print(
            f"appended {io.plural(stats.messages_acked, 'message')} in {io.plural(stats.batches_acked, 'request')} "
            f"({stats.duplicates} deduplicated retries); next-offset {stats.last_offset}",
            file=sys.stderr,
        )
    if args.close:
        stream.close()
    return 0


def _append_if_match(stream: Stream, source: BinaryIO, args: argparse.Namespace) -> int:
    """``append --if-match``: one conditional request (not a producer's batches: a second request
    would be refused, the tail having moved), the close in it with ``--close``."""
    try:
        if args.json_lines:
            lines = [line.strip() for line in io.json_lines(io.validated_json_lines(source))]
            if not lines:
                raise io.BadInput("no JSON lines to append")
            result = stream.append_many(lines, if_match=args.if_match, close=args.close)
        else:
            data = source.read()
            if not data and not args.close:
                raise io.BadInput("nothing to append (an empty input closes the stream only with --close)")
            result = (
                stream.close(data or None, if_match=args.if_match)
                if args.close
                else stream.append(data, if_match=args.if_match)
            )
    except PreconditionFailed as exc:
        print(
            f"durable-streams append: precondition failed: the stream's tail is {exc.current_offset}, "
            f"not {args.if_match}; nothing appended",
            file=sys.stderr,
        )
        return 1
    print(f"appended 1 request; next-offset {result.next_offset}", file=sys.stderr)
    return 0
