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


# The package's layers, bottom first. A module may import its own layer and the layers below it,
# never one above (the most specific prefix names a module's layer). Why this order: the config's
# plain pieces (harness.settings) serve every layer, while harness.config, which validates the whole
# config, composes the schemas the dataset families, index backends and methods register, so it
# sits above them; a dataset owns its answer rule (harness.datasets.answers), which evaluation,
# negative mining and training read; plans are made of the methods' jobs; tables and claims read
# what plans produce (harness.results reads the rendered tables back as frames, and the renderers write
# from them); the applications (the stage commands, the workflow's helpers, the site, the
# Python API, the benchmarks) drive all of it, and the command line dispatches to them.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("harness", "harness.errors", "harness.units", "harness.registry", "harness.progress",
                    "harness.io", "harness.stats")),
    ("settings", ("harness.settings", "harness.meta", "harness.numerics")),
    ("records", ("harness.job", "harness.recording", "harness.runs", "harness.artifacts", "harness.figures",
                 "harness.timing", "harness.cost", "harness.ledger", "harness.train", "harness.models", "harness.published")),
    ("data", ("harness.datasets", "harness.decontam")),
    ("evaluation", ("harness.evaluate",)),
    ("indexes", ("harness.indexes", "harness.fusion", "harness.rerank")),
    ("methods", ("harness.methods", "harness.negatives")),
    ("config", ("harness.config",)),
    ("plan", ("harness.plan",)),
    ("tables", ("harness.measured", "harness.tables", "harness.claims", "harness.regress", "harness.learning",
                "harness.results")),
    ("applications", ("harness.stages", "harness.workflow", "harness.report", "harness.api", "harness.bench", "harness.interop",
                      "harness.estimate")),
    ("commands", ("harness.cli", "harness.__main__", "harness.warm")),
]


def layer(module: str) -> int:
    """The index of ``module``'s layer in LAYERS (KeyError: a module no layer names)."""
    best: tuple[int, int] | None = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    if best is None:
        raise KeyError(module)
    return best[0]


def rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the package's rooms: each top-level module or sub-package of harness (a
    sub-package's modules are one room), an import between two of them one edge."""
    def room(m: str) -> str:
        return ".".join(m.split(".")[:2])
    out: dict[str, set[str]] = {room(m): set() for m in graph}
    for a, bs in graph.items():
        out[room(a)] |= {room(b) for b in bs if room(b) != room(a)}
    return out


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} ({LAYERS[layer(a)][0]}) imports {b} ({LAYERS[layer(b)][0]})"
            for a in sorted(graph) for b in sorted(graph[a]) if layer(b) > layer(a)]


def test_every_module_has_a_layer():
    unplaced = []
    for mod in import_graph():
        try:
            layer(mod)
        except KeyError:
            unplaced.append(mod)
    assert not unplaced, f"modules no layer of tests/test_imports.py LAYERS names: {unplaced}"


def test_the_layer_check_finds_an_upward_import():
    assert layer("harness.datasets.answers") < layer("harness.evaluate.qa") < layer("harness.plan")
    assert layer("harness.cli") == len(LAYERS) - 1
    assert upward_imports({"harness.methods.dpr": {"harness.plan", "harness.io"}}) == [
        "harness.methods.dpr (methods) imports harness.plan (plan)"]
    assert upward_imports({"harness.plan": {"harness.methods.dpr"}}) == []


def test_no_module_imports_a_layer_above_its_own():
    found = upward_imports(import_graph())
    assert not found, "upward imports:\n  " + "\n  ".join(found)


def test_the_rooms_graph_joins_a_sub_package_into_one_room():
    g = {"harness.datasets.cli": {"harness.config"}, "harness.datasets.store": {"harness.io"},
         "harness.config": {"harness.datasets.store"}, "harness.io": set()}
    assert rooms(g) == {"harness.datasets": {"harness.config", "harness.io"},
                        "harness.config": {"harness.datasets"}, "harness.io": set()}
    assert circles(rooms(g)) == [["harness.config", "harness.datasets"]]


def test_no_two_rooms_import_each_other():
    """Between sub-packages too there is no circle (a module of a low package that imports a high one
    ties the two packages both ways even when no module circle exists: a ``cli`` module inside
    harness/datasets that loads the config, say)."""
    graph = import_graph()
    found = circles(rooms(graph))
    described = []
    for c in found:
        ties = [f"{a} -> {b}" for a in sorted(graph) for b in sorted(graph[a])
                if ".".join(a.split(".")[:2]) in c and ".".join(b.split(".")[:2]) in c
                and ".".join(a.split(".")[:2]) != ".".join(b.split(".")[:2])]
        described.append("  " + " <-> ".join(c) + ":\n    " + "\n    ".join(ties))
    assert not found, "rooms that import each other:\n" + "\n".join(described)


def test_every_torch_load_refuses_pickled_code():
    """Loading someone else's model folder must not run the code a pickle can hold: every
    ``torch.load`` passes ``weights_only=True`` (what the harness saves is tensors and plain data)."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                kw = {k.arg: ast.unparse(k.value) for k in node.keywords}
                if kw.get("weights_only") != "True":
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not bad, f"torch.load without weights_only=True: {bad}"
