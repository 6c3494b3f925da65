"""QCR (anonymous, 2024): queries and documents as bags of learnt discrete codes in a Lucene index.

Model (§3.1): K special tokens ``[QCR0] .. [QCR{K-1}]`` are placed after ``[CLS]`` in front of the
text; the backbone's outputs at those K positions go through one linear projection to d = len(levels)
dimensions and FSQ (PyPI ``vector-quantize-pytorch`` 1.32.0, class ``FSQ``; bound
``tanh(z + shift) * half_l - offset`` with ``half_l = (L - 1)(1 + 1e-3) / 2``, rounding with a
straight-through estimator, codes scaled by ``1 / (L // 2)``, code id = sum of level digits times
cumulative products of the levels). A text becomes K code ids in ``[0, |C|)``.

Training (§3.2-3.3): the score of Eq. 3, ``s(q, d) = sum_i max_j -||z_qi - z_dj||_2`` over the
*pre-rounded* FSQ representations (the bounded values before rounding, on the code scale), as
softmax cross-entropy over the in-batch documents (``temperature``: the paper gives none), minus
``entropy_weight`` times the entropy of the batch-averaged crisp code distribution (Eq. 4-5: the
one-hot of the nearest codebook entry in the forward pass, the gradient of the softmax over
``-||zeta - z||`` in the backward pass). Large batches with GradCache (:func:`grad_cache_step`:
representations computed without a graph in sub-batches of ``chunk_size``, the loss and its gradient
w.r.t. the representations on the whole batch, then each sub-batch re-encoded with the same RNG
state and back-propagated with its cached gradient). The batch size and K follow ``schedule`` (the
paper: 256 -> 2048 and 150 -> 250 over 4,000 steps; the stages are config). Training pairs:
``supervised`` (the train split's questions and gold passages), ``crops`` (a random span of each
passage as its pseudo-query, as Contriever's random cropping: the stand-in for generated queries
where no generator runs offline) or ``generated`` (queries from ``generator``, App. A.1's prompt).

Retrieval (§3.4, §4.2): codes as position-prefixed tokens (``0_c52 1_c113 ...``) in a pre-tokenized
Lucene index searched with BM25 (``k1``, ``b``); the top ``rescore_depth`` rescored by Eq. 3 with a
precomputed |C| x |C| distance matrix between code vectors; "w/ words": codes and the analysed words
in one Lucene document (and query); "w/ words + RRF": weighted reciprocal rank fusion of the code run
and the word run (``rrf_weight`` on the codes). k-means baseline (§4.4): token vectors of the
profile's dense encoder clustered with faiss, every token replaced by its centroid id.

Systems: ``qcr`` (codes), ``qcr.rescore``, ``qcr.nopos`` (codes without positions), ``qcr.words``,
``qcr.rrf``; per variant ``v`` (``methods.qcr.variants``): ``qcr.v``, ``qcr.v-rescore`` and, for
``full_variants``, ``qcr.v-words``, ``qcr.v-rrf``; Figure 3 grid models ``qcr.g<B>x<K>``;
``qcr.kmeans``, ``qcr.kmeans-words``. Measure jobs: Figure 2 / A.2 / Table 2 (``qcr.analysis``),
Figure 3 (``qcr.fig3``) and the efficiency figures the paper lacks (``qcr.efficiency``).
"""
from __future__ import annotations

from harness.methods.qcr.index import code_strings
from harness.methods.qcr.jobs import (
    build,
    build_kmeans,
    build_nopos,
    build_words,
    declare,
    measure_analysis,
    measure_efficiency,
    measure_fig3,
    model_id,
    run_kmeans,
    run_search,
    search_job,
    start_key,
    train_kmeans,
    train_step,
)
from harness.methods.qcr.model import (
    code_ids,
    entropy_loss,
    late_interaction,
    prequant,
    qcr_loss,
)
from harness.methods.qcr.search import Encoder, Retriever, distance_matrix, rescore, rescore_run
from harness.methods.qcr.settings import codebook_size, grid_models, settings
from harness.methods.qcr.train import GENERATOR_PROMPT, BatchSchedule, crop_query, generate_queries
from harness.train import grad_cache_step  # the shared GradCache step (QCR's §3.2 large batches)

SCHEMA = "schema.yaml"

#: the plan's names (declare, search_job, the steps its jobs name) and those tests/test_qcr.py and
#: tests/test_numerics.py import
__all__ = [
    "GENERATOR_PROMPT", "BatchSchedule", "Encoder", "Retriever", "build", "build_kmeans", "build_nopos",
    "build_words", "code_ids",
    "code_strings", "codebook_size", "crop_query", "declare", "distance_matrix", "entropy_loss",
    "generate_queries", "grad_cache_step", "grid_models", "late_interaction", "measure_analysis",
    "measure_efficiency", "measure_fig3", "model_id", "prequant", "qcr_loss", "rescore", "rescore_run",
    "run_kmeans", "run_search", "search_job", "settings", "start_key", "train_kmeans", "train_step",
]
