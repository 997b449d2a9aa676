"""The README's Python client examples run, in order, against a live server."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from client_support import REPO_ROOT
from servers import ServerProcess

SECTION = "## Python client and command line"


def python_blocks() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert SECTION in readme, f"README.md has no {SECTION!r} section"
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) >= 3, "the client section should show its examples as ```python blocks"
    return blocks


def test_readme_examples_run(ours: ServerProcess) -> None:
    script = "\n".join(python_blocks())
    env = {**os.environ, "DURABLE_STREAMS_URL": ours.url, "NO_PROXY": "127.0.0.1"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60, check=False
    )
    assert result.returncode == 0, f"README example failed:\n{result.stderr}"
    out = result.stdout
    assert "True" in out and "live: {'id': 4}" in out and "409" in out
    assert "Gone" in out and "after the snapshot: {'op': 'set', 'v': 3}" in out and "b'{\"v\": 2}'" in out
