"""The storage scale benchmark's view of the server: a black box seen from outside.

``scale_bench.py`` must keep measuring the server while its storage is refactored and
redesigned, so nothing here imports server code. A ``Probe`` starts the real
``durable-streams-server`` as a subprocess (``tests/servers.py``'s ``ServerProcess``) on
127.0.0.1 with a data dir of its own, and observes it only through what any operator has:

- HTTP: ``/readyz`` (start-up is over when it answers 200), ``/metrics`` (Prometheus text:
  Delta commit and compaction counters), and the protocol itself (``http.client``
  keep-alive connections, the lightest client in the standard library);
- ``/proc/PID``: ``status`` (VmRSS, VmHWM = peak RSS), ``stat`` (user + system CPU) and
  ``io`` (``read_bytes``: what the process made the disk read, page cache misses only);
- the data dir on disk: its size (``du``) and its Parquet files by path and size, so that
  a compaction pass's rewritten bytes are the bytes of files that were not there before.

``drop_caches()`` empties the page cache (root only) for cold reads and says whether it could.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "tests")]

from benchkit import Target, progress  # noqa: E402
from harness import request  # noqa: E402
from servers import ServerProcess  # noqa: E402

MIB = 1024 * 1024
OCTETS = {"Content-Type": "application/octet-stream"}
NO_COMPACTION = ["--compaction-interval-s", "0"]
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$", re.M)


def server_flags() -> str:
    """The server's ``--help`` text: which options the code under test has."""
    command = [sys.executable, "-m", "durable_streams_server", "--help"]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=True).stdout


def drop_caches() -> bool:
    """``sync; echo 3 > /proc/sys/vm/drop_caches``; False where not permitted."""
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def dir_bytes(path: Path) -> int:
    """``du -sb``: bytes of everything under ``path`` (WAL, Delta log, data files)."""
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def parquet_files(path: Path) -> dict[str, int]:
    """Every Parquet file under ``path``: relative path -> size."""
    return {str(p.relative_to(path)): p.stat().st_size for p in path.rglob("*.parquet") if p.is_file()}


def new_bytes(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes of the files in ``after`` that were not in ``before``: what was written between."""
    return sum(size for name, size in after.items() if name not in before)


class Probe:
    """One server process over one data dir; restartable with other flags on the same data."""

    def __init__(self, data_dir: Path, args: Sequence[str] = ()) -> None:
        self.data_dir = data_dir
        self.process = ServerProcess(data_dir, list(args))

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def pid(self) -> int:
        assert self.process.proc is not None, "not started"
        return self.process.proc.pid

    def connection(self, timeout: float = 600) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def start(self, args: Sequence[str] | None = None, timeout_s: float = 600) -> float:
        """Start (with ``args`` instead of the previous flags if given); seconds from spawning the
        process to ``/readyz`` answering 200."""
        if args is not None:
            self.process.extra_args = list(args)
        started = time.perf_counter()
        self.process.start()
        conn = self.connection(timeout=timeout_s)
        deadline = started + timeout_s
        while True:
            try:
                status, _, body = request(conn, "GET", "/readyz")
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                status, body = 0, b""
            if status == 200:
                conn.close()
                return time.perf_counter() - started
            if time.perf_counter() > deadline:
                raise RuntimeError(f"not ready within {timeout_s}s: {status} {body[:300]!r}")
            time.sleep(0.005)

    def stop(self) -> None:
        """SIGTERM: a graceful stop (the server flushes what it holds)."""
        self.process.stop()

    def kill(self) -> None:
        self.process.kill()

    # -- /metrics -----------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """Every sample of ``/metrics``: series (name plus labels, as printed) -> value."""
        conn = self.connection(timeout=60)
        try:
            status, _, body = request(conn, "GET", "/metrics")
        finally:
            conn.close()
        assert status == 200, status
        return {series: float(value) for series, value in _SAMPLE.findall(body.decode())}

    def metric(self, series: str) -> float:
        values = self.metrics()
        if series not in values:
            raise RuntimeError(f"/metrics has no {series}: the harness needs it (has the server renamed it?)")
        return values[series]

    def wait_flushed(self, timeout_s: float = 600) -> None:
        """Until nothing waits for a Delta commit (``durable_streams_unflushed_bytes`` is 0)."""
        deadline = time.monotonic() + timeout_s
        while self.metrics().get("durable_streams_unflushed_bytes", 0.0) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"still unflushed after {timeout_s}s")
            time.sleep(0.1)

    # -- /proc ----------------------------------------------------------------------------

    def _status_kib(self, field: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"no {field} in /proc/{self.pid}/status")

    def rss_mib(self) -> float:
        return self._status_kib("VmRSS") / 1024

    def peak_rss_mib(self) -> float:
        """VmHWM: the largest RSS the process has had since it started."""
        return self._status_kib("VmHWM") / 1024

    def cpu_s(self) -> float:
        """User + system CPU seconds the process (all its threads) has used."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        return ticks / _CLOCK_TICKS

    def disk_read_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
        raise RuntimeError(f"no read_bytes in /proc/{self.pid}/io")

    # -- the protocol -----------------------------------------------------------------------

    def create(self, path: str, body: bytes | None = None) -> None:
        conn = self.connection()
        try:
            status, _, data = request(conn, "PUT", path, body, OCTETS)
        finally:
            conn.close()
        assert status in (200, 201), (status, path, data[:300])

    def read_all(
        self, path: str, expected: int | None = None, label: str | None = None, limit_s: float | None = None
    ) -> tuple[int, float]:
        """Read ``path`` from ``offset=-1`` to its tail, response after response: (bytes, seconds).
        With ``label``, a progress line every 128 MiB; with ``limit_s``, it stops after the
        response that ends past that time (and ``expected`` is not checked)."""
        conn = self.connection()
        received, offset = 0, "-1"
        started = time.perf_counter()
        try:
            while True:
                status, headers, body = request(conn, "GET", f"{path}?offset={offset}")
                assert status == 200, (status, body[:300])
                if label and (received + len(body)) // (128 * MIB) > received // (128 * MIB):
                    rate = (received + len(body)) / MIB / (time.perf_counter() - started)
                    note(f"  {label}: {(received + len(body)) / MIB:,.0f} MiB read ({rate:.1f} MiB/s)")
                received += len(body)
                offset = headers["stream-next-offset"]
                if headers.get("stream-up-to-date") == "true":
                    break
                if limit_s is not None and time.perf_counter() - started > limit_s:
                    return received, time.perf_counter() - started
        finally:
            conn.close()
        elapsed = time.perf_counter() - started
        if expected is not None:
            assert received == expected, (path, received, expected)
        return received, elapsed

    def first_read_ms(self, path: str) -> float:
        """Latency of one ``GET offset=-1`` (the first response only) on a new connection."""
        conn = self.connection()
        try:
            started = time.perf_counter()
            status, _, body = request(conn, "GET", f"{path}?offset=-1")
            elapsed = time.perf_counter() - started
        finally:
            conn.close()
        assert status == 200, (status, body[:300])
        return 1000 * elapsed


def note(message: str) -> None:
    progress(message, file=sys.stderr)


def target_at(size: int, issue_size: int, target: Target) -> Target | None:
    """A target applies at the size it was set for."""
    return target if size == issue_size else None


class Work:
    """Temp data dirs, each removed when its scenario ends; the servers started in them."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ds-scale-"))
        self.probes: list[Probe] = []

    def probe(self, name: str, args: list[str]) -> Probe:
        probe = Probe(self.root / name, args)
        self.probes.append(probe)
        return probe

    def done(self, probe: Probe) -> None:
        probe.kill()
        shutil.rmtree(probe.data_dir, ignore_errors=True)
        probe.process.log_path.unlink(missing_ok=True)

    def close(self) -> None:
        for probe in self.probes:
            probe.kill()
        shutil.rmtree(self.root, ignore_errors=True)
