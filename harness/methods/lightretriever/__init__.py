"""LightRetriever (Ma et al.): a full-size document encoder, queries encoded by a table lookup.

One training run (``train_step``) trains, on one backbone and jointly as the authors' release does:

- the **full-size symmetric baseline** (Figure 2): queries ``[bos] Instruct: {task}\\nQuery: {q} [eos]``
  and documents ``[bos] {title} {text} [eos]`` through the same encoder, EOS (last-token) pooling,
  cosine similarity, contrastive loss at temperature 0.02 over in-batch and BM25 hard negatives;
- **light dense** (§2.2): a query token's vector is the EOS state of ``[bos] + instruction + token +
  [eos]`` (:func:`token_vectors`: decoders pack many tokens per pass with App. A.5's block mask;
  BERT stand-ins run the separate sequences), a query is the mean of its tokens' vectors; trained end
  to end through the full query encoder against the full-size document vectors; after training all V
  token vectors are cached in an ``nn.EmbeddingBag(mode="mean")`` (rebuilt per task instruction);
- **light sparse** (§2.3): the query vector is the counts of its token ids (no special tokens, no
  instruction); the document vector is max over positions of log(1 + ReLU(h P)) through the LM head,
  computed by the fused projection-then-max of App. A.5 (``ops.py``); FLOPS
  regulariser with a quadratic ramp; temperature 1.0; documents indexed as a Lucene impact index
  (weights x100 rounded) and searched with the query's counts as impacts;
- the auxiliary **KL** of Eq. 5 (light scores towards the detached full-size scores; ``kl``) and
  **MRL** over nested dims (``mrl_dims``); each batch comes from one training set.

Systems of the main model on each evaluation set: ``lightretriever`` (light dense),
``lightretriever.base`` (the full-size baseline), ``lightretriever.sparse``, ``lightretriever.hybrid``
(per-query min-max interpolation, ``hybrid_weights``, the shared fusion step) and
``lightretriever.topk<k>`` (Figure 5: documents' top-k sparse terms). A variant ``v`` (Tables 3, 4,
Figure 5's MRL) is its own model with systems ``lightretriever.v`` (dense), ``lightretriever.v-base``,
``lightretriever.v-sparse``, ``lightretriever.v-hybrid`` and, with MRL, ``lightretriever.v-d<dim>``.
Table 1 (query-encoding speed) is the measure job ``lightretriever.speed``.

Training data are the decontam stage's output: LightRetriever trains only on the training questions
that survived SimHash decontamination against its own evaluation sets (config key ``decontam``).

The package: ``settings`` (defaults, variants, checks, system ids), ``ops`` (the fused sparse max, the
block mask, the token-vector table), ``model`` (encoders, losses, save/load), ``train``, ``index``,
``search``, ``speed`` (Table 1's timers), ``measure`` (Figure 5, Table 1) and ``jobs`` (``declare`` and
the step functions).
"""
from __future__ import annotations

from harness.methods.lightretriever.index import impacts
from harness.methods.lightretriever.jobs import (
    build,
    declare,
    measure_fig5,
    measure_speed,
    run_search,
    search_job,
    start_key,
    train_step,
)
from harness.methods.lightretriever.model import LightModel, contrastive, flops, kl_align, ramp, token_vectors
from harness.methods.lightretriever.search import Retriever, _sparse_queries, _topk_rows
from harness.methods.lightretriever.settings import settings
from harness.methods.lightretriever.train import train

SCHEMA = "schema.yaml"

__all__ = ["SCHEMA", "declare", "search_job", "start_key", "train_step", "build", "run_search", "measure_fig5", "measure_speed",
           "settings", "train", "LightModel", "token_vectors", "contrastive", "flops", "kl_align", "ramp", "impacts",
           "_sparse_queries", "_topk_rows", "Retriever"]
