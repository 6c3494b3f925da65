"""BPR (Yamada et al., 2021): DPR's two encoders plus a hash layer; binary passage codes and a
two-stage search (Hamming candidates, then a rerank with the continuous question embedding).

Training (§3.2-3.4), on top of :mod:`harness.methods.dpr` (its encoders, question preparation and
training examples are reused): the hash layer is ``tanh(β·e)`` with ``β = sqrt(γ·step + 1)``
(``step`` = finished training steps, ``methods.bpr.gamma``, γ = 0.1); the loss is
``L = L_cand + L_rerank`` over in-batch negatives plus one BM25 hard negative per question:

- ``L_cand`` (Eq. 6): ranking loss between the approximated codes of the question and of the
  passages, ``max(0, -(<h~q, h~p+> - <h~q, h~p->) + α)`` summed over the negatives and averaged over
  the questions (``cand_reduction: sum``, the paper; the authors' code averages over all pairs,
  ``mean``, with margin 0.1); ``methods.bpr.margin`` is α (paper 2). ``cand_loss: ce`` is the
  cross-entropy variant of Appendix D / Table 9.
- ``L_rerank`` (Eq. 7): cross-entropy of ``<e_q, h~p>`` (continuous question, approximated
  passage codes).

Inference: ``h = sign(e)`` packed to bits (:func:`harness.indexes.faiss_binary.binarize`); the
question keeps ``e_q`` for the rerank. Search = :func:`faiss_binary.two_stage_search`: top ``l``
(``n_candidates``, paper 1000; the authors' code defaults to 2048) by Hamming distance with a
linear scan (``faiss-binary:BFlat``) or a hash lookup (``hash_index``, e.g. ``BHash768``), then
``<e_q, ±1 code>``.

System ids (declared by :func:`declare`): ``bpr.bflat`` / ``bpr.bhash`` (Table 1), ``bpr.no-rerank``
(hash lookup, Hamming order) and ``bpr.no-cand`` (rerank every passage) (Table 2), ``bpr.l<n>``
(linear scan with l = n, Table 8), ``bpr.<train variant>`` (one training per setting of
``variants``, Tables 7 and 9), and the DPR baselines on the same passages ``dpr.hnsw``,
``dpr.lsh``, ``dpr.pq`` (specs ``dpr_baselines``; vectors read back from DPR's Flat index).
Index sizes and query times (protocol ``bpr-query-time``) go to metrics files.

Commands: none of its own (there is no ``python -m harness.methods.bpr``); its jobs run through the
generic stages, ``python -m harness train|index|search|measure --job <id> [--dataset D] --out DIR``
(``python -m harness plan`` lists the job ids).

Files: ``settings`` (methods.bpr, variants), ``model`` (hash layer, loss), ``train``, ``index``,
``search`` (:class:`Searcher`), ``measure`` (efficiency on a dataset), ``scale`` (Table 1 at the
paper's scale, synthetic payload; published figures from configs/published/bpr.yaml), ``jobs``
(:func:`declare` and the steps).
"""
# The functions `settings` and `train` share their names with the submodules that define them: the
# imports below bind the package attributes to the functions (what the tests and callers use).
from harness.methods.bpr.settings import (DEFAULTS, SCALE_DEFAULTS, SEARCH_VARIANTS, TRAIN_KEYS,
                                          _check, _variant_search, dpr_baselines, efficiency_systems, model_id,
                                          model_source, scale_settings, search_variants, settings, train_hash,
                                          train_signature, train_variants, variant_context)
from harness.methods.bpr.model import beta, bpr_loss
from harness.methods.bpr.train import train
from harness.methods.bpr.index import (CODES_FILE, DOCIDS_FILE, build_binary_index, build_dpr_baseline, build_index,
                                       read_codes)
from harness.methods.bpr.search import Encoder, Retriever, Searcher
from harness.methods.bpr.measure import efficiency, time_per_question
from harness.methods.bpr.scale import SYNTHETIC_NOTE, paper_table1, scale_efficiency
from harness.methods.bpr.jobs import (build, build_baseline, build_hash, declare, measure_efficiency, measure_scale,
                                      run_baselines, run_search, run_variant, search_job, start_key,
                                      train_step)

SCHEMA = "schema.yaml"

__all__ = [
    "SCHEMA", "DEFAULTS", "SCALE_DEFAULTS", "SEARCH_VARIANTS", "TRAIN_KEYS", "CODES_FILE", "DOCIDS_FILE", "read_codes",
    "SYNTHETIC_NOTE",
    # settings
    "settings", "variant_context", "train_signature", "train_hash", "model_source", "model_id", "search_variants",
    "train_variants", "dpr_baselines", "efficiency_systems", "scale_settings", "_variant_search", "_check",
    # model, training, indexes, search, efficiency
    "beta", "bpr_loss", "train", "build_index", "build_binary_index", "build_dpr_baseline", "Searcher",
    "Encoder", "Retriever",
    "time_per_question", "efficiency", "scale_efficiency", "paper_table1",
    # plan: jobs and the steps they name
    "declare", "search_job", "start_key", "train_step", "build", "build_hash", "build_baseline", "run_search", "run_variant",
    "run_baselines", "measure_efficiency", "measure_scale",
]
