"""The documentation site's checks that need no server: the files a page names exist, every page is
in the navigation, and the pages describe the present.

``docs/`` names the tests that prove its claims (the fault model's table) and the modules where a
mechanism lives; a renamed or deleted file would leave a claim without its proof. ``make docs``
checks the links between pages (``mkdocs build --strict``); this checks the names of files, that
no page is left out of the navigation (mkdocs builds it, but nobody finds it), and that no issue
number, date or session note is left in the README, the site, bench/README.md or bench's code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "server" / "durable_streams_server"
NAMED = re.compile(r"`((?:tests|server|pyspark_durable_streams|bench|storage|cluster|engine|http)/[\w/.-]+\.py)")


def test_every_file_the_docs_name_exists() -> None:
    named: dict[str, list[str]] = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for path in NAMED.findall(page.read_text()):
            named.setdefault(path, []).append(str(page.relative_to(ROOT)))
    assert len(named) >= 10, named  # (the fault model alone names more)
    missing = {
        path: pages for path, pages in named.items() if not (ROOT / path).is_file() and not (PACKAGE / path).is_file()
    }
    assert not missing, f"files named in docs/ that do not exist: {missing}"


MKDOCS = ROOT / "mkdocs.yml"
RESULTS_BLOCK = re.compile(r"<!-- (results|headline):([\w-]+) -->.*?<!-- /\1:\2 -->", re.S)
"""A block bench/render.py fills from a record: its dates and commits are the record's, not narration."""
HISTORY = {
    "an issue number": re.compile(r"\bissues? #?\d+", re.I),
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a work session": re.compile(r"\b(first|second|third|\w+th) session\b", re.I),
}


def test_every_page_is_in_the_navigation() -> None:
    nav = MKDOCS.read_text().split("\nnav:\n", 1)[1]
    listed = set(re.findall(r":\s+([\w/.-]+\.md)\s*$", nav, flags=re.MULTILINE))
    pages = {
        page.relative_to(ROOT / "docs").as_posix()
        for page in (ROOT / "docs").rglob("*.md")
        if "_hooks" not in page.parts
    }
    assert pages == listed, (
        f"not in the nav: {sorted(pages - listed)}; in the nav but missing: {sorted(listed - pages)}"
    )


def test_docs_and_bench_describe_the_present() -> None:
    """No issue numbers, dates or session notes in the README, the site, bench/README.md or bench's code
    (git keeps the history); the rendered results blocks carry their run's date and commit by design."""
    texts = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "bench").glob("*.py"))]
    texts += sorted((ROOT / "docs").rglob("*.md"))
    found = []
    for path in texts:
        text = RESULTS_BLOCK.sub("", path.read_text(encoding="utf-8"))
        for what, pattern in HISTORY.items():
            found += [f"{path.relative_to(ROOT)}: {what}: {match.group(0)!r}" for match in pattern.finditer(text)]
    assert not found, "\n".join(found)
    assert HISTORY["an issue number"].search("as issue 41 showed") and HISTORY["a date"].search("on 2026-11-24")
