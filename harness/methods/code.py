"""A job's code identity (#28): a digest of the method modules its step runs, written into every stage
job's meta.json and kept in the cost ledger, so that ``python -m harness estimate`` can tell a cost
measured on today's code from one measured before the code changed (:func:`harness.ledger.pick`).
faiss's factory strings name an index's build; this names a job's code, read back the same way from
the working tree or from git at a record's commit."""
from __future__ import annotations

import subprocess
from functools import lru_cache

from harness import REPO

#: the source of the stages that are not a method's step (their meta.json names a method all the same)
STAGE_CODE = {"negatives": ("harness/negatives.py",), "decontam": ("harness/decontam",)}
#: the package whose modules a step's code closure follows (the shared modules beyond it are not counted)
METHODS_PACKAGE = "harness.methods"


def _module_file(name: str) -> str | None:
    """``harness/methods/vdr/train.py`` for ``harness.methods.vdr.train`` (a package: its __init__.py)."""
    rel = name.replace(".", "/")
    return next((c for c in (f"{rel}.py", f"{rel}/__init__.py") if (REPO / c).is_file()), None)


def _imported(path: str, names: set[str] | None = None) -> set[str]:
    """The modules of :data:`METHODS_PACKAGE` that the file ``path`` imports (at any depth: the steps
    import lazily), or, with ``names``, that those of its module-level names come from."""
    import ast

    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    package = path[:-len(".py")].replace("/", ".").rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                if names is not None and (a.asname or a.name) not in names:
                    continue
                sub = f"{base}.{a.name}"
                out.add(sub if _module_file(sub) else base)
        elif isinstance(node, ast.Import) and names is None:
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith(METHODS_PACKAGE + ".") and _module_file(m)}


def code_paths(stage: str | None, method: str | None, step: str | None = None,
               module: str | None = None) -> tuple[str, ...]:
    """A job's own code, as files relative to the repository: the modules of the method package that
    its step runs: where the step is a method module's function, the modules its body's names come
    from (a jobs.py's thin step: the module it calls; jobs.py's declarations are left out) and every
    module of :data:`METHODS_PACKAGE` those import, followed to the end; else the module (or package)
    the method or step is registered with; a stage that is not a method's step its own module
    (:data:`STAGE_CODE`). ``module``: the module whose ``step`` runs the job (``Job.module``; empty or
    None: the method's): a step of a shared module (:func:`harness.fusion.fusion_job`'s
    ``run_fusion``) runs no method code, (). () where it has none in this repository (a plugin). Shared
    modules (the corpus store, the training loop, the model loaders, the timing, the fusions) are not
    counted: a change there changes every job."""
    import ast
    import importlib
    import inspect

    from harness.methods import METHODS, STEPS

    if stage in STAGE_CODE:
        return STAGE_CODE[stage]
    if module and not module.startswith(METHODS_PACKAGE + "."):
        return ()
    module = module or next((reg.get(method) for reg in (METHODS, STEPS) if method in reg), None)
    if module is None:
        return ()
    fn = getattr(importlib.import_module(module), step, None) if step else None
    if fn is None or not _module_file(getattr(fn, "__module__", "")):
        rel = module.replace(".", "/")
        return next(((c,) for c in (rel, f"{rel}.py") if (REPO / c).exists()), ())
    home = fn.__module__
    body = {n.id for n in ast.walk(ast.parse(inspect.getsource(fn).strip())) if isinstance(n, ast.Name)}
    todo = _imported(_module_file(home), body) if home.endswith(".jobs") else {home}
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo |= _imported(_module_file(m)) - seen
    return tuple(sorted(f for f in map(_module_file, seen) if f))


def _blob_id(data: bytes) -> str:
    """git's blob id of a file's bytes (what ``git hash-object`` prints)."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@lru_cache(maxsize=None)
def code_id(stage: str | None, method: str | None, step: str | None = None, commit: str | None = None,
            module: str | None = None) -> str | None:
    """A digest of a job's own code (:func:`code_paths`, as today's files import each other), the same
    for the same files: their git blob ids at ``commit`` (``git ls-tree``; a commit marked ``+dirty``
    read as committed: an approximation; a file that did not exist then counts as absent), or in the
    working tree where ``commit`` is None (what a job runs). None where it cannot say: no source path,
    no git, or a commit this clone does not hold (a shallow clone, an amended commit). Two cost records
    with the same digest ran the same method code (:func:`harness.ledger.pick`). ``module``: as
    :func:`code_paths`'s."""
    import hashlib

    paths = code_paths(stage, method, step, module)
    if not paths:
        return None
    files: dict[str, str] = {}
    if commit is None:
        for rel in paths:
            root = REPO / rel
            for f in [root] if root.is_file() else sorted(root.rglob("*.py")):
                if f.is_file() and "__pycache__" not in f.parts:
                    files[f.relative_to(REPO).as_posix()] = _blob_id(f.read_bytes())
    else:
        try:
            out = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", commit.split("+", 1)[0], "--", *paths],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode != 0:
            return None
        for line in out.stdout.splitlines():
            head, _, path = line.partition("\t")
            kind, blob = head.split()[1:3]
            if kind == "blob" and path.endswith(".py"):
                files[path] = blob
    if not files:
        return None
    return hashlib.sha1("\n".join(f"{k} {v}" for k, v in sorted(files.items())).encode()).hexdigest()[:12]
