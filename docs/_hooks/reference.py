"""The site's generated parts, made from the code's own declarations when ``mkdocs build`` runs.

A page holds a marker ``<!-- generated:NAME -->`` where a generated part goes; this hook (listed
under ``hooks:`` in mkdocs.yml) replaces it:

* ``server-settings``: one row per option of the server's ``build_parser()``: its flag and
  choices, its environment variable, its default, and what it means. Flags, choices and defaults
  are read from the parser's actions, so a flag added to ``cli.py`` appears by itself; the
  meaning is ``server_settings.yml``'s entry for the flag where there is one, else its ``--help``.
* ``connector-options``: the source, sink and connection options of the ``durable_streams``
  format, from the option tables in ``pyspark_durable_streams/_options``; ``connector_options.yml``
  says what each means and writes its default as a user would, and that text must parse (with
  the option's own parser) to the declared default.
* ``results:NAME`` / ``headline:NAME``: the benchmark records of ``bench/results/``, rendered by
  ``bench/render.py`` (the same renderer as bench/README.md's), so no number is copied by hand.

Anything out of step (a declared option with no meaning, a meaning for a flag or option that no
longer exists, a default that does not parse to the declared one) raises ``ReferenceDrift``,
which fails the build. ``tests/test_docs_reference.py`` checks the tables against the declarations.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SERVER_NOTES = HERE / "server_settings.yml"
CONNECTOR_NOTES = HERE / "connector_options.yml"
ENV_PREFIX = "DURABLE_STREAMS_"
NONE = "\N{EN DASH}"
"""What a table shows for no default."""
MARKER = re.compile(r"<!-- generated:([\w-]+) -->")


class ReferenceDrift(ValueError):
    """The documentation and the code's declarations disagree; the message says where."""


# -- the server's settings -------------------------------------------------------------------


@contextmanager
def _without_server_environment() -> Iterator[None]:
    """The parser reads ``DURABLE_STREAMS_<FLAG>`` into its defaults: the reference shows the code's."""
    saved = {key: value for key, value in os.environ.items() if key.startswith(ENV_PREFIX)}
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


def server_settings() -> list[argparse.Action]:
    """Every option of ``build_parser()`` (``--help`` aside), in the parser's order."""
    from durable_streams_server.cli import build_parser

    with _without_server_environment():
        parser = build_parser()
    return [
        action for action in parser._actions if action.option_strings and not isinstance(action, argparse._HelpAction)
    ]


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def shown_name(action: argparse.Action) -> str:
    """The flag, with its choices as argparse shows them (``--durability {wal,delta}``) or its metavar
    (``--storage-option KEY=VALUE``)."""
    name = action.option_strings[-1]
    if action.choices:
        return name + " {" + ",".join(str(choice) for choice in action.choices) + "}"
    return name + (f" {action.metavar}" if isinstance(action.metavar, str) else "")


def help_text(action: argparse.Action) -> str:
    """Its ``--help`` text without the ``(default …)`` the parser appends."""
    return (action.help or "").removesuffix(f" (default {action.default})")


def shown_default(default: object) -> str:
    """A parser default as the reference writes it: ``on``/``off``, ``NONE`` for none, else the value."""
    if isinstance(default, bool):
        return "on" if default else "off"
    if default is None or default == []:
        return NONE
    if isinstance(default, Path) and not default.is_absolute():
        return f"`./{default}`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"


def _notes(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def server_settings_table(notes: Mapping[str, str] | None = None) -> str:
    settings = {action.option_strings[-1]: action for action in server_settings()}
    notes = _notes(SERVER_NOTES) if notes is None else notes
    stale = sorted(set(notes) - set(settings))
    if stale:
        raise ReferenceDrift(f"{SERVER_NOTES.name} describes flags build_parser() does not declare: {stale}")
    lines = ["| setting | environment variable | default | meaning |", "|---|---|---|---|"]
    for flag, action in settings.items():
        meaning = " ".join(str(notes.get(flag, help_text(action))).split())
        if not meaning:
            raise ReferenceDrift(f"{flag} has neither --help text nor an entry in {SERVER_NOTES.name}")
        lines.append(f"| `{shown_name(action)}` | `{env_name(flag)}` | {shown_default(action.default)} | {meaning} |")
    return "\n".join(lines)


# -- the connector's options -------------------------------------------------------------------


def declared_options() -> dict[str, tuple[Any, ...]]:
    """The option specs each table of the connector accepts (test hooks, named ``_…``, left out)."""
    from pyspark_durable_streams.options import CONNECTION, READ, WRITE

    def public(table: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(option for option in table if not option.name.startswith("_"))

    return {"source": public(READ), "sink": public(WRITE), "connection": public(CONNECTION)}


def connector_options_tables(notes: Mapping[str, list[dict[str, Any]]] | None = None) -> dict[str, str]:
    """One Markdown table per direction, keyed like ``declared_options()``."""
    notes = _notes(CONNECTOR_NOTES) if notes is None else notes
    tables = {}
    for table, options in declared_options().items():
        described = {entry["name"]: entry for entry in notes.get(table, [])}
        declared = {option.name: option for option in options}
        missing, stale = sorted(set(declared) - set(described)), sorted(set(described) - set(declared))
        if missing or stale:
            raise ReferenceDrift(
                f"{CONNECTOR_NOTES.name}, {table}: options declared but not described: {missing}; "
                f"described but not declared: {stale}"
            )
        lines = ["| option | default | meaning |", "|---|---|---|"]
        for entry in notes[table]:  # (the notes' order: related options together)
            option = declared[entry["name"]]
            meaning = " ".join(entry["meaning"].split())
            lines.append(f"| `{option.name}` | {_checked_default(table, option, entry)} | {meaning} |")
        tables[table] = "\n".join(lines)
    return tables


def _checked_default(table: str, option: Any, entry: Mapping[str, Any]) -> str:
    """The default as documented, after checking it is the declared one."""
    written = entry.get("default")
    if written is None:
        if option.default not in (None, "", ()):
            raise ReferenceDrift(
                f"{table} option {option.name}: documented without a default, declared {option.default!r}"
            )
        return str(entry.get("shown", NONE))
    parsed = option.parse(str(written), option.name)
    if parsed != option.default:
        raise ReferenceDrift(
            f"{table} option {option.name}: the documented default {written!r} means {parsed!r}, "
            f"the declared default is {option.default!r}"
        )
    return f"`{written}`"


# -- the benchmarks ----------------------------------------------------------------------------


def render_benchmarks(markdown: str) -> str:
    """The page with its ``results:``/``headline:`` blocks rendered from ``bench/results/``."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import render
    finally:
        sys.path.remove(str(ROOT / "bench"))
    with tempfile.TemporaryDirectory() as scratch:
        page = Path(scratch) / "page.md"
        page.write_text(markdown, encoding="utf-8")
        text, _ = render.rendered(render.RESULTS_DIR, page)
    # (a record's link names the JSON file; the site has no copy of it, so the name is shown instead)
    return re.sub(r"\[`[^`]*?(bench/results/[\w./-]+)`\]\([^)]*\)", r"`\1`", text)


# -- the hook --------------------------------------------------------------------------------


def generated(name: str) -> str:
    if name == "server-settings":
        return server_settings_table()
    if name.startswith("connector-options-"):
        return connector_options_tables()[name.removeprefix("connector-options-")]
    raise ReferenceDrift(f"no generated part is called {name!r}")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = MARKER.sub(lambda match: generated(match.group(1)), markdown)
    if "<!-- results:" in markdown or "<!-- headline:" in markdown:
        markdown = render_benchmarks(markdown)
    return markdown
