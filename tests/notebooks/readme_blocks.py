"""The fenced code blocks of README.md and of the documentation site, and the plumbing that runs
them against live servers.

A block is named ``"<page>:<heading>#<n>"``: the page (``README.md``, ``docs/…``), the nearest
heading above it and its position under that heading. ``test_readme.py`` maps every name to the
test that executes (or checks) the block, and fails when a block is missing from the map, so no
example in the README or the site goes unrun.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from servers import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
DEFAULT_URL = "http://127.0.0.1:4437"
"""The server URL the README's examples use; tests substitute their live server's."""
VENV_BIN = Path(sys.executable).parent
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@dataclass(frozen=True)
class Block:
    name: str
    lang: str
    text: str
    line: int
    """Line of the page where the block's first line of code is."""
    page: str = "README.md"
    """The page, relative to the repository."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md and every page of the site (``docs/_hooks`` holds the generator, not pages)."""
    return [README, *sorted(path for path in DOCS.rglob("*.md") if "_hooks" not in path.parts)]


def doc_blocks() -> list[Block]:
    """Every fenced block of every page, in page order."""
    return [block for page in pages() for block in markdown_blocks(page)]


def markdown_blocks(path: Path = README) -> list[Block]:
    """Every fenced block of one page, in order; an unclosed fence or a fence without a language is an error."""
    blocks: list[Block] = []
    heading = "(top)"
    counts: dict[str, int] = {}
    page = path.relative_to(REPO_ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("```"):
            lang = line[3:].strip()
            assert lang, f"{page}:{index + 1}: a code block without a language"
            end = next((i for i in range(index + 1, len(lines)) if lines[i].startswith("```")), None)
            assert end is not None, f"{page}:{index + 1}: the code block is never closed"
            counts[heading] = counts.get(heading, 0) + 1
            text = "\n".join(lines[index + 1 : end]) + "\n"
            blocks.append(Block(f"{page}:{heading}#{counts[heading]}", lang, text, index + 2, page))
            index = end
        index += 1
    return blocks


def shell_env(**extra: str) -> dict[str, str]:
    """The environment README shell blocks run in: this virtualenv first on PATH, no proxies."""
    env = {key: value for key, value in os.environ.items() if key not in _PROXY_VARIABLES}
    env.pop("DURABLE_STREAMS_URL", None)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["NO_PROXY"] = "127.0.0.1,localhost"
    env["PYSPARK_PYTHON"] = sys.executable
    env.update(extra)
    return env


def run_bash(script: str, *, cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with ``bash -euo pipefail``; fails with its output when it does."""
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=shell_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, (
        f"the README's shell example failed ({result.returncode}):\n{script}\n--- stdout\n{result.stdout}"
        f"\n--- stderr\n{result.stderr}"
    )
    return result


def substitute(text: str, replacements: dict[str, str]) -> str:
    """``text`` with each key replaced; every key must occur (so a changed example cannot skip a substitution)."""
    for old, new in replacements.items():
        assert old in text, f"the README example no longer contains {old!r}:\n{text}"
        text = text.replace(old, new)
    return text


_NODE = r"[A-Za-z][\w-]*(?:\[\([^()\[\]{}\"]+\)\]|\[\"[^\"]+\"\]|\[[^()\[\]{}\"]+\]|\([^()\[\]{}\"]+\)|\{[^{}\"]+\})?"
_NODES = rf"{_NODE}(?:\s*&\s*{_NODE})*"
_EDGE = r"(?:-->|==>|-\.->|---)(?:\|[^|]+\|)?"
_MERMAID_LINE = re.compile(rf"{_NODES}(?:\s*{_EDGE}\s*{_NODES})*|subgraph\s+{_NODE}|end")


def mermaid_errors(text: str) -> list[str]:
    """Lines of a Mermaid flowchart that are not a node, an edge chain, ``subgraph`` or ``end``.

    Not a full Mermaid parser: it holds the diagrams to the subset they use, in which the usual
    mistakes (unbalanced brackets, parentheses inside a ``[label]``, a broken arrow) do not parse.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("%%")]
    errors = []
    if not lines or not re.fullmatch(r"flowchart (LR|RL|TB|TD|BT)", lines[0]):
        errors.append(f"first line must be 'flowchart <direction>', got {lines[:1]}")
    depth = 0
    for line in lines[1:]:
        line = re.sub(r"\s-\.\s[^.]+\s\.->\s", " -.-> ", line)  # -. label .-> is a labelled dotted arrow
        if not _MERMAID_LINE.fullmatch(line):
            errors.append(line)
        depth += line.startswith("subgraph") - (line == "end")
    if depth:
        errors.append("subgraph/end do not balance")
    return errors
