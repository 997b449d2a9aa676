"""What both benchmark scripts share: progress lines, the results table, the JSON record, and
the regeneration of bench/README.md's results sections from those records.

Every benchmark row is a ``Result``: our value, the value it is compared with (the reference
server, or a Spark baseline), and optionally the issue's target, which is either a ratio to
that comparison value or an absolute bound. The scripts print one table and write one JSON
file each; ``python bench/benchkit.py`` renders the JSON files into bench/README.md between
the ``<!-- results:NAME -->`` markers, so the README never drifts from a real run.

    python bench/benchkit.py [--results DIR] [--readme PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
README = BENCH_DIR / "README.md"

_STARTED = time.monotonic()


def progress(message: str, file: TextIO | None = None) -> None:
    """One line per step, with the time since the run began: the long runs show where they are
    (on stdout unless ``file`` says otherwise)."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=file or sys.stdout, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile; NaN for no values, so that a scenario that delivered nothing shows."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass(frozen=True)
class Target:
    """The issue's goal for one row: ``ratio`` compares ours/other, ``value`` bounds ours itself."""

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
        return f"{symbol} {self.bound:g}x" if self.kind == "ratio" else f"{symbol} {self.bound:,.0f}"


def at_least(bound: float) -> Target:
    return Target("ratio", ">=", bound)


def at_most(bound: float) -> Target:
    return Target("ratio", "<=", bound)


def value_at_least(bound: float) -> Target:
    return Target("value", ">=", bound)


def value_at_most(bound: float) -> Target:
    return Target("value", "<=", bound)


@dataclass(frozen=True)
class Result:
    """One table row. ``other`` is None where nothing comparable was measured."""

    metric: str
    ours: float
    other: float | None = None
    target: Target | None = None

    @property
    def ratio(self) -> float | None:
        if self.other is None or self.other == 0 or self.other != self.other:
            return None
        return self.ours / self.other

    @property
    def met(self) -> bool | None:
        return self.target.met(self.ours, self.ratio) if self.target is not None else None

    def record(self) -> dict[str, Any]:
        row = asdict(self)
        row.update(ratio=self.ratio, met=self.met, target=self.target.text() if self.target else None)
        return row


def _number(value: float | None) -> str:
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
        f"| metric | ours | {other_name} | ratio | target | met? |",
        "|---|---:|---:|---:|---|---|",
    ]
    for row in rows:
        ratio = row["ratio"]
        lines.append(
            f"| {row['metric']} | {_number(row['ours'])} | {_number(row['other'])} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | {row['target'] or '-'} | {_verdict(row['met'])} |"
        )
    return "\n".join(lines)


def report(
    stem: str,
    section: str | None,
    title: str,
    other_name: str,
    results: list[Result],
    settings: dict[str, Any],
    kind: str | None = None,
) -> Path:
    """Print the table and write ``results/<stem>.json``; returns its path.

    ``section`` names the README block the record may fill: None for partial runs (``--only``),
    which must never replace a complete table. ``kind`` describes the run in the README
    (default: full run, or quick smoke run when ``settings["quick"]``).
    """
    rows = [result.record() for result in results]
    print()
    print(markdown_table(rows, other_name))
    print("\nratio = ours / " + other_name + "; for ms and MiB lower is better, for rates higher is better.")
    record = {
        "section": section,
        "title": title,
        "other": other_name,
        "quick": bool(settings.get("quick")),
        "kind": kind,
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "settings": settings,
        "rows": rows,
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{stem}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"results: {path}")
    return path


def render(record: dict[str, Any]) -> str:
    """A README results section: when, where, with which settings, and the table."""
    settings = ", ".join(f"{key}={value}" for key, value in record["settings"].items())
    machine = record["machine"]
    kind = record.get("kind") or ("quick smoke run (small loads; not the benchmark)" if record["quick"] else "full run")
    return (
        f"{record['title']}, {kind}, {record['finished']} on {machine['cpus']} CPUs "
        f"({machine['platform']}, Python {machine['python']}); settings: {settings}.\n\n"
        + markdown_table(record["rows"], record["other"])
    )


def update_readme(results_dir: Path, readme: Path) -> list[str]:
    """Replace each ``<!-- results:SECTION -->…<!-- /results:SECTION -->`` block that has a
    record; a full run's record wins over a quick one's."""
    chosen: dict[str, dict[str, Any]] = {}
    for path in sorted(results_dir.glob("*.json")):
        record = json.loads(path.read_text())
        section = record.get("section")
        if section and (section not in chosen or (chosen[section]["quick"] and not record["quick"])):
            chosen[section] = record
    text = readme.read_text()
    updated = []
    for section, record in sorted(chosen.items()):
        name = re.escape(section)
        pattern = re.compile(rf"(<!-- results:{name} -->\n).*?(\n<!-- /results:{name} -->)", re.S)
        match = pattern.search(text)
        if match is not None:
            text = text[: match.start()] + match.group(1) + render(record) + match.group(2) + text[match.end() :]
            updated.append(section)
    readme.write_text(text)
    return updated


def main() -> None:
    parser = argparse.ArgumentParser(description="Render bench/results/*.json into bench/README.md.")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args()
    updated = update_readme(args.results, args.readme)
    if not updated:
        sys.exit(f"no results in {args.results} matched a results section of {args.readme}")
    print(f"updated {args.readme}: {', '.join(updated)}")


if __name__ == "__main__":
    main()
