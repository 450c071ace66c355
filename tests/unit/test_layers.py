"""The package's layers: every import (also one inside a function) points down or sideways, and the
packages form no circle. docs/design.md (the map of the code) draws the same layers.

A new top-level module or package must be given a layer here; a wrong-way import fails with the
importing module, the imported one and both layers named.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "reliable_kafka"

# bottom first; a group is a subpackage or a top-level module of reliable_kafka
LAYERS: list[set[str]] = [
    {"errors", "validation", "version", "jars", "security", "client_log"},  # no I/O, no tracking
    {"core", "codec"},  # the protocol's pure logic and its wire format
    {"topology", "acls"},  # a topology's names, shapes and needed permissions
    {"kafka", "broker", "offsets", "polling", "local", "config"},  # clients, admin I/O, embedded brokers, settings
    {"ops"},  # what components report (status, failures, errors, metrics) and the tools that read it
    {"lifecycle"},  # a component's run loop and signals
    {"spout", "bolt", "acker"},  # the components
    {"spark", "testing"},  # Spark jobs and the in-memory test kit, built on the components
    {"chaos", "demo", "cli", "__main__", "__init__"},  # programs, and the package's front door
]


def _group(module: str) -> str:
    """``reliable_kafka.kafka.admin`` -> ``kafka``; ``reliable_kafka`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules(package: Path) -> dict[str, Path]:
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The reliable_kafka modules ``module`` imports, wherever in the file."""
    found = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # a submodule imported by name, else a name of the module
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "reliable_kafka" or name.startswith("reliable_kafka.")}


@functools.cache
def _edges(package: Path = PACKAGE) -> list[tuple[str, str]]:
    modules = _modules(package)
    edges = []
    for module, path in sorted(modules.items()):
        for target in sorted(_imports(module, path, modules)):
            if target in modules and _group(module) != _group(target):
                edges.append((module, target))
    return edges


def _layer_of() -> dict[str, int]:
    return {group: index for index, layer in enumerate(LAYERS) for group in layer}


def test_every_module_has_a_layer():
    layer_of = _layer_of()
    missing = sorted({_group(module) for module in _modules(PACKAGE)} - set(layer_of))
    assert not missing, f"give these a layer in LAYERS (tests/unit/test_layers.py): {missing}"


def test_imports_point_down_or_sideways():
    layer_of = _layer_of()
    upward = [
        f"{source} (layer {layer_of[_group(source)]}) imports {target} (layer {layer_of[_group(target)]})"
        for source, target in _edges()
        if _group(source) in layer_of and _group(target) in layer_of
        if layer_of[_group(target)] > layer_of[_group(source)]
    ]
    assert not upward, "imports that run back up the layers:\n" + "\n".join(upward)


def test_packages_form_no_circle():
    graph: dict[str, set[str]] = {}
    for source, target in _edges():
        graph.setdefault(_group(source), set()).add(_group(target))
    circles = [group for group in graph if _reaches(graph, group, group)]
    assert not circles, f"these packages import themselves through others: {sorted(circles)}"


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        group = todo.pop()
        if group == goal:
            return True
        if group not in seen:
            seen.add(group)
            todo.extend(graph.get(group, ()))
    return False


def test_the_check_sees_a_wrong_way_import(tmp_path):
    """The checks above would notice an upward import: core importing a component."""
    fake = tmp_path / "reliable_kafka"
    (fake / "core").mkdir(parents=True)
    (fake / "spout").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "core" / "__init__.py").write_text("")
    (fake / "spout" / "__init__.py").write_text("from reliable_kafka.core import x\n")
    (fake / "core" / "x.py").write_text("def f():\n    from reliable_kafka.spout import shell\n")
    (fake / "spout" / "shell.py").write_text("")
    assert ("reliable_kafka.core.x", "reliable_kafka.spout.shell") in _edges(fake)
    graph: dict[str, set[str]] = {}
    for source, target in _edges(fake):
        graph.setdefault(_group(source), set()).add(_group(target))
    assert _reaches(graph, "core", "core")
