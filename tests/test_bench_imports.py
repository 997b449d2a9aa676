"""Every benchmark script imports (``bench/`` borrows the suite's helpers, ``servers`` and
``cluster_support``: a helper renamed in the suite must not break a benchmark unseen)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_benchmark_script_imports() -> None:
    names = sorted(path.stem for path in (REPO / "bench").glob("*.py"))
    assert len(names) > 20
    code = (
        "import importlib, sys; sys.path[:0] = ['tests', 'bench']\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
