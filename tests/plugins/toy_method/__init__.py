"""A toy retrieval method that lives outside the package: hashed TF-IDF vectors in a faiss index.

It exists to prove the plugin contract (docs/adding-a-method.md) and to show a method package's
shape in miniature: this file (docstring, ``SCHEMA``, re-exports, registration), ``schema.yaml`` (the
config section), ``settings.py`` (defaults), ``model.py`` (the model), ``jobs.py`` (what the method
declares and the steps its jobs name). A real method adds ``train.py``, ``index.py``, ``search.py``
and ``measure.py`` for the work its steps call; no file in workflow/ changes. Loaded with
``HARNESS_PLUGINS=toy_method`` and ``PYTHONPATH=tests/plugins``.

- train ``toy`` (step :func:`fit`): IDF weights from the corpus of ``methods.toy.train_dataset``
  (``idf.json``: the hashing dimension, the IDF of every token, the IDF of an unseen token);
- index ``toy`` (step :func:`build`) of any dataset: every passage (title + text) as a feature-hashed,
  TF-IDF weighted, L2-normalised vector of ``dim`` dimensions in an index of spec
  ``methods.toy.index`` (``faiss:Flat``), doc ids beside it;
- search ``toy`` (step :func:`run_search`) on each of ``methods.toy.datasets``: system ``toy``, the
  questions encoded the same way, one model load;
- search ``toy.rrf``: reciprocal rank fusion of ``toy`` and ``methods.toy.rrf_with`` (``bm25``),
  declared with the shared step :func:`harness.fusion.fusion_job`.
"""
from __future__ import annotations

from harness.methods import register

from .jobs import build, declare, fit, run_search, search_job
from .model import HashedTfidf, passage_text, tokens
from .settings import DEFAULTS, settings

SCHEMA = "schema.yaml"

#: the plan's names (declare, search_job, the steps its jobs name: getattr(module, job.step)), and the rest
__all__ = ["SCHEMA", "DEFAULTS", "HashedTfidf", "build", "declare", "fit", "passage_text", "run_search",
           "search_job", "settings", "tokens"]

register("toy", __name__)
