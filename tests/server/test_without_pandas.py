"""The server process leaves pandas unloaded (``without_pandas``), installed beside it or not:
a server that appended, flushed, compacted and read back from Delta has no pandas mapped,
and pyarrow, settled that way, still converts to and from pandas when asked to."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from servers import ServerProcess, flushed, session, wait_for

TEXT = {"Content-Type": "text/plain"}


def _compaction_passes(server: ServerProcess) -> list[tuple[int, int]]:
    return [
        (int(a), int(b))
        for a, b in re.findall(r"msg=compacted files_before=(\d+) files_after=(\d+)", server.log_text())
    ]


def test_a_server_that_flushed_compacted_and_read_back_has_not_loaded_pandas(
    server_factory: Callable[..., ServerProcess],
) -> None:
    assert importlib.util.find_spec("pandas") is not None, "the premise: pandas is installed beside the server"
    server = server_factory("--flush-interval-ms", "50", "--tail-cache-bytes", "0", "--compaction-interval-s", "0.5")
    http = session()
    url = server.stream_url("no-pandas")
    assert http.put(url, headers=TEXT).status_code == 201
    for index in range(4):  # four flushes, four files: a bin for compaction to rewrite
        assert http.post(url, headers=TEXT, data=f"m{index};").status_code == 204
        wait_for(flushed(server))
    wait_for(lambda: any(after < before for before, after in _compaction_passes(server)), timeout_s=60)
    assert http.get(url, params={"offset": "-1"}).text == "m0;m1;m2;m3;"  # read from Delta (no tail cache)

    assert server.proc is not None
    mapped = Path(f"/proc/{server.proc.pid}/maps").read_text()
    assert "/pandas/" not in mapped


_CONVERSIONS = """
import sys
import pyarrow as pa
from durable_streams_server.without_pandas import settle_pyarrow_without_pandas

assert settle_pyarrow_without_pandas() is True
table = pa.table({"n": [1, 2], "b": [b"x", None]})
assert "pandas" not in sys.modules, "converting Python values probed for pandas again"
frame = table.to_pandas()
assert "pandas" in sys.modules
assert list(frame["n"]) == [1, 2]
assert pa.array(frame["n"]).type == pa.int64()
assert pa.Table.from_pandas(frame).equals(table)
print("ok")
"""


def test_pyarrow_settled_without_pandas_still_converts_pandas_when_asked() -> None:
    done = subprocess.run([sys.executable, "-c", _CONVERSIONS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
