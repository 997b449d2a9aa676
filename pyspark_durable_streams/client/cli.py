"""``durable-streams``: the operator's command line over the Python client.

Streams are named by a full URL or by a path relative to ``--url`` / ``DURABLE_STREAMS_URL``
(e.g. ``v1/stream/orders`` on our server, ``my-bucket/orders`` on the bucketed surface).
Output conventions: JSON streams print one compact JSON value per line; byte and text
streams print their bytes unchanged; summaries and offsets go to stderr so stdout stays data.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence

from . import _cli_io as io
from ._cli_append import add_append_options, append_command
from ._cli_retention import add_limits, limits, retention_command
from ._client import Client
from .errors import DurableStreamsError, Gone, NotConnected, NotFound, Unauthorized

_TAIL_LINES = 10


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_stream_path(args, parser)
    base = _base_url(args, parser)
    try:
        client = Client(base, token=args.token, timeout=args.timeout, verify=args.ca_cert)
        with client:
            command: Callable[[Client, argparse.Namespace], int] = args.command
            return command(client, args)
    except NotConnected:
        print(
            f"durable-streams: cannot connect to {base}: is the server running there? "
            "(`make serve` or `durable-streams-server` starts one on http://127.0.0.1:4437)",
            file=sys.stderr,
        )
        return 1
    except NotFound as exc:
        print(f"durable-streams: {exc}{_missing_hint(args)}", file=sys.stderr)
        return 1
    except Unauthorized as exc:
        hint = "check --token / DURABLE_STREAMS_TOKEN" if args.token else "pass --token or set DURABLE_STREAMS_TOKEN"
        print(f"durable-streams: {exc} ({hint})", file=sys.stderr)
        return 1
    except DurableStreamsError as exc:
        print(f"durable-streams: {exc}", file=sys.stderr)
        return 1
    except io.BadInput as exc:
        print(f"durable-streams {args.command_name}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `durable-streams tail -f s | head`
        sys.stderr.close()
        return 0


def build_parser() -> argparse.ArgumentParser:
    # Connection options are accepted before or after the sub-command; the copy on each
    # sub-command defaults to SUPPRESS so it never overwrites a value given earlier.
    parser = argparse.ArgumentParser(prog="durable-streams", description="Operate Durable Streams from the shell.")
    _connection_options(parser, defaults=True)
    shared = argparse.ArgumentParser(add_help=False)
    _connection_options(shared, defaults=False)
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[Client, argparse.Namespace], int], text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[shared], help=text, description=text)
        sub.set_defaults(command=handler, command_name=name)
        return sub

    create = command("create", _create, "Create a stream, or check that it exists with this configuration.")
    create.add_argument("stream")
    create.add_argument("--content-type", "-t", default="application/octet-stream")
    create.add_argument("--ttl", type=int, help="seconds of inactivity before the stream expires")
    create.add_argument("--expires-at", help="absolute expiry, RFC 3339")
    create.add_argument("--closed", action="store_true", help="create it closed (the body is all it will hold)")
    create.add_argument("--data", help="initial content (text)")
    create.add_argument("--file", type=argparse.FileType("rb"), help="initial content from a file")
    create.add_argument("--fork-from", help="fork this source stream (URL path)")
    create.add_argument("--fork-offset", help="fork at this offset of the source (default: its tail)")
    add_limits(create)

    append = command("append", append_command, "Append stdin or a file (idempotent producer, retried on failures).")
    add_append_options(append)

    cat = command("cat", _cat, "Print a stream from an offset up to its current end.")
    cat.add_argument("stream")
    cat.add_argument("--offset", default="-1", help="start offset (-1 = beginning, now = current end)")
    cat.add_argument("--print-offset", action="store_true", help="print the offset to resume from to stderr")
    cat.add_argument("--progress", action=argparse.BooleanOptionalAction, help="progress bar (default: if a TTY)")

    tail = command(
        "tail", _tail, "Print the last messages (like tail(1)); with -f keep following until the stream is closed."
    )
    tail.add_argument("stream")
    tail.add_argument("-f", "--follow", action="store_true", help="keep reading as messages arrive")
    tail.add_argument(
        "-n",
        "--lines",
        type=io.count,
        default=_TAIL_LINES,
        help=f"start this many messages before the end ({_TAIL_LINES})",
    )
    tail.add_argument("--offset", help="start at this offset instead (-1 = the beginning, now = the end)")
    tail.add_argument("--live", choices=("sse", "long-poll"), default="sse", help="how to follow (default sse)")

    head = command("head", _head, "Show a stream's metadata (tail offset, content type, TTL, closed).")
    head.add_argument("stream")
    head.add_argument("--json", action="store_true", help="print one JSON object")

    retention = command(
        "retention", retention_command, "Show a stream's retention limits, or change those named (none removes one)."
    )
    retention.add_argument("stream")
    add_limits(retention)

    rm = command("rm", _rm, "Delete a stream.")
    rm.add_argument("stream")
    rm.add_argument("--force", "-f", action="store_true", help="succeed if the stream does not exist")

    ls = command("ls", _ls, "List the streams of a bucket.")
    ls.add_argument("bucket")
    ls.add_argument("--prefix", help="only stream ids starting with this")
    ls.add_argument("--long", "-l", action="store_true", help="also show status, content type and next offset")

    snapshot = command("snapshot", _snapshot, "Publish or fetch a stream snapshot.")
    snapshot.add_argument("action", choices=("publish", "get"))
    snapshot.add_argument("stream")
    snapshot.add_argument("--offset", help="publish: required (a Stream-Next-Offset); get: default latest")
    snapshot.add_argument("--file", help="publish: read from (default stdin); get: write to (default stdout)")
    snapshot.add_argument("--content-type", default="application/octet-stream", help="publish: the blob's type")

    lag = command("lag", _lag, "Show how far each named consumer is behind, per stream (our server: /v1/consumers).")
    lag.add_argument("--consumer", help="only this consumer")
    lag.add_argument("--json", action="store_true", help="print one JSON object per line")

    bootstrap = command("bootstrap", _bootstrap, "Fetch snapshot + retained messages (/bootstrap).")
    bootstrap.add_argument("stream")
    bootstrap.add_argument("--snapshot-file", help="write the snapshot here (default: not written)")
    return parser


def _connection_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    env = os.environ
    parser.add_argument(
        "--url", default=default(env.get("DURABLE_STREAMS_URL")), help="server base URL (env DURABLE_STREAMS_URL)"
    )
    parser.add_argument(
        "--token", default=default(env.get("DURABLE_STREAMS_TOKEN")), help="bearer token (env DURABLE_STREAMS_TOKEN)"
    )
    parser.add_argument(
        "--ca-cert",
        default=default(env.get("DURABLE_STREAMS_CA_CERT")),
        help="PEM file of the CA (or self-signed certificate) to trust for https:// (env DURABLE_STREAMS_CA_CERT)",
    )
    parser.add_argument("--timeout", type=float, default=default(90.0), help="seconds per request (default 90)")


def _check_stream_path(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """A stream is named by a path of two segments at least: one segment names a bucket, and a
    PUT there would create a bucket instead of a stream."""
    stream = getattr(args, "stream", None)
    if stream is None or "://" in stream or "/" in stream.strip("/"):
        return
    parser.error(
        f"stream {stream!r}: name a stream by its path, v1/stream/{stream.strip('/')} on the base surface "
        f"or <bucket>/{stream.strip('/')} on the bucketed surface (one segment names a bucket)"
    )


def _missing_hint(args: argparse.Namespace) -> str:
    """What to do about a stream that does not exist, for the commands that need one."""
    if args.command is append_command:
        kind = "application/json" if args.json_lines else "text/plain, application/json, ..."
        return f" (create it first: durable-streams create {args.stream} --content-type {kind})"
    if args.command in (_cat, _tail, _head, _snapshot, _bootstrap):
        return f" (create it first: durable-streams create {args.stream} --content-type ...)"
    return ""


def _base_url(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    target = str(getattr(args, "stream", None) or getattr(args, "bucket", ""))
    if args.url:
        if "://" not in args.url:
            parser.error(f"--url {args.url}: a URL starts with http:// or https://, e.g. http://{args.url}")
        return str(args.url)
    if "://" in target:
        return target
    parser.error("no server: pass --url or set DURABLE_STREAMS_URL (or name the stream by its full URL)")


# -- commands --------------------------------------------------------------------------------


def _create(client: Client, args: argparse.Namespace) -> int:
    stream = client.stream(args.stream)
    data = args.file.read() if args.file else args.data
    result = stream.create(
        args.content_type,
        data=data,
        ttl_seconds=args.ttl,
        expires_at=args.expires_at,
        closed=args.closed,
        forked_from=args.fork_from,
        fork_offset=args.fork_offset,
        retention=limits(args),
    )
    print(f"{'created' if result.created else 'exists'} {stream.url} next-offset {result.next_offset}")
    return 0


def _cat(client: Client, args: argparse.Namespace) -> int:
    stream = client.stream(args.stream)
    with io.read_progress(stream, args.offset, args.progress) as bar, stream.read(args.offset) as reader:
        io.write_messages(reader, progress=bar)
    if args.print_offset:
        print(f"next-offset {reader.offset}", file=sys.stderr)
    return 0


def _tail(client: Client, args: argparse.Namespace) -> int:
    stream = client.stream(args.stream)
    live = args.live if args.follow else None
    offset = args.offset
    if offset is None:
        offset = io.last_messages_offset(stream, args.lines)
    if offset is None:  # offsets that tell no positions: keep the last messages of the history
        with stream.read() as history:
            io.write_messages(io.last_of(history, args.lines))
        offset = history.offset
        if history.closed or live is None:
            return 0
    try:
        with stream.read(offset, live=live) as reader:
            io.write_messages(reader, flush_each=True)
    except Gone:  # the last messages reach below the latest snapshot: start at it
        snapshot_offset = stream.metadata().snapshot_offset
        if args.offset is not None or snapshot_offset is None:
            raise
        with stream.read(snapshot_offset, live=live) as reader:
            io.write_messages(reader, flush_each=True)
    return 0


def _head(client: Client, args: argparse.Namespace) -> int:
    stream = client.stream(args.stream)
    meta = stream.metadata()
    fields = {
        "url": stream.url,
        "content_type": meta.content_type,
        "next_offset": meta.next_offset,
        "closed": meta.closed,
        "ttl_seconds": meta.ttl_seconds,
        "expires_at": meta.expires_at,
        "snapshot_offset": meta.snapshot_offset,
        "earliest_offset": meta.earliest_offset,
        "retained_bytes": meta.retained_bytes,
        **({"retention": meta.retention.named()} if meta.retention is not None else {}),
    }
    if args.json:
        print(json.dumps(fields))
    else:
        for name, value in fields.items():
            if value is not None:
                shown = json.dumps(value) if isinstance(value, dict) else value
                print(f"{name}: {str(value).lower() if isinstance(value, bool) else shown}")
    return 0


def _rm(client: Client, args: argparse.Namespace) -> int:
    try:
        client.stream(args.stream).delete()
    except NotFound:
        if not args.force:
            raise
    return 0


def _ls(client: Client, args: argparse.Namespace) -> int:
    for info in client.bucket(args.bucket).streams(args.prefix):
        if args.long:
            offset = info.raw.get("next_offset", info.tail_offset)
            print(f"{info.stream_id}\t{info.status}\t{info.content_type}\t{offset}")
        else:
            print(info.stream_id)
    return 0


def _lag(client: Client, args: argparse.Namespace) -> int:
    """One line per consumer and stream: consumer, stream, offset, lag in messages, bytes and
    seconds (``-`` when unknown), tab-separated under a header; ``--json``: the server's rows."""
    rows = [row for row in client.consumer_lag() if args.consumer in (None, row.consumer)]
    if args.json:
        for row in rows:
            print(json.dumps(dataclasses.asdict(row)))
        return 0
    print("consumer\tstream\toffset\tlag_messages\tlag_bytes\tlag_seconds")
    for row in rows:
        seconds = "-" if row.lag_seconds is None else f"{row.lag_seconds:.3f}"
        print(f"{row.consumer}\t{row.stream}\t{row.offset}\t{row.lag_messages}\t{row.lag_bytes}\t{seconds}")
    return 0


def _snapshot(client: Client, args: argparse.Namespace) -> int:
    snapshots = client.stream(args.stream).snapshots
    if args.action == "publish":
        if not args.offset:
            raise SystemExit("durable-streams snapshot publish: --offset is required")
        with io.open_in(args.file) as source:
            snapshots.publish(args.offset, source.read(), content_type=args.content_type)
        print(f"published snapshot at {args.offset}", file=sys.stderr)
        return 0
    snapshot = snapshots.get(args.offset) if args.offset else snapshots.latest()
    if snapshot is None:
        print("durable-streams: the stream has no snapshot", file=sys.stderr)
        return 1
    io.write_file(args.file, snapshot.data)
    print(f"snapshot-offset {snapshot.offset} content-type {snapshot.content_type}", file=sys.stderr)
    return 0


def _bootstrap(client: Client, args: argparse.Namespace) -> int:
    with client.stream(args.stream).bootstrap() as boot:
        if boot.snapshot is not None and args.snapshot_file:
            io.write_file(args.snapshot_file, boot.snapshot.data)
        io.write_messages(boot.messages)
        offset = boot.snapshot.offset if boot.snapshot is not None else "-1"
        print(f"snapshot-offset {offset} next-offset {boot.next_offset}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
