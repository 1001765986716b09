"""The agent package's configuration flows one way: builder -> spec -> runtime.

Built from the source with ``ast`` (nothing is imported): the module-level imports of
``acp/agent`` (``if TYPE_CHECKING:`` blocks excluded) form an acyclic graph, and the builder and
spec modules import no runtime module at all, not even inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "acp" / "agent"
NAME = "acp.agent"


def _modules() -> dict[str, Path]:
    return {
        (NAME if path.stem == "__init__" else f"{NAME}.{path.stem}"): path
        for path in sorted(PACKAGE.glob("*.py"))
    }


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(body: list[ast.stmt], nested: bool) -> list[ast.stmt]:
    """The statements run at import time (``nested``: also those inside functions/classes)."""
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, ast.If):
            if not _is_type_checking(stmt.test):
                out += _statements(stmt.body, nested)
            out += _statements(stmt.orelse, nested)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *[h.body for h in stmt.handlers]):
                out += _statements(block, nested)
        elif isinstance(stmt, (ast.With, ast.For, ast.While)):
            out += _statements(stmt.body, nested)
        elif nested and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out += _statements(stmt.body, nested)
    return out


def _imports(module: str, path: Path, known: set[str], nested: bool = False) -> set[str]:
    """The modules of ``acp.agent`` that ``module`` imports."""
    package = NAME if module == NAME else module.rsplit(".", 1)[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for stmt in _statements(tree.body, nested):
        targets: set[str] = set()
        if isinstance(stmt, ast.Import):
            targets = {alias.name for alias in stmt.names}
        elif isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                parts = package.split(".")
                origin = ".".join(parts[: len(parts) - (stmt.level - 1)] + ([stmt.module] if stmt.module else []))
            else:
                origin = stmt.module or ""
            submodules = {f"{origin}.{alias.name}" for alias in stmt.names} & known
            targets = submodules
            if len(submodules) < len(stmt.names):
                targets.add(origin)  # a name defined in ``origin`` itself
        found |= {target for target in targets if target in known and target != module}
    return found


def _graph(nested: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known, nested) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_is_read() -> None:
    graph = _graph()
    assert f"{NAME}.spec" in graph[f"{NAME}.builder"]
    assert f"{NAME}.dispatch" in graph[f"{NAME}.agent"]
    assert f"{NAME}.agent" in graph[NAME]
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def test_agent_package_has_no_import_cycle() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle in acp/agent: " + " -> ".join(cycle or [])


def test_builder_and_spec_import_no_runtime() -> None:
    # Not even lazily inside build(): a builder hands its spec to the runtime that owns it.
    graph = _graph(nested=True)
    neutral = {f"{NAME}.builder", f"{NAME}.spec", f"{NAME}.methods"}
    for module in neutral:
        assert graph[module] <= neutral, f"{module} imports {sorted(graph[module] - neutral)}"
