"""The package's import graph has no circle: no module imports, directly or through others, a
module that imports it (imports inside functions count: they are the same dependency, deferred)."""
from __future__ import annotations

import ast
from pathlib import Path

from harness.config import REPO

PACKAGE = REPO / "harness"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports (``from a import b`` is module a.b when a.b is one)."""
    files = {module_name(p): p for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = _type_checking_only(tree)
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in files:  # a name imported from a module -> that module
                    name = name.rpartition(".")[0]
                if name and name != mod:
                    graph[mod].add(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions_and_relative_ones(tmp_path):
    pkg = tmp_path / "harness"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("def f():\n    from harness import top\n")
    (pkg / "top.py").write_text("from harness.sub.leaf import f\n")
    global REPO
    old, REPO = REPO, tmp_path
    try:
        g = import_graph(pkg)
    finally:
        REPO = old
    assert g["harness.sub"] == {"harness.sub.leaf"}
    assert g["harness.sub.leaf"] == {"harness.top"}
    assert circles(g) == [["harness.sub.leaf", "harness.top"]]


def test_the_package_has_no_import_circle():
    found = circles(import_graph())
    graph = import_graph()
    described = ["  " + " -> ".join(c) + "   (" + "; ".join(f"{a} imports {b}" for a in c for b in sorted(graph[a])
                                                       if b in c) + ")" for c in found]
    assert not found, "import circles:\n" + "\n".join(described)


def test_every_name_a_module_exports_exists():
    """Each name in a module's ``__all__`` is defined there (a renamed function left in ``__all__``
    breaks ``from module import *`` and every reader of the list)."""
    import importlib

    missing = []
    for mod in sorted(import_graph()):
        if mod.endswith("__main__"):
            continue
        m = importlib.import_module(mod)
        missing += [f"{mod}.{n}" for n in getattr(m, "__all__", []) if not hasattr(m, n)]
    assert not missing, missing
