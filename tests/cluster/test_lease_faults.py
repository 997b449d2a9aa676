"""Cluster paths that lost data or availability (issue 41), each on real node processes.

- Two processes with one node id: the second refuses to start, naming the id and the first's URL.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cluster_support import serving, start_node, until
from servers import ServerProcess

pytestmark = pytest.mark.slow


def test_a_second_process_with_a_live_node_id_refuses_to_start(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Without the check, the second overwrote the node object and both served, taking each
    other's shards (a lease naming one's own id is taken at once)."""
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "2"]
    first = start_node(server_factory, storage, "n0", tmp_path)
    until(serving([first], 2), timeout_s=120)
    with pytest.raises(RuntimeError) as refused:
        start_node(server_factory, storage, "n0", tmp_path / "elsewhere")
    assert "node id 'n0' is in use by a live node at " + first.url in str(refused.value)
    assert first.shards_held() == [0, 1]

    first.process.stop()  # a clean stop marks the id free: the same id starts at once
    again = start_node(server_factory, storage, "n0", tmp_path / "elsewhere")
    until(serving([again], 2), timeout_s=120)
