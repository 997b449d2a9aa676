"""The cluster's credential from the operator (``--cluster-secret-file``), and its rotation.

Two nodes over one local root, each shard's server calling the other's internal route for a
fork's copy (``/v1/cluster/fork-links/...``). Mid-rotation the two nodes present different
secrets, each accepting both: every copy still passes, and nothing is stored in the root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from cluster_support import JSON, history, name_in_shard, send, serving, start_node
from servers import ServerProcess, wait_for

from durable_streams_server.cluster.node.secret import MIN_LENGTH, SECRET_KEY, SecretFileError, read_secret_file
from durable_streams_server.cluster.shard.credential import CLUSTER_SECRET_HEADER, presented, presenting

OLD = "old-secret-" + "o" * MIN_LENGTH
NEW = "new-secret-" + "n" * MIN_LENGTH


def test_a_secret_file_lists_the_presented_secret_first_and_accepts_every_one(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(f"# rotation: {NEW[:4]}... comes next\n{OLD}\n\n  {NEW}  \n")
    secret = read_secret_file(path)
    assert presenting(secret) == OLD
    header = CLUSTER_SECRET_HEADER.encode()
    assert presented(secret, [(header, NEW.encode())]) and presented(secret, [(header, OLD.encode())])
    assert not presented(secret, [(header, b"guess")]) and not presented(secret, [(header, b"")])
    assert not presented(secret, [(header, OLD.encode()), (header, NEW.encode())])  # (one credential, once)
    for text, why in (("# only a comment\n", "no secret"), ("short\n", "fewer than")):
        path.write_text(text)
        with pytest.raises(SecretFileError, match=why):
            read_secret_file(path)
    with pytest.raises(SecretFileError, match="No such file"):
        read_secret_file(tmp_path / "missing")


@pytest.mark.slow
def test_nodes_mid_rotation_copy_forks_across_shards_with_the_operators_secrets(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = tmp_path / "root"
    files = []
    for index, lines in enumerate(([OLD, NEW], [NEW, OLD])):  # n0 presents the old one, n1 the new one
        path = tmp_path / f"secret-{index}"
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    storage = ["--storage-uri", str(root), "--shards", "2", "--lease-ttl-s", "2"]
    nodes = [
        start_node(server_factory, [*storage, "--cluster-secret-file", str(path)], f"n{index}", tmp_path)
        for index, path in enumerate(files)
    ]
    wait_for(serving(nodes, 2), timeout_s=120)
    assert sorted(len(node.shards_held()) for node in nodes) == [1, 1]
    for source_shard in (0, 1):  # (each shard's server asks the other's, whichever node runs it)
        source = name_in_shard(source_shard, 2, f"src{source_shard}")
        fork = name_in_shard(1 - source_shard, 2, f"fork{source_shard}")
        source_url, fork_url = (f"{nodes[0].url}/v1/stream/{name}" for name in (source, fork))
        assert send("PUT", source_url, headers=JSON).status_code == 201
        assert send("POST", source_url, data=b'[{"n": 0}, {"n": 1}]', headers=JSON).status_code in (200, 204)
        forked = send("PUT", fork_url, headers={**JSON, "Stream-Forked-From": f"/v1/stream/{source}"})
        assert forked.status_code == 201, forked.text
        assert history(fork_url) == [0, 1]
    assert not (root / SECRET_KEY).exists()  # (the operator's secrets only: nothing in the root)
    # a node whose secrets the others do not accept cannot reach their internal routes
    internal = requests.get(
        f"{nodes[1].url}/v1/internal/interest",
        params={"shard": "0"},
        headers={CLUSTER_SECRET_HEADER: "another-" + "x" * MIN_LENGTH},
        timeout=30,
    )
    assert internal.status_code == 403, internal.text
