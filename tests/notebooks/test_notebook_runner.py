"""The notebook runner: what it accepts, what it refuses, and the shims it provides.

The notebooks themselves are checked here too: each parses, explains itself in prose, and
declares widgets whose defaults point at a local server.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from notebook_runner import (
    HEADER,
    NOTEBOOKS,
    SEPARATOR,
    NotebookError,
    Widgets,
    parse_notebook,
    read_spark_defaults,
    run_notebook,
)
from pyspark.sql import SparkSession

EXPECTED_NOTEBOOKS = [
    "01_quickstart.py",
    "02_streaming_etl.py",
    "03_snapshots_bootstrap.py",
    "04_python_client_and_cli.py",
    "05_fork_backfill.py",
]


def notebook(tmp_path: Path, *cells: str) -> Path:
    path = tmp_path / "notebook.py"
    path.write_text(HEADER + "\n" + f"\n\n{SEPARATOR}\n\n".join(cells) + "\n", encoding="utf-8")
    return path


def test_the_notebooks_parse_and_default_to_a_local_server() -> None:
    assert sorted(path.name for path in NOTEBOOKS.glob("*.py")) == EXPECTED_NOTEBOOKS
    for name in EXPECTED_NOTEBOOKS:
        cells = parse_notebook(NOTEBOOKS / name)
        assert cells[0].kind == "md" and cells[0].text.startswith("# "), f"{name} starts with a title"
        assert sum(cell.kind == "md" for cell in cells) >= 3, f"{name} explains its steps"
        code = "\n".join(cell.text for cell in cells if cell.kind == "python")
        assert 'dbutils.widgets.text("server_url", "http://127.0.0.1:4437"' in code, name


def test_cells_and_magics(tmp_path: Path) -> None:
    cells = parse_notebook(notebook(tmp_path, "# MAGIC %md\n# MAGIC # Title\n# MAGIC\n# MAGIC text", "x = 1\n\ny = 2"))
    assert [(cell.kind, cell.text) for cell in cells] == [("md", "# Title\n\ntext"), ("python", "x = 1\n\ny = 2")]
    assert cells[1].line == 9

    refused = {
        "%pip": "# MAGIC %pip install pyspark-durable-streams",
        "%sh": "# MAGIC %sh\n# MAGIC durable-streams --help",
        "%run": "# MAGIC %run ./other",
    }
    for magic, cell in refused.items():
        with pytest.raises(NotebookError, match=f"magic '{magic}' is not executed"):
            parse_notebook(notebook(tmp_path, cell))
    malformed = {
        "x = 1\n# MAGIC %md": "inside a Python cell",
        "# MAGIC %md\ntext": "every line of a magic cell",
        "# MAGIC %md\n# MAGICtext": "followed by a space",
        "# MAGIC %md\n# MAGIC ```python\n# MAGIC x = 1": "unclosed",
        "# MAGIC %md": "empty %md",
        "": "is empty",
    }
    for cell, message in malformed.items():
        with pytest.raises(NotebookError, match=message):
            parse_notebook(notebook(tmp_path, "x = 1", cell))
    (tmp_path / "plain.py").write_text("x = 1\n")
    with pytest.raises(NotebookError, match="first line"):
        parse_notebook(tmp_path / "plain.py")


def test_widgets() -> None:
    widgets = Widgets({"rows": "5", "mode": "b"})
    widgets.text("rows", "10", "Rows")
    widgets.dropdown("mode", "a", ["a", "b"], "Mode")
    widgets.text("name", "default")
    assert (widgets.get("rows"), widgets.get("mode"), widgets.get("name")) == ("5", "b", "default")
    widgets.check_overrides_used()
    with pytest.raises(NotebookError, match="declared twice"):
        widgets.text("rows", "1")
    with pytest.raises(NotebookError, match="before it is declared"):
        widgets.get("missing")
    with pytest.raises(NotebookError, match="not one of"):
        Widgets({"mode": "c"}).dropdown("mode", "a", ["a", "b"])
    with pytest.raises(NotebookError, match="not one of"):
        Widgets({}).dropdown("mode", "c", ["a", "b"])
    with pytest.raises(NotebookError, match="strings"):
        Widgets({"rows": 5})  # type: ignore[dict-item]
    unused = Widgets({"typo": "1"})
    unused.text("rows", "1")
    with pytest.raises(NotebookError, match="typo"):
        unused.check_overrides_used()


def test_runs_cells_in_one_namespace_and_collects_displays(spark: SparkSession, tmp_path: Path) -> None:
    path = notebook(
        tmp_path,
        "# MAGIC %md\n# MAGIC # A notebook",
        'dbutils.widgets.text("rows", "3")\nrows = int(dbutils.widgets.get("rows"))',
        'display(spark.range(rows))\ndisplay({"rows": rows})\nzone = spark.conf.get("spark.sql.session.timeZone")',
    )
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        run = run_notebook(path, spark, {"rows": "4"})
        # spark-defaults.conf applies during the run, and only then.
        assert run.namespace["zone"] == read_spark_defaults()["spark.sql.session.timeZone"] == "UTC"
        assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert run.widgets == {"rows": "4"}
    assert [[row["id"] for row in rows] for rows in run.tables] == [[0, 1, 2, 3]]
    assert run.displays[1].value == {"rows": 4} and run.displays[1].cell == 3


def test_failures_name_the_cell_and_line(spark: SparkSession, tmp_path: Path) -> None:
    path = notebook(tmp_path, "x = 1", "y = 2\nraise ValueError('boom')")
    with pytest.raises(NotebookError, match=r"cell 2 \(line 6\) failed: ValueError\('boom'\)") as error:
        run_notebook(path, spark)
    assert error.value.__cause__ is not None
    assert error.value.__cause__.__traceback__ is not None
    frames = []
    traceback = error.value.__cause__.__traceback__
    while traceback is not None:
        frames.append((traceback.tb_frame.f_code.co_filename, traceback.tb_lineno))
        traceback = traceback.tb_next
    assert (str(path), 7) in frames  # tracebacks point at the notebook's own lines


def test_streams_must_end(spark: SparkSession, tmp_path: Path) -> None:
    shown = notebook(tmp_path, 'display(spark.readStream.format("rate").load())')
    with pytest.raises(NotebookError, match="streaming DataFrame"):
        run_notebook(shown, spark)
    left = notebook(
        tmp_path,
        'q = spark.readStream.format("rate").load().writeStream.format("noop")'
        f'.option("checkpointLocation", {str(tmp_path / "ckpt")!r}).start()',
    )
    with pytest.raises(NotebookError, match="left streaming queries running"):
        run_notebook(left, spark)
    assert not spark.streams.active
