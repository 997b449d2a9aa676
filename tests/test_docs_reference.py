"""The site's generated reference pages list exactly what the code declares, with its defaults.

``docs/_hooks/reference.py`` fills the server settings and connector options pages when ``make
docs`` builds the site. These tests read the tables it generates and compare them, row by row,
with the declarations read here on their own (the server's parser, the connector's option
tables), and check that the generator refuses to build a page out of step with the code.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from durable_streams_server.cli import build_parser
from pyspark_durable_streams.options import CONNECTION, CONNECTION_OPTIONS, READ, READ_OPTIONS, WRITE, WRITE_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))
import reference  # noqa: E402  (the mkdocs hook, imported as the build imports it)

NONE = "\N{EN DASH}"


def rows(table: str) -> list[list[str]]:
    """The body cells of a generated Markdown table."""
    lines = table.splitlines()
    assert lines[1].startswith("|---"), table
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]] for line in lines[2:]]


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``DURABLE_STREAMS_*`` variable: the parser's defaults are then the code's."""
    for key in [key for key in __import__("os").environ if key.startswith("DURABLE_STREAMS_")]:
        monkeypatch.delenv(key)
    yield


def test_server_settings_table_lists_every_flag_with_its_default(
    clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABLE_STREAMS_PORT", "9999")  # the generator must show the code's default, not this
    table = {row[0].strip("`").split()[0]: row for row in rows(reference.server_settings_table())}
    monkeypatch.delenv("DURABLE_STREAMS_PORT")
    actions = {action.option_strings[-1]: action for action in build_parser()._actions if action.option_strings}
    actions.pop("--help")
    assert set(table) == set(actions), (
        f"flags missing from the page: {sorted(set(actions) - set(table))}; "
        f"on the page but not in the parser: {sorted(set(table) - set(actions))}"
    )
    assert len(table) >= 58
    for flag, (name, env, documented, meaning) in table.items():
        action = actions[flag]
        assert env == f"`DURABLE_STREAMS_{flag[2:].upper().replace('-', '_')}`", flag
        assert meaning, flag
        for choice in action.choices or ():
            assert str(choice) in name, f"{flag}: the choice {choice} is not shown"
        default = action.default
        if isinstance(default, bool):
            assert documented == ("on" if default else "off"), flag
        elif default is None or default == []:
            assert documented == NONE, flag
        elif isinstance(default, Path):
            assert Path(documented.strip("`")) == default, flag
        elif isinstance(default, int | float):
            assert float(documented.strip("`")) == default, f"{flag}: the page says {documented}, the parser {default}"
        else:
            assert documented.strip("`") == str(default), flag
    assert table["--port"][2] == "`4437`"


def test_connector_option_tables_list_every_option_with_its_default() -> None:
    tables = {direction: rows(text) for direction, text in reference.connector_options_tables().items()}
    hooks = {name for name in WRITE_OPTIONS if name.startswith("_")}  # test hooks, not for users
    declared = {"source": set(READ_OPTIONS), "sink": set(WRITE_OPTIONS) - hooks, "connection": set(CONNECTION_OPTIONS)}
    specs = {option.key: option for table in (READ, WRITE, CONNECTION) for option in table}
    for direction, table in tables.items():
        names = [row[0].strip("`").lower() for row in table]
        assert len(names) == len(set(names))
        assert set(names) == declared[direction], direction
        for name, (_, documented, meaning) in zip(names, table, strict=True):
            assert meaning, name
            option = specs[name]
            if documented.startswith("`") and option.default is not None:
                assert option.parse(documented.strip("`"), option.name) == option.default, (direction, name)
            else:
                assert option.default in (None, "", ()), (
                    f"{direction} {name}: no default shown, declared {option.default}"
                )
    defaults = {row[0]: row[1] for row in tables["source"]}
    assert defaults["`maxTriggerDelay`"] == "`15m`" and defaults["`startingOffsets`"] == "`earliest`"


def test_the_generator_refuses_pages_out_of_step_with_the_code(clean_environment: None) -> None:
    notes = yaml.safe_load(reference.SERVER_NOTES.read_text())
    with pytest.raises(reference.ReferenceDrift, match="--no-such-flag"):
        reference.server_settings_table({**notes, "--no-such-flag": "gone"})
    # A flag without a note is documented with its --help text (a new flag appears by itself).
    without_port = {flag: text for flag, text in notes.items() if flag != "--port"}
    (port,) = [row for row in rows(reference.server_settings_table(without_port)) if row[0] == "`--port`"]
    assert port[3] == "port"

    options: dict[str, list[dict[str, Any]]] = yaml.safe_load(reference.CONNECTOR_NOTES.read_text())
    missing = {**options, "sink": [entry for entry in options["sink"] if entry["name"] != "producerId"]}
    with pytest.raises(reference.ReferenceDrift, match="producerId"):
        reference.connector_options_tables(missing)
    stale = {**options, "connection": [*options["connection"], {"name": "proxy", "default": None, "meaning": "x"}]}
    with pytest.raises(reference.ReferenceDrift, match="proxy"):
        reference.connector_options_tables(stale)
    wrong = json.loads(json.dumps(options))
    (entry,) = [entry for entry in wrong["source"] if entry["name"] == "pollIntervalMs"]
    entry["default"] = "500"
    with pytest.raises(reference.ReferenceDrift, match="pollIntervalMs"):
        reference.connector_options_tables(wrong)


def test_pages_and_the_build_use_the_generator() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    assert "docs/_hooks/reference.py" in config.split("hooks:", 1)[1].split("\n\n")[0]
    settings = (ROOT / "docs" / "reference" / "server-settings.md").read_text()
    options = (ROOT / "docs" / "reference" / "connector-options.md").read_text()
    assert "<!-- generated:server-settings -->" in settings
    for direction in ("source", "sink", "connection"):
        assert f"<!-- generated:connector-options-{direction} -->" in options
    page = reference.on_page_markdown(settings, None, None, None)
    assert "`--durability {wal,delta}`" in page and "<!-- generated" not in page


def test_the_benchmarks_page_is_rendered_from_the_records() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    rendered = reference.on_page_markdown(page, None, None, None)
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        record = json.loads(path.read_text())
        if not record.get("section") or "conditions" not in record:
            continue
        section = record["section"]
        assert f"<!-- results:{section} -->" in page, f"docs/benchmarks.md has no place for {path.name}"
        assert f"`bench/results/{path.name}`" in rendered
        assert record["conditions"]["git"]["commit"][:7] in rendered
    assert "](" + str(ROOT) not in rendered  # (no link to a file outside the site)
