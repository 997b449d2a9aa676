"""The documentation site's claims that name code: every file a page names exists.

``docs/`` names the tests that prove its claims (the fault model's table) and the modules where a
mechanism lives; a renamed or deleted file would leave a claim without its proof. ``make docs``
checks the links between pages (``mkdocs build --strict``); this checks the names of files."""

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
