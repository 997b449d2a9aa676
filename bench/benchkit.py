"""What the benchmark scripts share: progress lines, the results table, and the JSON record of a run.

Every benchmark row is a ``Result``: our value, the value it is compared with (the reference
server, or a Spark baseline), optionally its target (a ratio to that comparison value
or an absolute bound), the raw values each side was computed from and how (``statistic``).
A script prints one table and writes one JSON record: every row with its raw samples, ratio,
target and verdict, and the conditions of the run (cores, loopback, the disk under the work
directory, versions, git commit, dates). A run of record (complete, full size) writes
``bench/results/<stem>.json``, which is committed; quick and partial runs write
``bench/results/scratch/<stem>.json`` (git-ignored), so a smoke run never stands for a
measurement. ``bench/render.py`` renders the records into bench/README.md.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
SCRATCH_DIR = RESULTS_DIR / "scratch"
README = BENCH_DIR / "README.md"
LOOPBACK = "127.0.0.1"
"""Every server and client of the benchmarks talks over this address (no real network)."""

_STARTED = time.monotonic()
_STARTED_AT = datetime.datetime.now(datetime.UTC)
_LOAD_AT_START = os.getloadavg()
_PACKAGES = ("pyspark", "pyarrow", "deltalake", "uvicorn", "starlette", "httptools", "uvloop", "numpy", "requests")


def run_clock() -> float:
    """When this run began (``time.monotonic``: one clock for every process of the machine)."""
    return _STARTED


def continue_clock(started: float) -> None:
    """Count ``progress`` from ``started``: a run's process of its own (a Spark session's) shows
    the run's time, not its own."""
    global _STARTED
    _STARTED = started


def progress(message: str, file: TextIO | None = None) -> None:
    """One line per step, with the time since the run began: the long runs show where they are
    (on stdout unless ``file`` says otherwise)."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=file or sys.stdout, flush=True)


def percentile(values: Iterable[float], fraction: float) -> float:
    """Nearest-rank percentile; NaN for no values, so that a scenario that delivered nothing shows."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def median(values: Iterable[float]) -> float:
    """The middle value (the upper one of an even count, as ``percentile(values, 0.5)``)."""
    return percentile(values, 0.5)


@dataclass(frozen=True)
class Target:
    """The goal for one row: ``ratio`` compares ours/other, ``value`` bounds ours itself."""

    kind: str  # "ratio" | "value"
    op: str  # ">=" | "<="
    bound: float

    def met(self, ours: float, ratio: float | None) -> bool | None:
        measured = ours if self.kind == "value" else ratio
        if measured is None or measured != measured:  # no comparison value, or NaN
            return None
        return measured >= self.bound if self.op == ">=" else measured <= self.bound

    def text(self) -> str:
        symbol = "≥" if self.op == ">=" else "≤"
        if self.kind == "ratio":
            return f"{symbol} {self.bound:g}x"
        return f"{symbol} {self.bound:,.0f}" if self.bound == int(self.bound) else f"{symbol} {self.bound:g}"


def at_least(bound: float) -> Target:
    return Target("ratio", ">=", bound)


def at_most(bound: float) -> Target:
    return Target("ratio", "<=", bound)


def value_at_least(bound: float) -> Target:
    return Target("value", ">=", bound)


def value_at_most(bound: float) -> Target:
    return Target("value", "<=", bound)


class Measured(dict[str, float]):
    """A scenario's metrics (metric → value, as a plain dict reads them), each with the raw
    values it was computed from and how (``raw[metric]``, ``how[metric]``)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: dict[str, tuple[float, ...]] = {}
        self.how: dict[str, str] = {}

    def add(self, metric: str, value: float, raw: Iterable[float], how: str) -> Measured:
        self[metric] = value
        self.raw[metric] = tuple(raw)
        self.how[metric] = how
        return self


@dataclass(frozen=True)
class Result:
    """One table row. ``other`` is None where nothing comparable was measured; ``ours_raw`` and
    ``other_raw`` are the raw values each side's number was computed from (``statistic`` says how)."""

    metric: str
    ours: float
    other: float | None = None
    target: Target | None = None
    ours_raw: tuple[float, ...] = ()
    other_raw: tuple[float, ...] = ()
    statistic: str = ""

    @property
    def ratio(self) -> float | None:
        if self.other is None or self.other == 0 or self.other != self.other:
            return None
        return self.ours / self.other

    @property
    def met(self) -> bool | None:
        return self.target.met(self.ours, self.ratio) if self.target is not None else None

    def record(self, samples: Samples, other_name: str = "other") -> dict[str, Any]:
        return {
            "metric": self.metric,
            "ours": _finite(self.ours),
            "other": _finite(self.other),
            "ratio": _finite(self.ratio),
            "target": self.target.text() if self.target else None,
            "met": self.met,
            "statistic": self.statistic or None,
            "ours_samples": samples.name(f"{self.metric} / ours", self.ours_raw),
            "other_samples": samples.name(f"{self.metric} / {other_name}", self.other_raw),
        }


def _finite(value: float | None) -> float | None:
    """JSON has no NaN: a value nothing was measured for is null."""
    return None if value is None or value != value else value


def compared(metric: str, ours: Measured, other: Measured | None, key: str, target: Target | None = None) -> Result:
    """The row for ``key`` of two scenarios' measurements (``other`` None: ours alone)."""
    return Result(
        metric,
        ours[key],
        other[key] if other is not None else None,
        target,
        ours.raw.get(key, ()),
        other.raw.get(key, ()) if other is not None else (),
        ours.how.get(key, ""),
    )


@dataclass
class Samples:
    """Raw values of a record, each list stored once (a p50 row and a p99 row share theirs)."""

    named: dict[str, list[float]] = field(default_factory=dict)
    _seen: dict[tuple[float, ...], str] = field(default_factory=dict)

    def name(self, label: str, raw: tuple[float, ...]) -> str | None:
        if not raw:
            return None
        if raw not in self._seen:
            self._seen[raw] = label
            self.named[label] = [float(f"{value:.6g}") for value in raw]
        return self._seen[raw]


def number(value: float | None) -> str:
    """A table's number: thousands separated, two decimals below 100, one below 1,000."""
    if value is None or value != value:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.1f}"


def _verdict(met: bool | None) -> str:
    return "-" if met is None else ("yes" if met else "NO")


def markdown_table(rows: list[dict[str, Any]], other_name: str) -> str:
    """The table from JSON records (the same function renders the console and the README)."""
    lines = [
        f"| metric | ours | {other_name} | ratio | target | met? | from |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for row in rows:
        ratio = row["ratio"]
        lines.append(
            f"| {row['metric']} | {number(row['ours'])} | {number(row['other'])} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | {row['target'] or '-'} | {_verdict(row['met'])} | "
            f"{row.get('statistic') or '-'} |"
        )
    return "\n".join(lines)


def _run(command: list[str]) -> str:
    """The first line a command prints (``java -version`` prints on stderr), or "unavailable"."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if done.returncode == 0 and lines else "unavailable"


def _mount_of(path: Path) -> tuple[str, str, str]:
    """(mount point, device, filesystem type) holding ``path``, from /proc/self/mounts."""
    best = ("/", "?", "?")
    resolved = str(path.resolve())
    for line in Path("/proc/self/mounts").read_text().splitlines():
        device, point, fstype, *_ = line.split()
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, device, fstype)
    return best


def disk(path: Path) -> dict[str, Any]:
    """The disk under ``path``: mount, device, filesystem, and what the kernel says of the device."""
    point, device, fstype = _mount_of(path)
    facts: dict[str, Any] = {"path": str(path), "mount": point, "device": device, "filesystem": fstype}
    block = Path("/sys/class/block") / Path(device).name
    if block.exists():
        queue = block / "queue" if (block / "queue").exists() else block.resolve().parent / "queue"
        for name in ("rotational", "logical_block_size"):
            if (queue / name).exists():
                facts[name] = (queue / name).read_text().strip()
        for name in ("model", "vendor"):
            source = block / "device" / name
            if source.exists():
                facts[name] = source.read_text().strip()
    return facts


_DAMON = Path("/sys/kernel/mm/damon/admin/kdamonds")


def memory() -> dict[str, Any]:
    """The machine's memory and what reclaims it behind the processes' backs: a host that pages
    out memory unused for a while (DAMON's ``pageout`` scheme) makes the next touch of it (a
    page cache's file, a library's code) a fault that reads it back."""
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
    facts: dict[str, Any] = {
        "total MiB": int(meminfo["MemTotal"].split()[0]) // 1024,
        "swap MiB": int(meminfo.get("SwapTotal", "0 kB").split()[0]) // 1024,
    }
    hugepages = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if hugepages.exists():
        facts["transparent hugepages"] = re.sub(r".*\[(\w+)\].*", r"\1", hugepages.read_text().strip())
    reclaim = []
    for scheme in sorted(_DAMON.glob("[0-9]*/contexts/[0-9]*/schemes/[0-9]*")):
        context, kdamond = scheme.parents[1], scheme.parents[3]
        if (scheme / "action").read_text().strip() == "pageout" and (kdamond / "state").read_text().strip() == "on":
            aggregate_us = int((context / "monitoring_attrs/intervals/aggr_us").read_text())
            min_age = int((scheme / "access_pattern/age/min").read_text())
            reclaim.append(f"DAMON pageout of memory unused for {min_age * aggregate_us / 1e6:g} s")
    facts["reclaim"] = "; ".join(reclaim) or "none seen"
    return facts


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "node": _run(["node", "--version"])}
    versions["java"] = _run(["java", "-version"])
    for package in _PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    reference = REPO / "tests/conformance/node_modules/@durable-streams/server/package.json"
    if reference.exists():
        versions["@durable-streams/server"] = json.loads(reference.read_text())["version"]
    return versions


def _git() -> dict[str, Any]:
    commit = _run(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    changed = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    return {"commit": commit, "uncommitted changes": sorted(line[3:] for line in changed)}


def conditions(work_dir: Path) -> dict[str, Any]:
    """Where and when the run happened: what a reader needs to weigh its numbers."""
    cores = os.cpu_count()
    return {
        "cores": cores,
        "cores usable by this process": len(os.sched_getaffinity(0)),
        "network": f"loopback only ({LOOPBACK}): servers, load generators and Spark on this machine",
        "disk": disk(work_dir),
        "memory": memory(),
        "load average at start (1, 5, 15 min)": [round(load, 2) for load in _LOAD_AT_START],
        "load average at end (1, 5, 15 min)": [round(load, 2) for load in os.getloadavg()],
        "platform": platform.platform(),
        "versions": _versions(),
        "git": _git(),
        "started": _STARTED_AT.isoformat(timespec="seconds"),
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The verdict of a record: the rows with a target, those met and those missed (named)."""
    targeted = [row for row in rows if row["target"] is not None]
    return {
        "targets": len(targeted),
        "met": sum(1 for row in targeted if row["met"] is True),
        "missed": [row["metric"] for row in targeted if row["met"] is False],
        "not measured": [row["metric"] for row in targeted if row["met"] is None],
    }


def _one_line_numbers(text: str) -> str:
    """JSON with each list of numbers on one line (the raw samples stay readable in a diff)."""
    number = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
    pattern = re.compile(rf"\[\s*({number}(?:,\s*{number})*)\s*\]")
    return pattern.sub(lambda match: "[" + ", ".join(re.split(r",\s*", match.group(1))) + "]", text)


def report(
    stem: str,
    section: str | None,
    title: str,
    other_name: str,
    results: list[Result],
    settings: dict[str, Any],
    kind: str | None = None,
    work_dir: Path | None = None,
) -> Path:
    """Print the table and write the run's JSON record; returns its path.

    ``section`` names the README block the record fills: None for partial runs (``--only``),
    which are never a run of record. A run of record (a section, not ``settings["quick"]``)
    goes to ``results/<stem>.json``, any other run to ``results/scratch/<stem>.json``.
    ``kind`` describes the run in the README; ``work_dir`` is where the servers kept their
    data (the disk the record names; the temporary directory's by default).
    """
    samples = Samples()
    rows = [result.record(samples, other_name) for result in results]
    print()
    print(markdown_table(rows, other_name))
    print("\nratio = ours / " + other_name + "; for ms, s and MiB lower is better, for rates higher is better.")
    quick = bool(settings.get("quick"))
    of_record = section is not None and not quick
    record = {
        "section": section,
        "title": title,
        "other": other_name,
        "of_record": of_record,
        "quick": quick,
        "kind": kind,
        "conditions": conditions(work_dir or Path(os.environ.get("TMPDIR", "/tmp"))),
        "settings": settings,
        "summary": summary(rows),
        "rows": rows,
        "samples": samples.named,
    }
    folder = RESULTS_DIR if of_record else SCRATCH_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(_one_line_numbers(json.dumps(record, indent=2, ensure_ascii=False)) + "\n")
    print(f"results: {path}" + ("" if of_record else " (not a run of record: scratch)"))
    return path
