"""Methods, one module each, registered by name.

A method module provides ``build_index(ctx, out[, model_dir])``, a ``Searcher`` (``encode`` and
``search`` apart, for timing) and ``search(ctx, index_dir, queries, k[, model_dir])``; a method
that learns (``trained=True``) also provides ``train(ctx, out, negatives)``.
``ctx`` is a :class:`harness.methods.base.Context`.
"""
from __future__ import annotations

import importlib
from typing import NamedTuple

from harness.registry import Registry


class MethodInfo(NamedTuple):
    module: str
    trained: bool


METHODS: Registry[MethodInfo] = Registry("method")
METHODS.add("bm25", MethodInfo("harness.methods.bm25", trained=False))
METHODS.add("dpr", MethodInfo("harness.methods.dpr", trained=True))
METHODS.add("svdr", MethodInfo("harness.methods.vdr", trained=True))   # SVDR: VDR + semi-parametric loss
METHODS.add("vdr", MethodInfo("harness.methods.vdr", trained=True))    # VDR: methods.vdr has sp_loss: false
METHODS.add("bpr", MethodInfo("harness.methods.bpr", trained=True))     # BPR: DPR encoders + hash layer
METHODS.add("reader", MethodInfo("harness.methods.reader", trained=True))  # extractive reader (EM); reads runs, builds no index


def method_module(name: str):
    return importlib.import_module(METHODS.get(name).module)
