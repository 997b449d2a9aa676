"""A table missing from its URI at a start (``storage/wal_binding.py``, ``check_present``): real
processes, a real bind mount.

The fault: a server's ``--storage-uri`` is on a volume that did not mount at a restart (a
boot's race, a failed disk, an fstab line gone), so the URI is an empty directory of the root
filesystem. Before the check, the server made a new table there and served from it: every
stream `404`, their offsets handed out again, and new appends acknowledged into a table that
the volume hides again once mounted. Now the start is refused before anything is made, and
once the volume is back the whole history is served, the WAL's unflushed records included.
On object storage the same URI can name an empty prefix of another store (another endpoint or
account): refused the same way. A table deleted and made again at the URI (another Delta id) is
refused too.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from servers import MotoServer, ServerProcess, numbered_stream, numbers, refused_start

pytestmark = pytest.mark.slow

JSON = {"Content-Type": "application/json"}
APPENDS = 20


@pytest.fixture(scope="module")
def bind_mounts(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skipped where this machine cannot bind-mount (root, or CAP_SYS_ADMIN), as the partition
    scenarios are where it cannot build their network."""
    probe = tmp_path_factory.mktemp("bind-probe")
    try:
        done = subprocess.run(["mount", "--bind", str(probe), str(probe)], capture_output=True, text=True)
    except OSError as error:  # (no mount tool)
        pytest.skip(f"the volume scenarios need bind mounts: {error}")
    if done.returncode != 0:
        pytest.skip(f"the volume scenarios need bind mounts: {done.stderr.strip()}")
    subprocess.run(["umount", str(probe)], check=True)


@contextlib.contextmanager
def _mounted(volume: Path, at: Path) -> Iterator[None]:
    """``volume`` mounted at ``at`` (a bind mount) until the block ends."""
    subprocess.run(["mount", "--bind", str(volume), str(at)], check=True)
    try:
        yield
    finally:
        if subprocess.run(["umount", str(at)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(at)], check=True)  # (busy: a failed test's process still in it)


@pytest.mark.parametrize(
    ("durability", "stop"),
    [("wal", "stop"), ("wal", "kill"), ("delta", "stop")],
    ids=["wal-clean-stop", "wal-crash-records-in-wal", "delta-clean-stop"],
)
@pytest.mark.usefixtures("bind_mounts")
def test_a_restart_while_the_tables_volume_is_not_mounted_is_refused(
    tmp_path: Path, durability: str, stop: str
) -> None:
    volume, mount_point, data_dir = tmp_path / "volume", tmp_path / "mnt", tmp_path / "data"
    volume.mkdir()
    mount_point.mkdir()
    args = ["--storage-uri", str(mount_point / "delta"), "--durability", durability]
    held = ["--flush-interval-ms", "600000"] if stop == "kill" else []  # (acknowledged, in the WAL only)
    with _mounted(volume, mount_point):
        server = ServerProcess(data_dir, [*args, *held]).start()
        try:
            numbered_stream(server, "s", APPENDS)
        finally:
            server.stop() if stop == "stop" else server.kill()

    log = refused_start(ServerProcess(data_dir, args))
    assert f"wrote at {mount_point}/delta/streams (id " in log and "is not there: it holds no table" in log
    assert list(mount_point.iterdir()) == []  # (nothing made on the filesystem under the mount point)

    with _mounted(volume, mount_point):
        server = ServerProcess(data_dir, args).start()
        try:
            assert numbers(server, "s") == list(range(APPENDS))
            assert requests.post(server.stream_url("s"), data=b'{"n": %d}' % APPENDS, headers=JSON, timeout=30).ok
            server.stop()
            server.start()
            assert numbers(server, "s") == list(range(APPENDS + 1))
        finally:
            server.kill()


def test_a_table_made_again_where_the_served_one_was_is_refused(tmp_path: Path) -> None:
    """The table deleted and another made at its URI (by a server on a fresh data dir): the data
    dir that served the first refuses it until its ``wal-table`` is removed on purpose."""
    data_dir, table = tmp_path / "data", tmp_path / "table"
    args = ["--storage-uri", str(table)]
    first = ServerProcess(data_dir, args).start()
    try:
        assert requests.put(first.stream_url("old"), headers=JSON, timeout=30).status_code == 201
    finally:
        first.stop()
    shutil.rmtree(table)
    other = ServerProcess(tmp_path / "other", args).start()
    try:
        assert requests.put(other.stream_url("new"), headers=JSON, timeout=30).status_code == 201
    finally:
        other.stop()

    log = refused_start(ServerProcess(data_dir, args))
    assert "is not there: it holds another table (id " in log and "deleted and made again" in log
    (data_dir / "wal-table").unlink()  # (given up on purpose, as the refusal says)
    server = ServerProcess(data_dir, args).start()
    try:
        assert requests.head(server.stream_url("new"), timeout=30).status_code == 200
        assert requests.head(server.stream_url("old"), timeout=30).status_code == 404
    finally:
        server.kill()


def test_the_same_uri_on_another_object_store_is_refused(tmp_path: Path, moto: MotoServer) -> None:
    """The table on one S3-compatible store; a restart whose endpoint names another store (an
    option from another environment), where the same bucket holds no table: refused, nothing
    made there; the right endpoint serves every append."""
    bucket = f"missing-{tmp_path.name[-20:].lower().replace('_', '-')}"
    moto.create_bucket(bucket)
    uri = f"s3://{bucket}/prefix"
    data_dir = tmp_path / "data"
    server = ServerProcess(data_dir, moto.server_args(uri)).start()
    try:
        numbered_stream(server, "s", APPENDS)
    finally:
        server.stop()
    other = MotoServer().start(tmp_path)
    try:
        other.create_bucket(bucket)
        log = refused_start(ServerProcess(data_dir, other.server_args(uri)))
        assert f"wrote at {uri}/streams (id " in log and "is not there: it holds no table" in log
        assert other.client().list_objects_v2(Bucket=bucket).get("KeyCount") == 0  # (nothing made on it)
    finally:
        other.stop()
    server = ServerProcess(data_dir, moto.server_args(uri)).start()
    try:
        assert numbers(server, "s") == list(range(APPENDS))
    finally:
        server.kill()
