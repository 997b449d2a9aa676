"""Render the benchmarks' JSON records into bench/README.md, so the README never drifts from a run.

Each record (``bench/results/<stem>.json``, written by ``benchkit.report``) names a README
section. This script rewrites, for every section that has a record:

* the block between ``<!-- results:SECTION -->`` and ``<!-- /results:SECTION -->``: the
  headline, the run's conditions and settings, a link to the raw record, and the table;
* the block between ``<!-- headline:SECTION -->`` and ``<!-- /headline:SECTION -->`` (the
  README's summary at the top): the headline alone.

The headline is made from the table's rows: how many targets were met, and each miss by name
with its ratio (or value) and target. A section without a record keeps its text. Where two
records fill one section, the one that finished last wins.

    python bench/render.py [--results DIR] [--readme PATH] [--check]

``--results bench/results/scratch --readme /tmp/README.md`` renders smoke runs into a copy;
``--check`` renders nothing and fails if the README differs from what its records render.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from benchkit import README, RESULTS_DIR, markdown_table, number, summary


def _measured(row: dict[str, Any]) -> str:
    """A row's number against its target: the ratio for ratio targets, else our value."""
    if row["target"] and row["target"].endswith("x") and row["ratio"] is not None:
        return f"{row['ratio']:.2f}x"
    return "nothing measured" if row["ours"] is None else number(row["ours"])


def headline(record: dict[str, Any]) -> str:
    """One sentence that says what the table shows: targets met out of targets set, misses named."""
    rows = record["rows"]
    verdict = summary(rows)
    when = record["conditions"]["finished"][:10]
    commit = record["conditions"]["git"]["commit"][:7]
    name = record["title"].split(" (")[0]  # (the title's parenthesis describes the sides; the table has them)
    what = name if record.get("of_record") else f"{name} (smoke run, not a measurement)"
    if not verdict["targets"]:
        told = "no row has a target"
    else:
        told = f"{verdict['met']} of {verdict['targets']} targets met"
        missed = [row for row in rows if row["met"] is False]
        if missed:
            told += "; missed: " + "; ".join(
                f"{row['metric']} at {_measured(row)} (target {row['target']})" for row in missed
            )
        unmeasured = [row["metric"] for row in rows if row["target"] and row["met"] is None]
        if unmeasured:
            told += "; not measured: " + "; ".join(unmeasured)
    return f"{what}, {when}, commit `{commit}`: {told}."


def _conditions(record: dict[str, Any]) -> str:
    facts = record["conditions"]
    disk = facts["disk"]
    versions = facts["versions"]
    load_start = ", ".join(f"{load:g}" for load in facts["load average at start (1, 5, 15 min)"])
    load_end = ", ".join(f"{load:g}" for load in facts["load average at end (1, 5, 15 min)"])
    changed = facts["git"]["uncommitted changes"]
    return (
        f"Conditions: {facts['cores']} cores ({facts['cores usable by this process']} usable by the run), "
        f"{facts['network']}; disk: `{disk['path']}` on {disk['device']} ({disk['filesystem']}, "
        f"rotational flag {disk.get('rotational', '?')}), shared with whatever else runs;{_memory(facts)} load average "
        f"{load_start} at the start, {load_end} at the end. "
        f"Commit `{facts['git']['commit'][:12]}`"
        + (f" with {len(changed)} uncommitted file(s)" if changed else "")
        + f"; {facts['started']} to {facts['finished']}; `{facts['command']}`. Versions: "
        + ", ".join(f"{name} {version}" for name, version in versions.items())
        + "."
    )


def _memory(facts: dict[str, Any]) -> str:
    memory = facts.get("memory")  # (records before it have none)
    if memory is None:
        return ""
    swap = f"{memory['swap MiB']:,} MiB of swap" if memory["swap MiB"] else "no swap"
    hugepages = memory.get("transparent hugepages", "?")
    return (
        f" memory: {memory['total MiB']:,} MiB, {swap}, transparent hugepages {hugepages}, the host's reclaim: "
        f"{memory['reclaim']};"
    )


def carried_table(table: dict[str, Any]) -> str:
    """A table a record carries whole (``tables``: its caption, columns, ``align`` as one ``l`` or
    ``r`` per column, and rows of cells the benchmark formatted): for results that are not rows of
    ours against another (``bench/cluster_bench.py``)."""
    rules = ["---:" if side == "r" else "---" for side in table["align"]]
    lines = ["| " + " | ".join(table["columns"]) + " |", "|" + "|".join(rules) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in table["rows"]]
    return f"{table['caption']}\n\n" + "\n".join(lines)


def render_section(record: dict[str, Any], source: str) -> str:
    settings = ", ".join(f"{key}={value}" for key, value in record["settings"].items())
    kind = record.get("kind") or ("run of record" if record.get("of_record") else "smoke run (small loads)")
    tables = record.get("tables")
    body = "\n\n".join(map(carried_table, tables)) if tables else markdown_table(record["rows"], record["other"])
    return (
        f"**{headline(record)}**\n\n"
        f"{record['title']}, {kind}. {_conditions(record)} Settings: {settings}. "
        f"Raw samples, ratios and verdicts: [`{source}`]({source}).\n\n" + body
    )


def _latest(results_dir: Path) -> dict[str, tuple[dict[str, Any], Path]]:
    chosen: dict[str, tuple[dict[str, Any], Path]] = {}
    for path in sorted(results_dir.glob("*.json")):
        record = json.loads(path.read_text())
        section = record.get("section")
        if not section or "conditions" not in record:
            continue
        if section not in chosen or record["conditions"]["finished"] > chosen[section][0]["conditions"]["finished"]:
            chosen[section] = (record, path)
    return chosen


def _replace(text: str, tag: str, section: str, body: str) -> tuple[str, bool]:
    name = re.escape(section)
    pattern = re.compile(rf"(<!-- {tag}:{name} -->\n).*?(\n<!-- /{tag}:{name} -->)", re.S)
    match = pattern.search(text)
    if match is None:
        return text, False
    return text[: match.start()] + match.group(1) + body + match.group(2) + text[match.end() :], True


def rendered(results_dir: Path, readme: Path) -> tuple[str, list[str]]:
    """The README with every section that has a record rendered, and those sections' names."""
    text = readme.read_text()
    updated = []
    for section, (record, path) in sorted(_latest(results_dir).items()):
        try:
            source = path.resolve().relative_to(readme.resolve().parent).as_posix()
        except ValueError:
            source = str(path)
        text, filled = _replace(text, "results", section, render_section(record, source))
        text, headed = _replace(text, "headline", section, f"- {headline(record)}")
        if filled or headed:
            updated.append(section)
    return text, updated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="records to render (default: of record)")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--check", action="store_true", help="fail if the README is not what its records render")
    args = parser.parse_args()
    text, updated = rendered(args.results, args.readme)
    if args.check:
        if text != args.readme.read_text():
            sys.exit(f"{args.readme} differs from what {args.results} renders: run bench/render.py")
        print(f"{args.readme} matches {args.results} ({', '.join(updated) or 'no records'})")
        return
    if not updated:
        sys.exit(f"no record in {args.results} matched a section of {args.readme}")
    args.readme.write_text(text)
    print(f"updated {args.readme}: {', '.join(updated)}")


if __name__ == "__main__":
    main()
