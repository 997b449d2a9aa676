"""The configuration file (``--config server.toml``): every setting under its flag's name.

A key is its flag without the dashes (``max-body-bytes = 1048576`` for ``--max-body-bytes``),
so the file, the flags, the ``DURABLE_STREAMS_*`` variables and the settings reference name a
setting the same way; there are no sections, since the settings have no hierarchy: the one table
is ``[storage-option]``, the object store's own keys and values (``--storage-option KEY=VALUE``).
Values are TOML's types: integers and floats for numbers, strings for names and paths, booleans
for the switches that take no value on the command line (``cluster = true``), arrays for the
repeatable ``allow-private-webhook-urls``, and a duration as a number in its flag's unit or a
string with a unit (``long-poll-timeout-ms = "5s"``: ``durations``).

The parser (``cli.build_parser``) is the one declaration of the settings: this module reads the
kind of each value from the parser's actions, so a flag added there is a key here by itself. An
unknown key or a value of the wrong kind is a ``ConfigFileError`` naming the file, the key's
line and the key; ``tomllib`` gives no positions, so the key's line is found in the text.
Relative paths in the file are relative to the working directory, as on the command line.
"""

from __future__ import annotations

import argparse
import difflib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .durations import FORMS, UNIT_SECONDS, Duration

NOT_IN_FILE = ("help", "config")
"""Destinations no file may set: a file naming another file would be a chain to follow."""


class ConfigFileError(ValueError):
    """The file cannot be used; the message starts ``<file>:<line>: <key>``."""


@dataclass(frozen=True)
class FileSetting:
    """One setting the file gives: the parser's destination, the key, its value (as the parser's
    own type would have made it from a flag) and the key's line in the file."""

    dest: str
    key: str
    value: object
    line: int


def file_keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The keys a file may hold, each the action of the flag of the same name."""
    return {
        action.option_strings[-1].lstrip("-"): action
        for action in parser._actions
        if action.option_strings and action.dest not in NOT_IN_FILE
    }


def read_config_file(path: Path, parser: argparse.ArgumentParser) -> dict[str, FileSetting]:
    """The file's settings by destination; ``ConfigFileError`` naming the key and its line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"--config {path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # (its message says the line and column, not the key)
        at = re.search(r"at line (\d+)", str(exc))
        line = int(at.group(1)) if at else 0
        lines = text.splitlines()
        assigned = re.match(r"\s*([\w.\"'-]+)\s*=", lines[line - 1]) if 0 < line <= len(lines) else None
        named = f" {assigned.group(1)}:" if assigned else ""
        raise ConfigFileError(f"{path}:{line}:{named} not valid TOML: {exc}") from None
    keys = file_keys(parser)
    found: dict[str, FileSetting] = {}
    for key, raw in data.items():
        line = key_line(text, key)
        action = keys.get(key)
        if action is None:
            raise ConfigFileError(f"{path}:{line}: unknown setting {key!r}{_hint(key, keys)}")
        try:
            value = file_value(action, raw)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise ConfigFileError(f"{path}:{line}: {key}: {exc}") from None
        found[action.dest] = FileSetting(action.dest, key, value, line)
    return found


def _hint(key: str, keys: Mapping[str, argparse.Action]) -> str:
    if key == "config":
        return " (a configuration file cannot name another)"
    flag_spelling = key.replace("_", "-")
    if flag_spelling in keys:
        return f" (settings are written as their flags are: {flag_spelling})"
    close = difflib.get_close_matches(key, list(keys), n=1)
    return f" (did you mean {close[0]!r}?)" if close else " (the settings are the server's flags, without the dashes)"


def file_value(action: argparse.Action, raw: object) -> object:
    """``raw`` (a TOML value) as the flag's parser would have given it; ``ValueError`` if it is
    not of the setting's kind."""
    if action.nargs == 0:  # (a switch: --cluster, --access-log …)
        if not isinstance(raw, bool):
            raise ValueError(f"must be true or false, got {raw!r}")
        return raw
    if isinstance(action, argparse._AppendAction):
        return _repeated(action, raw)
    kind = action.type
    if isinstance(kind, Duration):
        if isinstance(raw, str):
            return kind(raw)
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ValueError(f"must be a duration: {FORMS}; got {raw!r}")
        return kind.of(raw * UNIT_SECONDS[kind.unit], raw)  # (a number in the flag's own unit)
    if kind is int or kind is float:
        if isinstance(raw, bool) or not isinstance(raw, int | float) or (kind is int and isinstance(raw, float)):
            raise ValueError(f"must be {'an integer' if kind is int else 'a number'}, got {raw!r}")
        return kind(raw)
    if not isinstance(raw, str):
        raise ValueError(f"must be a string, got {raw!r}")
    if action.choices is not None and raw not in action.choices:
        raise ValueError(f"must be one of {', '.join(map(str, action.choices))}, got {raw!r}")
    return Path(raw) if kind is Path else raw


def _repeated(action: argparse.Action, raw: object) -> list[str]:
    """A repeatable flag's values: a table of ``KEY = "value"`` for ``KEY=VALUE`` flags, else an
    array of strings."""
    if action.metavar == "KEY=VALUE":
        if not isinstance(raw, dict):
            raise ValueError(f'must be a table of KEY = "value" (e.g. [{action.dest.replace("_", "-")}]), got {raw!r}')
        wrong = [name for name, value in raw.items() if not isinstance(value, str)]
        if wrong:
            raise ValueError(f"{wrong[0]} must be a string, got {raw[wrong[0]]!r}")
        return [f"{name}={value}" for name, value in raw.items()]
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ValueError(f"must be an array of strings, got {raw!r}")
    return list(raw)


def key_line(text: str, key: str) -> int:
    """The line (from 1) where the top-level ``key`` is set: ``key = …``, ``key.sub = …`` before
    the first table, or its table's header ``[key]``; the first line naming it otherwise."""
    name = rf"(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')"
    assignment = re.compile(rf"\s*{name}\s*[=.]")
    header = re.compile(rf"\s*\[\s*{name}\s*[\].]")
    in_table = False
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if header.match(line):
            return number
        if re.match(r"\s*\[", line):
            in_table = True
        elif not in_table and assignment.match(line):
            return number
    return next((number for number, line in enumerate(lines, start=1) if key in line), 1)
