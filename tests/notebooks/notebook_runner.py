"""Runs the Databricks notebooks of ``notebooks/`` cell by cell, as the tests need them run.

A notebook in Databricks source format is a Python file: a ``# Databricks notebook source``
header, then cells separated by ``# COMMAND ----------`` lines. Cells whose lines all start
with ``# MAGIC`` are magic cells. The runner executes every Python cell, in order, in one
namespace holding ``spark`` (the tests' session), ``dbutils`` and ``display`` (small shims of
the Databricks globals, which exist only here). It executes no magic: ``%md`` cells are prose
(checked for being well-formed) and any other magic (``%pip``, ``%sh``, ``%run``, ``%sql`` …)
is refused, so no code in a notebook escapes the tests. That is why the notebooks install
nothing themselves (on Databricks ``%pip`` would restart Python and install from the network;
here it could only be skipped): the package is a cluster library, as their first cell says.

Around a run, the runner applies the runtime-settable settings of ``spark-defaults.conf`` to
the session (and restores them after), and checks that the session was started with the
others: the notebooks run under exactly the settings the project ships. A notebook must leave
no streaming query running; the runner stops leftovers and fails the run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from servers import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
SPARK_DEFAULTS = REPO_ROOT / "spark-defaults.conf"
HEADER = "# Databricks notebook source"
SEPARATOR = "# COMMAND ----------"
MAGIC = "# MAGIC"
PREVIEW_ROWS = 10


class NotebookError(AssertionError):
    """A notebook is malformed, a cell failed, or it misused the Databricks shims."""


@dataclass(frozen=True)
class Cell:
    number: int
    """1-based position in the notebook."""
    line: int
    """Line of the file where the cell's first line is."""
    kind: str
    """``python`` or ``md``."""
    text: str
    """Python source, or for ``md`` the markdown without the ``# MAGIC`` prefixes and ``%md``."""


def parse_notebook(path: Path) -> list[Cell]:
    """The cells of a Databricks source notebook; raises ``NotebookError`` for anything the runner cannot run."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != HEADER:
        raise NotebookError(f"{path.name}: the first line must be {HEADER!r}")
    chunks: list[tuple[int, list[str]]] = [(2, [])]
    for number, line in enumerate(lines[1:], start=2):
        if line.rstrip() == SEPARATOR:
            chunks.append((number + 1, []))
        else:
            chunks[-1][1].append(line)
    cells = []
    for index, (start, body) in enumerate(chunks, start=1):
        while body and not body[0].strip():
            body.pop(0)
            start += 1
        while body and not body[-1].strip():
            body.pop()
        if not body:
            raise NotebookError(f"{path.name}: cell {index} (line {start}) is empty")
        cells.append(_cell(path, index, start, body))
    return cells


def _cell(path: Path, index: int, start: int, body: list[str]) -> Cell:
    where = f"{path.name}: cell {index} (line {start})"
    magic_lines = [line.startswith(MAGIC) for line in body]
    if not magic_lines[0]:
        if any(magic_lines):
            raise NotebookError(f"{where}: a '{MAGIC}' line inside a Python cell would be a mere comment")
        return Cell(index, start, "python", "\n".join(body))
    if not all(magic_lines):
        raise NotebookError(f"{where}: every line of a magic cell must start with '{MAGIC}'")
    text = [line[len(MAGIC) :] for line in body]
    if any(line and not line.startswith(" ") for line in text):
        raise NotebookError(f"{where}: '{MAGIC}' must be followed by a space or the end of the line")
    text = [line[1:] for line in text]
    command = text[0].split(maxsplit=1)[0] if text[0].strip() else ""
    if command != "%md":
        raise NotebookError(
            f"{where}: magic {command!r} is not executed by the test runner (only Python cells and %md prose are); "
            "notebooks install their package as a cluster library and call the CLI through Python"
        )
    markdown = "\n".join([text[0][len("%md") :].strip(), *text[1:]]).strip()
    if not markdown:
        raise NotebookError(f"{where}: an empty %md cell")
    if len(re.findall(r"^```", markdown, flags=re.MULTILINE)) % 2:
        raise NotebookError(f"{where}: an unclosed ``` code fence in the markdown")
    return Cell(index, start, "md", markdown)


# -- the Databricks globals ---------------------------------------------------------------------


class Widgets:
    """``dbutils.widgets``: declared defaults, overridden by the test (values are strings, as on Databricks)."""

    def __init__(self, overrides: Mapping[str, str]) -> None:
        for name, value in overrides.items():
            if not isinstance(value, str):
                raise NotebookError(f"widget override {name}={value!r}: widget values are strings")
        self._overrides = dict(overrides)
        self.values: dict[str, str] = {}

    def text(self, name: str, defaultValue: str, label: str | None = None) -> None:
        self._declare(name, defaultValue, None)

    def dropdown(self, name: str, defaultValue: str, choices: Sequence[str], label: str | None = None) -> None:
        if defaultValue not in choices:
            raise NotebookError(f"widget {name!r}: default {defaultValue!r} is not one of {list(choices)}")
        self._declare(name, defaultValue, list(choices))

    def get(self, name: str) -> str:
        if name not in self.values:
            raise NotebookError(f"widget {name!r} is read before it is declared")
        return self.values[name]

    def _declare(self, name: str, default: str, choices: list[str] | None) -> None:
        if name in self.values:
            raise NotebookError(f"widget {name!r} is declared twice")
        value = self._overrides.get(name, default)
        if choices is not None and value not in choices:
            raise NotebookError(f"widget {name!r}: {value!r} is not one of {choices}")
        self.values[name] = value

    def check_overrides_used(self) -> None:
        unknown = sorted(set(self._overrides) - set(self.values))
        if unknown:
            raise NotebookError(f"overrides for widgets the notebook does not declare: {unknown}")


@dataclass
class DbUtils:
    widgets: Widgets


@dataclass(frozen=True)
class Displayed:
    cell: int
    value: Any
    rows: list[Row] | None
    """The collected rows when ``value`` is a (batch) DataFrame."""


@dataclass
class Display:
    """``display(...)``: collects what a notebook shows, and prints a preview into the test's output."""

    shown: list[Displayed] = field(default_factory=list)
    cell: int = 0

    def __call__(self, value: Any) -> None:
        rows = None
        if isinstance(value, DataFrame):
            if value.isStreaming:
                raise NotebookError(
                    f"cell {self.cell}: display() of a streaming DataFrame starts a query that never ends; "
                    "write the stream with a terminating trigger and display the result"
                )
            rows = value.collect()
            print("\n".join(str(row) for row in rows[:PREVIEW_ROWS]), f"({len(rows)} rows)")
        else:
            print(repr(value))
        self.shown.append(Displayed(self.cell, value, rows))


@dataclass
class NotebookRun:
    path: Path
    cells: list[Cell]
    namespace: dict[str, Any]
    displays: list[Displayed]
    widgets: dict[str, str]

    @property
    def tables(self) -> list[list[Row]]:
        """The rows of every DataFrame the notebook displayed, in order."""
        return [shown.rows for shown in self.displays if shown.rows is not None]


# -- running ------------------------------------------------------------------------------------


def read_spark_defaults(path: Path = SPARK_DEFAULTS) -> dict[str, str]:
    """``key value`` lines, as Spark reads them (``#`` starts a comment line)."""
    settings: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parts = stripped.split(None, 1)
        if len(parts) != 2 or not parts[0].startswith("spark."):
            raise NotebookError(f"{path.name}:{number}: expected 'spark.<key> <value>', got {line!r}")
        if parts[0] in settings:
            raise NotebookError(f"{path.name}:{number}: {parts[0]} is set twice")
        settings[parts[0]] = parts[1]
    return settings


@contextmanager
def spark_defaults_applied(spark: SparkSession) -> Iterator[dict[str, str]]:
    """The session under ``spark-defaults.conf``: runtime settings set (restored after), static ones checked."""
    settings = read_spark_defaults()
    previous: dict[str, str | None] = {}
    try:
        for key, value in settings.items():
            if spark.conf.isModifiable(key):
                previous[key] = spark.conf.get(key, None)
                spark.conf.set(key, value)
            elif spark.sparkContext.getConf().get(key) != value:
                raise NotebookError(
                    f"the SparkSession was started without {key}={value} from spark-defaults.conf "
                    "(a static setting: it cannot be changed on a running session)"
                )
        yield settings
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def run_notebook(notebook: str | Path, spark: SparkSession, widgets: Mapping[str, str] | None = None) -> NotebookRun:
    """Execute every cell of ``notebook`` (a name in ``notebooks/``, or a path) in order.

    ``widgets`` override the defaults the notebook declares.
    """
    path = NOTEBOOKS / notebook
    cells = parse_notebook(path)
    shims = Widgets(widgets or {})
    display = Display()
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "spark": spark,
        "dbutils": DbUtils(shims),
        "display": display,
    }
    running_before = {query.id for query in spark.streams.active}
    with spark_defaults_applied(spark):
        try:
            for cell in cells:
                if cell.kind != "python":
                    continue
                display.cell = cell.number
                # Padding keeps tracebacks pointing at the notebook's own line numbers.
                code = compile("\n" * (cell.line - 1) + cell.text, str(path), "exec")
                started_at = time.monotonic()
                try:
                    exec(code, namespace)
                except Exception as exc:
                    raise NotebookError(f"{path.name}: cell {cell.number} (line {cell.line}) failed: {exc!r}") from exc
                print(f"[{path.name}: cell {cell.number} took {time.monotonic() - started_at:.1f}s]")
        finally:
            started = [query for query in spark.streams.active if query.id not in running_before]
            for query in started:
                query.stop()
            leftovers = [query.name or str(query.id) for query in started]
        if leftovers:
            raise NotebookError(f"{path.name} left streaming queries running: {leftovers}")
    shims.check_overrides_used()
    return NotebookRun(path, cells, namespace, display.shown, dict(shims.values))
