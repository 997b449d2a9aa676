"""``startingOffsets=snapshot`` learns where each stream starts from a HEAD: the driver never
downloads a snapshot's body (a task reads it)."""

from __future__ import annotations

from client.fake_transport import FakeTransport, Reply
from driver_fakes import URL, driver_on, head

AT_7 = "0000000000000007_0000000000000000"
AT_3 = "0000000000000003_0000000000000000"


def test_the_start_is_the_latest_snapshots_offset_from_a_head() -> None:
    with_snapshot = Reply(200, {**head(AT_7).headers, "Stream-Snapshot-Offset": AT_3})
    transport = FakeTransport.script(head(AT_7), with_snapshot)
    driver = driver_on(transport, startingOffsets="snapshot")
    assert driver.starting_offsets(driver.tails()) == {URL: AT_3}
    assert driver.snapshots == {URL: AT_3}
    assert [r.method for r in transport.requests] == ["HEAD", "HEAD"]


def test_a_stream_without_a_snapshot_starts_at_its_beginning() -> None:
    transport = FakeTransport.script(head(AT_7), head(AT_7))
    driver = driver_on(transport, startingOffsets="snapshot")
    assert driver.starting_offsets(driver.tails()) == {URL: "-1"}
    assert driver.snapshots == {}
