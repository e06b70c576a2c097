"""The package's structure, as docs/architecture.md draws it: no import circle between modules (the
imports a type checker follows included), and no part importing a part of a higher layer at run time."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nemo_polar"

# bottom to top; a part imports only its own layer and those below (docs/architecture.md, "Layers")
LAYERS = [
    {"errors", "config", "plugins", "states", "chat", "records", "record_codec", "migrations", "store", "rollup",
     "sandbox", "serving", "control", "metrics", "logs", "session_cache", "daemons", "redaction",
     "containment", "paths", "progress"},
    {"runtimes", "harnesses", "evaluators", "traces"},
    {"contracts", "proxy", "local", "nemo_rl"},
    {"tasks", "recipes", "server"},
    {"cluster", "env", "view", "learn", "bench"},
    {"cli"},
]  # fmt: skip


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path], type_checking: bool) -> set[str]:
    """The package's modules `name` imports: at module level and inside functions; those under
    `if TYPE_CHECKING:` only with `type_checking`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and not type_checking:
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - child.level + 1] if child.level else []
                module = ".".join([*base, *([child.module] if child.module else [])])
                found.update(f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in child.names)
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in known and m != name}


def graph(type_checking: bool) -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known, type_checking) for name, path in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def part(module: str) -> str:
    return module.split(".")[1] if "." in module else "__init__"


def test_no_module_imports_itself_in_a_circle():
    assert cycles(graph(type_checking=False)) == []
    assert cycles(graph(type_checking=True)) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_part_has_a_layer():
    parts = {part(m) for m in modules()} - {"__init__"}
    assert parts == set().union(*LAYERS), "a new top-level part needs its place in LAYERS and the docs"


def test_no_part_imports_upward():
    layer = {p: i for i, members in enumerate(LAYERS) for p in members}
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in graph(type_checking=False).items()
        for target in targets
        if part(module) != "__init__" and layer[part(target)] > layer[part(module)]
    )
    assert upward == []
