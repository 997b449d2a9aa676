"""The cluster in one room (``durable_streams_server/cluster/__init__.py`` states the rules):
every cluster-only module lives under ``cluster/``, nothing below imports it, only the assembly
plugs it in, and the node's process and the shard server's code never import each other.

Read from the source (its imports, resolved), so a module that breaks a rule fails here by name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "durable_streams_server"
ROOT = Path(__file__).resolve().parents[1] / "server" / PACKAGE
CLUSTER = f"{PACKAGE}.cluster"
LAYERS = ("protocol", "storage", "engine", "http")

ASSEMBLY = {
    f"{PACKAGE}.server": f"{CLUSTER}.shard",
    f"{PACKAGE}.serve": f"{CLUSTER}.shard",
    f"{PACKAGE}.cli": f"{CLUSTER}.node",
}
"""The modules outside the cluster that may import it, and which side of it each may import."""

CLUSTER_ONLY = (
    "shard_guard",
    "guard",
    "cluster_secret",
    "credential",
    "internal",
    "fork_copies",
    "fork_exports",
    "fork_export",
    "export_frames",
    "remote_streams",
    "shard_reports",
    "shard_keys",
    "paths",
    "peers",
    "reporter",
    "parent",
    "serving",
)
"""Names of the cluster-only modules (and of the modules they were before they moved in)."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str) -> Iterator[str]:
    """Every module ``module`` imports (a name imported from a package counts as its submodule
    when it is one), lazily imported ones included."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_rules_read_the_source() -> None:
    assert len(MODULES) > 150
    assert f"{CLUSTER}.shard.guard" in MODULES and f"{CLUSTER}.node.supervisor" in MODULES
    assert f"{CLUSTER}.paths" in set(_imports(f"{CLUSTER}.node.router"))  # (a relative import, resolved)


def test_no_cluster_only_module_lives_outside_the_cluster() -> None:
    outside = sorted(
        module for module in MODULES if not _within(module, CLUSTER) and module.rsplit(".", 1)[-1] in CLUSTER_ONLY
    )
    assert outside == []


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_the_cluster(layer: str) -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module in MODULES
        if _within(module, f"{PACKAGE}.{layer}")
        for target in _imports(module)
        if _within(target, CLUSTER)
    )
    assert wrong == []


def test_only_the_assembly_plugs_the_cluster_in() -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module in MODULES
        if not _within(module, CLUSTER)
        for target in _imports(module)
        if _within(target, CLUSTER) and not (module in ASSEMBLY and _within(target, ASSEMBLY[module]))
    )
    assert wrong == []


def test_the_configuration_imports_neither_the_http_layer_nor_the_cluster() -> None:
    for module in (f"{PACKAGE}.config", f"{PACKAGE}.settings"):
        imported = set(_imports(module))
        assert not any(_within(target, CLUSTER) for target in imported), module
    assert not any(_within(target, f"{PACKAGE}.http") for target in _imports(f"{PACKAGE}.config"))


@pytest.mark.parametrize(("side", "other"), [("node", "shard"), ("shard", "node")])
def test_the_node_and_the_shard_server_never_import_each_other(side: str, other: str) -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module in MODULES
        if _within(module, f"{CLUSTER}.{side}")
        for target in _imports(module)
        if _within(target, f"{CLUSTER}.{other}")
    )
    assert wrong == []


def test_what_both_sides_share_imports_neither() -> None:
    sides = (f"{CLUSTER}.node", f"{CLUSTER}.shard")
    shared = [module for module in MODULES if module.count(".") == 2 and _within(module, CLUSTER)]
    shared = [module for module in shared if module not in sides]
    assert f"{CLUSTER}.paths" in shared
    wrong = sorted(
        f"{module} -> {target}"
        for module in shared
        for target in _imports(module)
        if any(_within(target, side) for side in sides)
    )
    assert wrong == []
