"""DensePhrases (Lee et al., 2021): dense phrase representations for open-domain QA.

Model (§3.2): a phrase encoder M_p over passages and two question encoders M_q,start and M_q,end
read at [CLS], all initialised from the profile's backbone. A phrase s(i, j) of a passage is
[h_i, h_j] (Eq. 3: as the authors' code, the start and end vectors of a token are the same token
vector h); a question is [q_start, q_end] (Eq. 4); f(s, q) = h_i . q_start + h_j . q_end.
Options (Table 5): ``shared_encoder`` (one encoder for passages and questions, DenSPI-style:
q_start read at [CLS], q_end at the question's last token) and ``split_vectors`` (DenSPI: h is
split in halves, start = h[:d/2], end = h[d/2:]; the question vectors have d/2 dimensions and are
zero-padded to d for the phrase index, so one index of h serves both).

Training (Eq. 9): L = l1 L_single + l2 L_distill + l3 L_neg (+ the filter's BCE, App. E).
- L_single (Eqs. 5-6): start/end log-likelihood within the gold passage window.
- L_neg (Eq. 8): in-batch negatives, the gold start/end vectors of the other questions of the
  batch; pre-batch negatives (§4.3): a FIFO of the detached gold vectors of the C previous
  batches, switched on after ``prebatch_start`` of training (the paper: the last two of 4 epochs).
- L_distill (Eq. 7): KL(P || P_c) against the start/end distributions of a cross-attention
  teacher: the harness's extractive reader (harness/methods/reader.py, a BERT-family cross-encoder trained
  on the same dataset's questions), mapped to the phrase encoder's tokens by character offset;
  both distributions are renormalised over the tokens both models see. The code's direction
  KL(P_c || P) is ``distill_direction: code``.
- Filter (App. E): a linear layer (hidden -> start/end logits) trained with binary cross-entropy
  on the gold positions (positive weight = window length, as the code); at dump time a token is
  kept if either logit exceeds a threshold tuned on dev questions (the highest threshold of a grid
  whose reading-comprehension EM, and the fraction of dev questions whose gold answer phrase survives,
  both stay within ``filter.tolerance`` of their unfiltered values); where none does (random weights),
  ``filter.kept_fraction`` may set the threshold that keeps that fraction of the dev tokens instead.

Indexing (§5): every kept token vector of every passage (windows of ``dump_max_len`` with stride;
a token is taken from the window where it has most context) goes to the phrase dump
(harness/indexes/phrase_dump.py), then to phrase indexes (harness/indexes/phrase.py): the main
spec (the paper: ``IVF<nlist>,SQ4``), the released OPQ/IVF-PQ variant and ``Flat``.
Search (Eq. 10): top-k start and end positions by MIPS, spans completed under start <= end <
start + L within one passage; the top-1 phrase is the answer; the top phrases and their passages
are written (``<system>.answers.jsonl`` and a TREC run of the passages).

Query-side fine-tuning (§6, Eq. 11): only the question encoders train; the loss is the marginal
log-likelihood of the gold answer over the top-k phrases retrieved from the fixed phrase index,
re-searched at every epoch; gold = SQuAD-normalised string equality (regex for ``dpr-regex``
datasets); the checkpoint with the best dev EM is kept.

Evaluation: EM and F1 (SQuAD v1.1; regex EM for CuratedTREC); questions lose one trailing "?" and
all-lower-case questions are truecased (``harness.evaluate.qa.prepare_question``), as the authors do.

The package: settings.py (defaults, variants, system ids), model.py (the encoders, filter, save/load,
D = {p} span scoring), train.py (Eq. 9), qg.py (question generation), index.py (threshold, dump,
indexes), search.py (Eq. 10), qs.py (Eq. 11), measure.py (EM/F1, RC, speed, Table C.3), jobs.py.
"""
from __future__ import annotations

from harness.methods.densephrases.index import (build, choose_threshold, dump_corpus, gold_docs, gold_tokens,
                                                 index_specs, threshold_for_kept, tune_threshold)
from harness.methods.densephrases.jobs import (answer_systems, declare, learning_twin, qs_step, rc_job, search_job,
                                                start_key, train_step)
from harness.methods.densephrases.measure import _time_child, measure_c3, measure_em, measure_rc, measure_speed
from harness.methods.densephrases.model import (PhraseModel, Scored, Window, best_span, rc_predict, read_passages,
                                                score_passages, windows)
from harness.methods.densephrases.qs import open_em, train_qs
from harness.methods.densephrases.search import (Retriever, load_phrase_index, passage_run, phrase_answers,
                                                run_search)
from harness.methods.densephrases.settings import (ANSWERS, DEFAULTS, DUMP_DIR, NAME, check, em_of, model_id,
                                                   model_of, prepare, settings, train_signature, variants)
from harness.methods.densephrases.train import (Example, _kl, dev_questions, examples_of, neg_loss, teacher_logits,
                                                train, train_questions)

SCHEMA = "schema.yaml"

__all__ = ["ANSWERS", "DEFAULTS", "DUMP_DIR", "NAME", "SCHEMA", "Example", "PhraseModel", "Retriever",
           "Scored", "Window", "_kl", "_time_child", "answer_systems", "best_span", "build", "check",
           "choose_threshold", "declare", "dev_questions", "dump_corpus", "em_of", "examples_of",
           "gold_docs", "gold_tokens", "index_specs", "learning_twin", "load_phrase_index", "measure_c3",
           "measure_em", "measure_rc", "measure_speed", "model_id", "model_of", "neg_loss", "open_em", "passage_run",
           "phrase_answers", "prepare", "qs_step", "rc_job", "rc_predict", "read_passages", "run_search",
           "score_passages", "search_job", "settings", "start_key", "teacher_logits", "train", "train_qs", "train_signature",
           "threshold_for_kept", "train_questions", "train_step", "tune_threshold", "variants", "windows"]
