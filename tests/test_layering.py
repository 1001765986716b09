"""How acp's modules may import each other: no module imports one that imports it back (not even
under TYPE_CHECKING or inside a function), and the sans-I/O core imports no runtime.

Read from the source with ``ast`` (standard library only): every ``import`` and ``from ...
import`` anywhere in a module counts, relative ones resolved, and ``from package import name``
counts as an import of ``package.name`` when that is a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import acp

ROOT = Path(acp.__file__).parent

# What the sans-I/O core (acp/rpc) must never import: it has no threads, no loop, no sockets and
# no clock.
CORE_FORBIDDEN = ("threading", "asyncio", "socket", "selectors", "time", "subprocess", "concurrent",
                  "acp.transport", "acp.connection", "acp.aio")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in ROOT.rglob("*.py")}


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """Every module ``name`` (at ``path``) imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for target in imports_of(path, name, known):
            # An import of a.b.c runs a/__init__ and a/b/__init__ too, but those are the
            # package's own business: count the module named, if it is one of ours.
            if target in known and target != name:
                targets.add(target)
        edges[name] = targets
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def package_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Cycles that go through a package's ``__init__`` re-exports are not counted apart: a
    package importing its own submodules is how it exports them."""
    pruned = {
        name: {t for t in targets if not (name.startswith(t + ".") and t in edges)}
        for name, targets in edges.items()
    }
    return cycles(pruned)


def test_no_import_cycles_among_acp_modules() -> None:
    found = package_cycles(graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_core_imports_no_runtime() -> None:
    mods = modules()
    known = set(mods)
    for name, path in mods.items():
        if name != "acp.rpc" and not name.startswith("acp.rpc."):
            continue
        for target in imports_of(path, name, known):
            bad = [f for f in CORE_FORBIDDEN if target == f or target.startswith(f + ".")]
            assert not bad, f"{name} imports {target}: acp/rpc must stay sans-I/O"


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The walk resolves relative imports and finds imports in functions and TYPE_CHECKING."""
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..transport import base\n"
        "def f():\n    from . import framing\n    import time\n"
    )
    found = imports_of(src, "acp.rpc.m", {"acp.rpc.framing", "acp.transport.base"})
    assert {"acp.transport", "acp.transport.base", "acp.rpc.framing", "time"} <= found
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_options_a_runtime_cannot_honour_are_not_offered() -> None:
    """wait_spin tunes the threaded runtime's poll: only the sync builders offer it."""
    assert hasattr(acp.SyncAgent.builder(), "wait_spin") and hasattr(acp.SyncClient.builder(), "wait_spin")
    assert not hasattr(acp.AsyncAgent.builder(), "wait_spin")
    assert not hasattr(acp.AsyncClient.builder(), "wait_spin")


def test_builder_options_import_no_runtime() -> None:
    imported = imports_of(ROOT / "_options.py", "acp._options", set(modules()))
    assert not {m for m in imported if m in ("acp.connection", "acp.aio.connection") or m.startswith("acp.aio.")}
