"""The framing of a fork export (``cluster.shard.export_frames``): parsed from chunks of any size,
bounded, and never used when cut short."""

from __future__ import annotations

import pytest

from durable_streams_server.cluster.shard import export_frames
from durable_streams_server.cluster.shard.export_frames import ExportReader, MalformedExport
from durable_streams_server.engine.copied_forks import ExportMeta

META = ExportMeta("v1/stream/src", "application/json", 60, None, None, first_seq=2, fork_seq=5)


def _body(messages: list[bytes], prefix: bytes | None = None, count: int | None = None) -> bytes:
    frames = [export_frames.meta_frame(META)]
    if prefix is not None:
        frames.append(export_frames.frame(export_frames.PREFIX, prefix))
    frames += export_frames.message_frames(messages)
    frames.append(export_frames.end_frame(len(messages) if count is None else count))
    return b"".join(frames)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_an_export_is_read_from_chunks_of_any_size(chunk: int) -> None:
    messages = [b'{"n": 0}', b"", b"x" * 1000]
    body = _body(messages, prefix=b"he")
    reader = ExportReader(max_bytes=10_000)
    for start in range(0, len(body), chunk):
        reader.feed(body[start : start + chunk])
    assert reader.finish() == (META, b"he", messages)


def test_past_the_limit_the_fork_is_refused_before_holding_more() -> None:
    reader = ExportReader(max_bytes=1500)
    body = _body([b"a" * 1000, b"b" * 1000])
    with pytest.raises(export_frames.ForkTooLarge) as refused:
        reader.feed(body)
    assert refused.value.status == 409 and refused.value.code == "FORK_TOO_LARGE"
    assert "shard key" in refused.value.message
    assert len(reader.messages) == 1  # (the second message was never kept)


def test_a_body_cut_short_or_miscounted_is_never_used() -> None:
    body = _body([b"a", b"b"])
    cut = ExportReader(max_bytes=100)
    cut.feed(body[:-3])
    with pytest.raises(MalformedExport):
        cut.finish()
    without_end = ExportReader(max_bytes=100)
    without_end.feed(body[: body.index(b"E\x00")])
    with pytest.raises(MalformedExport):
        without_end.finish()
    with pytest.raises(MalformedExport):
        ExportReader(max_bytes=100).feed(_body([b"a", b"b"], count=3))
    with pytest.raises(MalformedExport):
        ExportReader(max_bytes=100).feed(export_frames.frame(export_frames.DATA, b"no meta first"))
