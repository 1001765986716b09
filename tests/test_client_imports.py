"""The client package's modules import each other one way: builders -> config -> runtimes.

A cycle among them (``builder`` importing ``client`` importing ``builder``...) makes the import
order fragile and the layering unreadable; this reads the top-level imports of every module of
``acp/client`` (``if TYPE_CHECKING:`` blocks and imports inside functions excluded) and fails
naming the cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "acp" / "client"
NAME = "acp.client"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([NAME, *parts])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                pending[:0] = [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            pending[:0] = [*node.body, *node.orelse, *node.finalbody]
            for handler in node.handlers:
                pending[:0] = handler.body
    return found


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _top_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                module = node.module or ""
                stem = (f"{base}.{module}" if module else base) if node.level else module
                # "from . import x" names a module as often as a name in it.
                targets = [stem, *(f"{stem}.{alias.name}" for alias in node.names)]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for succ in sorted(graph[node]):
            if state.get(succ) == 1:
                return path[path.index(succ):] + [succ]
            if succ not in state and (found := visit(succ)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_checker_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_type_checking_and_function_imports_are_not_edges() -> None:
    tree = ast.parse(
        "import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .x import y\n"
        "def f():\n    from .z import w\n"
    )
    assert [getattr(n, "module", None) for n in _top_level_imports(tree)] == [None, "typing"]


def test_client_package_has_no_import_cycle() -> None:
    modules = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    assert len(modules) > 5
    graph = _edges(modules)
    assert "acp.client.config" in graph["acp.client.builder"]  # the reader reads real edges
    cycle = _cycle(graph)
    assert cycle is None, "import cycle in acp/client: " + " -> ".join(cycle)
