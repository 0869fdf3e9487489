"""The layering rules of docs/ARCHITECTURE.md, checked on the source tree.

Every import of a `dledger` module counts: at module level, inside functions and under
`TYPE_CHECKING` alike (a type-only import is still a dependency, and a cycle of them
still means two modules that cannot be understood apart).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "dledger"
GENERATED = PACKAGE / "proto"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

COMPILED = ("dledger._store", "dledger._native", "dledger._store_py")
"""The compiled core, the module that chooses it and its pure-Python twin."""

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "dledger.raft": (
        "dledger.store",
        "dledger.transport",
        "dledger.node",
        "dledger.server",
        "dledger.client",
        "dledger.cli",
        "dledger.spark",
        *COMPILED,
    ),
    "dledger.store": (
        "dledger.raft",
        "dledger.node",
        "dledger.transport",
        "dledger.client",
        "dledger.cli",
        "dledger.spark",
    ),
    "dledger.statemachine": (
        "dledger.store",
        "dledger.transport",
        "dledger.node",
        "dledger.server",
        "dledger.client",
        "dledger.cli",
        "dledger.spark",
        *COMPILED,
    ),
    "dledger.kv": (
        "dledger.store",
        "dledger.raft",
        "dledger.transport",
        "dledger.node",
        "dledger.server",
        "dledger.client",
        "dledger.cli",
        "dledger.spark",
        *COMPILED,
    ),
    "dledger.node": (  # node, node_store, node_status
        "dledger.transport.grpc",
        "dledger.transport.ledger_service",
        "dledger.transport.service_core",
        "dledger.server",
        "dledger.client",
        "dledger.cli",
        "dledger.spark",
        *COMPILED,
    ),
    "dledger.metrics": ("dledger.node", "dledger.transport", "dledger.client", "dledger.cli", "dledger.spark"),
    "dledger.transport": (
        "dledger.store",
        "dledger.node",
        "dledger.server",
        "dledger.client",
        "dledger.cli",
        "dledger.spark",
        *COMPILED,
    ),
    "dledger.client": (
        "dledger.store",
        "dledger.raft",
        "dledger.node",
        "dledger.server",
        "dledger.cli",
        "dledger.spark",
        *COMPILED,
    ),
    "dledger.embedded": (
        "dledger.raft",
        "dledger.node",
        "dledger.transport",
        "dledger.client",
        "dledger.cli",
        "dledger.spark",
        *COMPILED,
    ),
    "dledger.security": (
        "dledger.store",
        "dledger.raft",
        "dledger.node",
        "dledger.transport",
        "dledger.server",
        "dledger.client",
        "dledger.cli",
        "dledger.spark",
        *COMPILED,
    ),
    "dledger.timeindex": (
        "dledger.store",
        "dledger.raft",
        "dledger.node",
        "dledger.transport",
        "dledger.server",
        "dledger.client",
        "dledger.cli",
        "dledger.spark",
        *COMPILED,
    ),
    "dledger.spark": (*COMPILED,),
    "dledger.cli": (*COMPILED,),
}
"""Module prefix -> module prefixes it must not import (a prefix `dledger.node` also
covers `dledger.node_store` and `dledger.node_status`, as `node*` in the rules)."""

LEAVES = (
    "dledger.codes",
    "dledger.entry",
    "dledger.clock",
    "dledger.columns",
    "dledger.config",
    "dledger.config_bounds",
    "dledger.service_thread",
    "dledger.allocator",
    "dledger.node_status",
)
"""Modules every layer may use; they import no other `dledger` module but leaves."""

CORE_MAY_IMPORT = ("dledger.codes", "dledger.entry")
"""The compiled core (and its twin) imports only these leaf modules of the package."""

COMPILED_IMPORTERS = ("dledger.store", "dledger.quota", "dledger.record", "dledger.checksum", *COMPILED)
"""Only these may import the compiled core."""


@dataclass(frozen=True)
class Source:
    module: str
    path: Path

    @property
    def lines(self) -> list[str]:
        return self.path.read_text().splitlines()


def sources() -> list[Source]:
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".pyx", ".pxi", ".pxd") or GENERATED in path.parents:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if path.suffix in (".pxi", ".pxd"):  # included into the one compiled module
            parts = ["dledger", "_store"]
        found.append(Source(".".join(parts), path))
    return found


def _is_module(name: str) -> bool:
    base = PACKAGE.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or base.with_suffix(".pyx").exists() or (base / "__init__.py").exists()


_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+(dledger[\w.]*)\s+c?import\s+([\w, ]+)|c?import\s+(dledger[\w.]*))", re.M)


def imports_of(source: Source) -> set[str]:
    """The `dledger` modules `source` imports (`from dledger.x import y` names module
    `dledger.x.y` when that is a module, else `dledger.x`)."""
    found: set[str] = set()

    def add_from(base: str, names: list[str]) -> None:
        for name in names:
            candidate = f"{base}.{name}"
            found.add(candidate if _is_module(candidate) else base)

    if source.path.suffix == ".py":
        for node in ast.walk(ast.parse(source.path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name.startswith("dledger"))
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dledger"):
                add_from(node.module, [alias.name for alias in node.names])
    else:
        for match in _CYTHON_IMPORT.finditer(source.path.read_text()):
            if match.group(1):
                add_from(match.group(1), [n.strip() for n in match.group(2).split(",") if n.strip()])
            else:
                found.add(match.group(3))
    found.discard(source.module)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the `dledger` modules it imports (the compiled module's includes merged)."""
    graph: dict[str, set[str]] = {}
    for source in sources():
        graph.setdefault(source.module, set()).update(imports_of(source))
    return graph


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".") or module.startswith(prefix + "_")


def test_the_checker_sees_imports() -> None:
    graph = import_graph()
    assert "dledger.raft.core" in graph and "dledger.store.mmap_store" in graph
    assert "dledger.raft.member_state" in graph["dledger.raft.core"]
    assert "dledger.codes" in graph["dledger._store"]  # a Cython import


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_only_what_they_may(layer: str) -> None:
    broken = [
        f"{source.module} imports {target}"
        for source in sources()
        if _under(source.module, layer)
        for target in sorted(imports_of(source))
        if target not in LEAVES and any(_under(target, banned) for banned in FORBIDDEN[layer])
    ]
    assert broken == []


def test_leaves_import_only_leaves() -> None:
    graph = import_graph()
    broken = [f"{leaf} imports {target}" for leaf in LEAVES for target in sorted(graph[leaf]) if target not in LEAVES]
    assert broken == []


def test_only_the_store_reaches_the_compiled_core() -> None:
    broken = [
        f"{source.module} imports {target}"
        for source in sources()
        if not any(_under(source.module, allowed) for allowed in COMPILED_IMPORTERS)
        for target in sorted(imports_of(source))
        if any(_under(target, core) for core in ("dledger._store", "dledger._native"))
    ]
    assert broken == []


@pytest.mark.parametrize("layer", ["dledger.spark", "dledger.cli"])
def test_tools_reach_storage_only_through_the_public_api(layer: str) -> None:
    broken = [
        f"{source.module} imports {target}"
        for source in sources()
        if _under(source.module, layer)
        for target in sorted(imports_of(source))
        if target.startswith("dledger.store.")
    ]
    assert broken == []


def test_the_compiled_core_imports_only_leaf_modules() -> None:
    broken = [
        f"{source.module} imports {target}"
        for source in sources()
        if _under(source.module, "dledger._store")
        for target in sorted(imports_of(source))
        if not _under(target, "dledger._store") and target not in CORE_MAY_IMPORT
    ]
    assert broken == []


IO_MODULES = ("time", "threading", "socket", "os", "select", "subprocess", "mmap", "grpc", "asyncio")


def test_raft_decisions_do_no_io() -> None:
    """`dledger/raft/` takes `now_ms` and requests and returns decisions: no clock,
    threads, files or sockets inside (the deterministic simulation depends on it)."""
    broken = []
    for source in sources():
        if not _under(source.module, "dledger.raft"):
            continue
        for node in ast.walk(ast.parse(source.path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            broken += [f"{source.module} imports {n}" for n in names if n.split(".")[0] in IO_MODULES]
    assert broken == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert _cycles(import_graph()) == []


def _functions(source: Source) -> Iterator[tuple[str, int]]:
    """(name, lines) of every function, method and Cython def/cdef/cpdef in `source`."""
    if source.path.suffix == ".py":
        for node in ast.walk(ast.parse(source.path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                yield node.name, node.end_lineno - node.lineno + 1
        return
    # Cython: a function runs from its header to the last line indented deeper than it.
    lines = source.lines
    header = re.compile(r"^(\s*)(?:async\s+)?(?:def|cdef|cpdef)\s+(?:[\w\[\]*, ]+\s+)?(\w+)\s*\(")
    for start, line in enumerate(lines):
        match = header.match(line)
        if not match:
            continue
        indent, end = len(match.group(1)), start
        for k in range(start + 1, len(lines)):
            text = lines[k]
            stripped = text.lstrip()
            if stripped and len(text) - len(stripped) <= indent and not stripped.startswith(("#", ")", "]")):
                break
            if text.strip():
                end = k
        yield match.group(2), end - start + 1


def test_modules_and_functions_stay_small() -> None:
    too_long = [
        f"{s.path.relative_to(PACKAGE.parent)}: {len(s.lines)} lines"
        for s in sources()
        if len(s.lines) > MAX_MODULE_LINES
    ]
    too_long += [
        f"{s.path.relative_to(PACKAGE.parent)}: {name}() has {count} lines"
        for s in sources()
        for name, count in _functions(s)
        if count > MAX_FUNCTION_LINES
    ]
    assert too_long == []
