"""``durable-streams-server config show``: the effective settings, as a configuration file.

Every setting is printed under its key (its flag's name, ``config_file``), with the value the
server would run with after flags, ``DURABLE_STREAMS_*`` variables, the ``--config`` file and the
defaults have been weighed, durations in their flag's unit; so the output is itself a valid
configuration file, and two ways of giving the same settings print the same text. Secrets are
masked: storage options whose names say they hold a credential (``AWS_SECRET_ACCESS_KEY``,
``AZURE_STORAGE_ACCOUNT_KEY``, ``AWS_SESSION_TOKEN`` …), a password in a URL, and the tokens and
cluster credential, of which only their presence (and the tokens' names) is said.
"""

from __future__ import annotations

import argparse
import json
import re

from .config_file import file_keys
from .settings import Settings

MASK = "********"
_SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|CREDENTIAL|SIGNATURE|SAS|KEY(?!_ID)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^/:@\s]*:)[^/@\s]+@")


def secret_name(name: str) -> bool:
    """Whether a storage option called ``name`` holds a credential (its value is then masked)."""
    return _SECRET_NAME.search(name) is not None


def _string(value: str) -> str:
    return json.dumps(_URL_PASSWORD.sub(rf"\g<1>{MASK}@", value))  # (a JSON string is a TOML basic string)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return _string(str(value))


def render(parser: argparse.ArgumentParser, args: argparse.Namespace, settings: Settings) -> str:
    """The settings ``args`` (already checked as ``settings``) give, as TOML, secrets masked."""
    lines = ["# durable-streams-server: effective settings (flags > DURABLE_STREAMS_* > --config file > defaults)"]
    auth = settings.server.auth
    if auth is not None:
        names = ", ".join(f"{grant.name} ({grant.scope})" for grant in auth.grants)
        lines.append(f"# bearer tokens: {len(auth.grants)} configured: {names}; the tokens are not shown")
    if settings.server.cluster_secret:
        lines.append("# cluster credential: given in the environment; not shown")
    tables: list[str] = []
    for key, action in file_keys(parser).items():
        value = getattr(args, action.dest)
        if action.metavar == "KEY=VALUE":  # (--storage-option: the merged options, a key given twice once)
            tables.append(f"\n[{key}]")
            for name, text in sorted(settings.server.storage_options.items()):
                tables.append(f"{json.dumps(name)} = {json.dumps(MASK) if secret_name(name) else _string(text)}")
        elif value is None:
            lines.append(f"# {key}: not set")
        else:
            lines.append(f"{key} = {_value(value)}")
    return "\n".join([*lines, *tables]) + "\n"
