"""DensePhrases' own logic (harness/methods/densephrases/): the span search of one passage against a
brute force, windows that stride long passages and never cut them, answer alignment and its counts,
the losses (KL direction, in-batch and pre-batch negatives), and a training run on the smoke
fixture whose phrase dump, index and search are checked against exact search."""
from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch

from harness.config import load_config
from harness.datasets import Doc, Query
from harness.errors import ConfigError
from harness.methods import densephrases as dp

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cfg():
    return load_config()


@pytest.fixture(scope="module")
def tok(cfg):
    from harness.models.backbones import load_tokenizer

    return load_tokenizer(cfg, "splade-tiny")


# ------------------------------------------------------------------------------------------ spans


def _brute(zs, ze, valid, L):
    best = None
    for i, j in itertools.product(range(len(zs)), repeat=2):
        if valid[i] and valid[j] and i <= j < i + L:
            if best is None or zs[i] + ze[j] > best[2]:
                best = (i, j, zs[i] + ze[j])
    return best


@pytest.mark.parametrize("seed", range(20))
def test_best_span_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    zs, ze = rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32)
    valid = rng.random(n) < 0.7
    L = int(rng.integers(1, 6))
    got, want = dp.best_span(zs, ze, valid, L), _brute(zs, ze, valid, L)
    if want is None:
        assert got is None
    else:
        assert got[:2] == want[:2] and got[2] == pytest.approx(want[2], abs=1e-6)


def test_long_passage_is_strided_never_cut(tok):
    text = " ".join(f"word{i}" for i in range(400))
    wins = dp.windows(tok, [Doc("d", "Title", text)], max_len=64, stride=16)
    assert len(wins) > 5
    covered = {w.offsets[t] for w in wins for t, ok in enumerate(w.text) if ok}
    starts = sorted(a for a, _ in covered)
    # every word's characters are inside some window's text tokens
    for m in range(400):
        a = text.index(f"word{m} ") if m < 399 else text.rindex("word399")
        assert any(s <= a < e for s, e in covered), m
    assert starts[0] == 0 and max(e for _, e in covered) == len(text)
    # title tokens are never passage-text tokens
    assert all(all(o == (0, 0) or o[1] <= len(text) for o in w.offsets) for w in wins)


def test_examples_align_answers_and_count_what_they_drop(cfg, tok):
    s = dp.settings(cfg)
    docs = {"a": Doc("a", "Paris", "Paris is the capital of France."), "b": Doc("b", "Berlin", "Berlin is big.")}
    qs = [Query("1", "capital of france?", ["Paris"], ["a"]),
          Query("2", "what is big?", ["Munich"], ["b"]),          # answer not in its passage
          Query("3", "no gold", ["x"], None)]
    exs, stats = dp.examples_of(s, tok, qs, docs)
    assert stats == {"questions": 3, "no_gold_passage": 1, "answer_not_in_passage": 1, "answer_beyond_windows": 0,
                     "examples": 1}
    e = exs[0]
    w = e.window
    assert e.doc.text[w.offsets[e.start][0]:w.offsets[e.end][1]] == "Paris"
    assert not e.question.endswith("?")


# ------------------------------------------------------------------------------------------ losses


def test_kl_directions_and_mask():
    student = torch.tensor([[1.0, 2.0, 3.0, 9.0]])
    teacher = torch.tensor([[3.0, 2.0, 1.0, -9.0]])
    mask = torch.tensor([[True, True, True, False]])
    ps = torch.softmax(student[:, :3], -1)
    pt = torch.softmax(teacher[:, :3], -1)
    paper = (ps * (ps.log() - pt.log())).sum()
    code = (pt * (pt.log() - ps.log())).sum()
    assert float(dp._kl(torch, student, teacher, mask, "paper")) == pytest.approx(float(paper), rel=1e-5)
    assert float(dp._kl(torch, student, teacher, mask, "code")) == pytest.approx(float(code), rel=1e-5)
    assert float(dp._kl(torch, teacher, teacher, mask, "paper")) == pytest.approx(0.0, abs=1e-6)


def test_config_checks(cfg):
    c = copy.deepcopy(cfg)
    c["methods"]["densephrases"]["negatives"] = "hard"
    with pytest.raises(ConfigError, match="negatives"):
        dp.declare(c, "densephrases")
    c = copy.deepcopy(cfg)
    c["methods"]["densephrases"]["datasets"] = ["nope"]
    with pytest.raises(ConfigError, match="unknown dataset 'nope'"):
        dp.declare(c, "densephrases")


def test_variants_systems_and_jobs(cfg):
    jobs = {(j.stage, j.id): j for j in dp.declare(cfg, "densephrases")}
    assert ("train", "densephrases.qs") in jobs
    assert jobs[("index", "densephrases.pb-c4")].params["gold_only"] is True
    assert jobs[("index", "densephrases")].params["gold_only"] is False
    em = jobs[("measure", "densephrases.em")]
    assert {"densephrases", "densephrases.flat", "densephrases.opq", "densephrases.qs", "densephrases.pb-c2"} <= set(em.systems)
    rc = jobs[("measure", "densephrases.rc")]
    assert "densephrases.rc" in rc.systems and "densephrases.shared-rc" in rc.systems
    assert dp.settings(cfg, "pb-c4")["prebatch_batches"] == 4
    assert dp.settings(cfg, "ref")["distill"] is True and dp.settings(cfg, "nodistill")["distill"] is False


def test_a_variant_that_trains_as_an_earlier_one_reads_its_model():
    """On smoke (and small), ``pb-c2`` is ``nodistill``'s training (prebatch C=2 at the variants' batch size, no
    distillation): one model is trained and indexed; pb-c2 keeps its own system, search and RC figure.
    A variant whose training equals the main model's still trains its own (its index is D_small's)."""
    cfg = load_config()
    assert dp.train_signature(dp.settings(cfg, "pb-c2")) == dp.train_signature(dp.settings(cfg, "nodistill"))
    assert dp.model_of(cfg, "pb-c2") == "densephrases.nodistill" and dp.model_of(cfg, "pb-c4") == "densephrases.pb-c4"
    jobs = {(j.stage, j.id, j.dataset): j for j in dp.declare(cfg, "densephrases")}
    assert ("train", "densephrases.pb-c2", None) not in jobs and ("index", "densephrases.pb-c2", None) not in jobs
    s = jobs[("search", "densephrases.pb-c2", "smoke")]
    assert s.systems == ("densephrases.pb-c2",)
    assert s.inputs["model"].id == s.inputs["index"].id == "densephrases.nodistill"
    rc = jobs[("measure", "densephrases.rc", "smoke")]
    assert rc.inputs[f"model_{rc.systems.index('densephrases.pb-c2-rc')}"].id == "densephrases.nodistill"
    c = load_config(overrides={"methods": {"densephrases": {"variants": {"nodistill": {"distill": True}}}}})
    assert dp.model_of(c, "pb-c2") == "densephrases.pb-c2"  # no longer the same training: its own model
    main = dp.settings(cfg)
    as_main = {k: main[k] for k in main["variant_overrides"]}  # undo what the variants' overrides change
    same = load_config(overrides={"methods": {"densephrases": {"variants": {"as-main": as_main}}}})
    assert dp.train_signature(dp.settings(same, "as-main")) == dp.train_signature(dp.settings(same))
    assert dp.model_of(same, "as-main") == "densephrases.as-main"


def test_an_index_variant_set_to_null_is_neither_built_nor_searched():
    """The ci overlay drops the OPQ index (configs/profiles/ci.yaml): null removes a variant that a
    profile below set; the schema accepts it and no job builds or names it."""
    c = load_config([], overrides={"methods": {"densephrases": {"index_variants": {"opq": None}}}})
    assert dp.index_specs(c["methods"]["densephrases"], False) == {"main": c["methods"]["densephrases"]["index"],
                                                                   "flat": "phrase:Flat"}
    systems = {s for j in dp.declare(c, "densephrases") for s in j.systems}
    assert "densephrases.flat" in systems and "densephrases.opq" not in systems


def _ce(scores: torch.Tensor) -> torch.Tensor:
    """Mean over rows of -log softmax(row)[i] for row i (the positive is each row's own column)."""
    return torch.stack([-torch.log_softmax(row, 0)[i] for i, row in enumerate(scores)]).mean()


def test_in_batch_negatives_are_the_other_questions_gold_vectors():
    g = torch.Generator().manual_seed(0)
    qs, qe, G_s, G_e = (torch.randn(4, 6, generator=g) for _ in range(4))
    got = dp.neg_loss(torch, qs, qe, G_s, G_e)
    want = (_ce(qs @ G_s.T) + _ce(qe @ G_e.T)) / 2
    assert float(got) == pytest.approx(float(want), rel=1e-6)


def test_pre_batch_negatives_add_columns_and_get_no_gradient():
    g = torch.Generator().manual_seed(1)
    qs, qe, G_s, G_e = (torch.randn(3, 5, generator=g, requires_grad=True) for _ in range(4))
    cached = [(torch.randn(3, 5, generator=g, requires_grad=True), torch.randn(3, 5, generator=g, requires_grad=True))
              for _ in range(2)]
    got = dp.neg_loss(torch, qs, qe, G_s, G_e, cached)
    keys_s = torch.cat([G_s, cached[0][0], cached[1][0]])
    keys_e = torch.cat([G_e, cached[0][1], cached[1][1]])
    want = (_ce(qs @ keys_s.T) + _ce(qe @ keys_e.T)) / 2       # B x (B + B*C) scores, positive on the diagonal
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-6)
    assert float(got.detach()) > float(dp.neg_loss(torch, qs, qe, G_s, G_e).detach())   # more negatives, larger loss here
    got.backward()
    assert G_s.grad is not None and qs.grad is not None
    assert all(t.grad is None for pair in cached for t in pair)    # §4.3: no gradient to the cached batches


def test_variants_need_a_dataset_that_evaluates_them(cfg):
    c = copy.deepcopy(cfg)
    c["methods"]["densephrases"]["variant_datasets"] = []
    ids = {j.id for j in dp.declare(c, "densephrases")}
    assert "densephrases" in ids and not any(i.startswith("densephrases.pb-") for i in ids)
    c["methods"]["densephrases"].update(variant_datasets=["smoke-ir"])
    with pytest.raises(ConfigError, match="variant_datasets: smoke-ir is in neither"):
        dp.declare(c, "densephrases")


def test_reader_disabled_while_distilling_is_a_config_error(cfg):
    c = copy.deepcopy(cfg)
    c["reader"]["enabled"] = False
    with pytest.raises(ConfigError, match="distill is true but the config has no enabled reader"):
        dp.declare(c, "densephrases")


# ------------------------------------------------------------------------------------------ end to end


def _brute_top1(dump, qs: np.ndarray, qe: np.ndarray, L: int) -> tuple[float, int, int]:
    """The best (score, start row, end row) over every valid phrase of the dump (Eq. 10 exactly)."""
    H = dump.all_vectors().astype(np.float64)
    doc, pos = np.asarray(dump.doc_rows), np.asarray(dump.positions)
    a, b = H @ qs.astype(np.float64), H @ qe.astype(np.float64)
    best = (-np.inf, -1, -1)
    for off in range(L):
        i = np.arange(len(H) - off)
        j = i + off
        ok = (doc[i] == doc[j]) & (pos[j] - pos[i] < L)
        sc = np.where(ok, a[i] + b[j], -np.inf)
        t = int(np.argmax(sc))
        if sc[t] > best[0]:
            best = (float(sc[t]), int(i[t]), int(j[t]))
    return best


def test_smoke_train_dump_index_search_and_query_side_finetuning(tmp_path, cfg, monkeypatch):
    """A few steps on the smoke fixture: pre-batch negatives switch on, the dump holds exactly the
    kept tokens, the Flat index's top phrase is the exact argmax of Eq. 10 over the dump, and
    query-side fine-tuning leaves the phrase encoder (and so the index) untouched. Where no training
    question retrieves a gold phrase (the rehearsal's two-step model, 2026-12-06: 0 of 168, so Eq. 11
    never stepped and its cost could not be priced), it stops without a step, unless fallbacks are
    allowed (the rehearsal's device_fallback): then each question's top phrase stands in for its gold,
    Eq. 11 steps at its batch, and the fallback is recorded."""
    from harness.config import results_root
    from harness.datasets import prepare as prepare_dataset
    from harness.indexes.phrase_dump import PhraseDump
    from harness.methods.base import Context
    from harness.job import Job

    c = copy.deepcopy(cfg)
    c["results_dir"] = str(tmp_path / "results")
    c["methods"]["densephrases"].update(
        epochs=2, max_train_questions=40, batch_size=8, distill=False, negatives="prebatch", prebatch_batches=2,
        prebatch_start=0.5, encode_batch_size=32, index_variants={"flat": "phrase:Flat"},
        filter={"threshold": 0.0}, qs={"epochs": 1, "max_train_questions": 16, "dev_questions": 8, "top_k": 20,
                                       "batch_size": 8})
    data = results_root(c) / "data" / "smoke"
    prepare_dataset("smoke", c["datasets"]["smoke"], c, data)
    s = dp.settings(c)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    info = dp.train(c, s, {"data": data}, model_dir)
    assert info["examples"] == 40 and info["steps"] == 10
    assert info["prebatch_from_step"] == 5 and info["prebatch_steps"] == 4   # step 5 fills the queue first
    assert info["loss_last"] < info["loss_first"]
    index_dir = tmp_path / "index"
    job = Job("index", "densephrases", "densephrases", "build", params={"variant": None, "gold_only": False})
    binfo = dp.build(Context(c, "densephrases", "smoke"), job, {"data": data, "model": model_dir, "train_data": data},
                     index_dir)
    dump = PhraseDump.open(index_dir / dp.DUMP_DIR)
    assert dump.ntotal == binfo["dump"]["tokens_kept"] < binfo["dump"]["tokens_seen"]   # threshold 0 drops some
    assert binfo["filter"] == {"threshold": 0.0, "tuned": False}
    model = dp.PhraseModel.load(s, model_dir)
    questions = ["what is the capital of france", "who wrote the book"]
    qs, qe = model.index_queries([dp.prepare(s, q) for q in questions])
    flat = dp.load_phrase_index(index_dir, "flat", s)
    L = int(s["max_phrase_len"])
    got = flat.search_phrases(qs, qe, k=dump.ntotal, top_phrases=1, max_phrase_len=L)
    for b in range(len(questions)):
        score, i, j = _brute_top1(dump, qs[b], qe[b], L)
        assert (got[b][0].start_row, got[b][0].end_row) == (i, j)
        assert got[b][0].score == pytest.approx(score, rel=1e-4)
    qs_dir = tmp_path / "qs"
    qs_dir.mkdir()
    qinfo = dp.train_qs(c, s, {"data": data, "model": model_dir, "index": index_dir}, qs_dir)
    assert [h["epoch"] for h in qinfo["history"]][:1] == [0] and qinfo["train_questions"] == 16
    tuned = dp.PhraseModel.load(s, qs_dir)
    for a, b in zip(model.phrase.state_dict().values(), tuned.phrase.state_dict().values()):
        assert torch.equal(a, b)                                    # Eq. 11 trains the question encoders only
    if qinfo["best_epoch"] > 0:
        assert not all(torch.equal(a, b) for a, b in zip(model.q_start.state_dict().values(),
                                                         tuned.q_start.state_dict().values()))
    from harness import cost
    from harness.methods.densephrases import qs as qs_module

    monkeypatch.setattr(qs_module, "_gold_mask", lambda phrases, answers, rule: [False] * len(phrases))
    for allowed in (False, True):
        cost.allow_fallbacks(allowed)
        out = tmp_path / f"qs-fallback-{allowed}"
        out.mkdir()
        got = dp.train_qs(c, s, {"data": data, "model": model_dir, "index": index_dir}, out)
        last = got["history"][-1]
        if allowed:
            assert got["steps"] == 2 and last["with_gold"] == 0 and last["stand_in_gold"] == 16   # 16 / batch 8
            assert cost.fallbacks() == [qs_module.STAND_IN]
        else:
            assert got["steps"] == 0 and last["with_gold"] == 0 and "fewer than 2" in last["why"]
            assert cost.fallbacks() == []
    cost.allow_fallbacks(False)


def test_dpr_reader_timing_reads_each_question(tmp_path, cfg, monkeypatch):
    """Table 1's DPR + reader row: the reader reads the timed question itself (not an empty one)
    over DPR's top passages, one call per question."""
    from harness.datasets import store
    from harness.methods import dpr
    from harness.methods.reader import Reader

    store.write_corpus(tmp_path, [Doc("d1", "", "one passage"), Doc("d2", "", "another passage")])
    read: list[tuple[str, list[str]]] = []

    class FakeSearcher:
        docids = ["d1", "d2"]

        def __init__(self, *_):
            pass

        def encode(self, texts):
            return np.zeros((len(texts), 4), np.float32)

        def search(self, vecs, k):
            return np.zeros((len(vecs), 2), np.float32), np.tile([1, 0], (len(vecs), 1))

    class FakeReader:
        def train(self, _):
            pass

        def predict(self, question, docs):
            read.append((question, [d.id for d in docs]))
            return {"answer": ""}

    monkeypatch.setattr(dpr, "Searcher", FakeSearcher)
    monkeypatch.setattr(Reader, "load", classmethod(lambda cls, *_: FakeReader()))
    questions = [f"question {i}" for i in range(64 * 7)]
    out = dp._time_child(cfg, "dpr", {"data": str(tmp_path), "dpr_index": "x", "dpr_model": "x", "reader": "x"},
                         questions, 10)
    assert out["qps"] > 0
    assert {q for q, _ in read} == set(questions)                 # every timed question, none empty
    assert all(ids == ["d2", "d1"] for _, ids in read)            # DPR's ranking, mapped to passages


@pytest.mark.parametrize("allowed", [True, False])
def test_the_timing_child_takes_the_jobs_fallback_rule_and_returns_what_it_took(tmp_path, cfg, monkeypatch, allowed):
    """measure densephrases.speed times each system in a fresh process, which allowed no fallback: the
    rehearsal's phrase index (fewer IVF lists on its slice, a fallback) was refused there while the
    search job read it. The child now takes the job's ``device_fallback`` and returns what it took."""
    from harness import cost
    from harness.datasets import store
    from harness.methods import dpr
    from harness.methods.densephrases import measure
    from harness.methods.reader import Reader

    store.write_corpus(tmp_path, [Doc("d1", "", "one passage")])

    class FakeSearcher:
        docids = ["d1"]

        def __init__(self, *_):
            cost.fallback("device cuda -> cpu: torch sees no CUDA device")

        def encode(self, texts):
            return np.zeros((len(texts), 4), np.float32)

        def search(self, vecs, k):
            return np.zeros((len(vecs), 1), np.float32), np.zeros((len(vecs), 1), int)

    class FakeReader:
        def train(self, _):
            pass

        def predict(self, question, docs):
            return {"answer": ""}

    monkeypatch.setattr(dpr, "Searcher", FakeSearcher)
    monkeypatch.setattr(Reader, "load", classmethod(lambda cls, *_: FakeReader()))
    try:
        out = measure._child(dp._time_child, {**cfg, "device_fallback": allowed}, "dpr",
                             {"data": str(tmp_path), "dpr_index": "x", "dpr_model": "x", "reader": "x"}, ["q"] * 8, 1)
    finally:
        cost.allow_fallbacks(False)
    assert out["fallbacks"] == (["device cuda -> cpu: torch sees no CUDA device"] if allowed else [])


# ------------------------------------------------------------------------------------------ the filter


def test_gold_tokens_are_the_answer_tokens_of_each_window_that_covers_it(tok):
    text = " ".join(f"word{i}" for i in range(120)) + " the answer is Blue Harbour today"
    doc = Doc("d", "Title", text)
    wins = dp.windows(tok, [doc], max_len=64, stride=16)
    scored = [dp.Scored(np.zeros(len(w.ids)), np.zeros(len(w.ids)), np.array(w.text + [False] * 3),
                        np.zeros(len(w.ids) + 3), w.offsets, text) for w in wins]
    got = dp.gold_tokens(scored, ["Blue Harbour"])
    assert got and all(0 <= w < len(wins) for w, _, _ in got)
    for w, a, b in got:
        assert text[wins[w].offsets[a][0]:wins[w].offsets[b][1]] == "Blue Harbour"
    assert {w for w, _, _ in got} == {i for i, w in enumerate(wins) if w.offsets[max(
        t for t, ok in enumerate(w.text) if ok)][1] >= len(text) - len(" today")}   # the last windows only
    assert dp.gold_tokens(scored, ["Red Sea"]) == [] and dp.gold_tokens([], ["Blue Harbour"]) == []


def test_threshold_keeps_em_and_the_gold_phrases():
    """densephrases.ib-b84 on small: 5 of 400 dev questions right, and the same 5 at a threshold that
    dropped 99 % of tokens and most gold phrases; EM alone chose it, the gold phrases rule it out."""
    grid = [{"threshold": 0.0, "em": 0.0125, "kept": 1.0, "gold_kept": 1.0},
            {"threshold": 0.5, "em": 0.0125, "kept": 0.94, "gold_kept": 0.99},
            {"threshold": 1.0, "em": 0.0125, "kept": 0.013, "gold_kept": 0.05},
            {"threshold": 2.0, "em": 0.0025, "kept": 0.0, "gold_kept": 0.0}]
    assert dp.choose_threshold(grid, 0.0125, 0.02)["threshold"] == 0.5
    assert dp.choose_threshold(grid, 0.0125, 0.02, gold=False)["threshold"] == 1.0   # EM alone (the old rule)
    assert dp.choose_threshold(grid, 0.0125, 0.001)["threshold"] == 0.0
    assert dp.choose_threshold(grid, 0.0, 0.02) is None                               # nothing to keep EM at
    assert dp.choose_threshold(grid[2:], 0.0125, 0.02) is None                        # every threshold drops gold


def _scored(keeps):
    return [[dp.Scored(np.zeros(len(k)), np.zeros(len(k)), np.array(v), np.array(k, dtype=np.float32),
                       [(i, i + 1) for i in range(len(k))], "x" * len(k)) for k, v in doc] for doc in keeps]


def test_threshold_for_kept_keeps_that_fraction_of_the_valid_tokens():
    """By hand: the valid logits are 0..9 (the invalid 100s never count): keeping 30 % puts the
    threshold at the 70th percentile, 6.3, above which 7, 8 and 9 keep."""
    scored = _scored([[([0, 1, 2, 100], [1, 1, 1, 0]), ([3, 4, 5], [1, 1, 1])], [([6, 7, 8, 9, 100], [1, 1, 1, 1, 0])]])
    thr, kept = dp.threshold_for_kept(scored, 0.3)
    assert thr == pytest.approx(6.3) and kept == pytest.approx(0.3)
    assert dp.threshold_for_kept(scored, 1.0)[1] == pytest.approx(0.9)   # ties at the minimum drop together
    with pytest.raises(ValueError):
        dp.threshold_for_kept(_scored([[([1.0], [0])]]), 0.5)


@pytest.mark.parametrize("kept_fraction", [None, 0.25])
def test_untunable_filter_keeps_kept_fraction_or_every_token(monkeypatch, cfg, kept_fraction):
    """Random weights (the rehearsal): dev EM 0 without the filter, so no grid entry can be chosen.
    Without filter.kept_fraction no token is filtered (the rehearsal's dump kept all 317,369, about
    13 TB projected); with it the threshold keeps that fraction of the dev tokens, and says why."""
    from harness.methods.densephrases import index as ix

    rng = np.random.default_rng(0)
    dev = [Query(f"q{i}", f"question {i}", ["nowhere"], [f"d{i}"]) for i in range(8)]
    docs = [Doc(f"d{i}", "", f"passage {i}") for i in range(8)]
    monkeypatch.setattr(ix, "dev_questions", lambda c, s: (dev, "smoke/train"))
    monkeypatch.setattr(ix.store, "iter_corpus", lambda folder: iter(docs))
    monkeypatch.setattr(ix, "score_passages", lambda model, qs, ds, s: _scored(
        [[(rng.normal(size=40), np.ones(40, bool))] for _ in ds]))
    c = copy.deepcopy(cfg)
    c["methods"]["densephrases"]["filter"] = {**c["methods"]["densephrases"]["filter"], "kept_fraction": kept_fraction}
    got = ix.tune_threshold(c, dp.settings(c), model=None)
    assert got["em_unfiltered"] == 0 and got["dev_questions"] == 8
    if kept_fraction is None:
        assert got["threshold"] is None and got["why"].endswith("no token filtered")
    else:
        assert got["threshold"] is not None and got["tuned"] is False
        assert got["kept_fraction_dev"] == pytest.approx(0.25, abs=1 / 320) and "filter.kept_fraction 0.25" in got["why"]


def test_paper_profile_dump_filters_and_builds_no_flat_reference():
    """The paper profile's phrase index: the footnote-8 IVF-SQ4 and the released OPQ index, no Flat
    reference over ~770M float32 token vectors; App. E's 25 % kept where the filter cannot be tuned."""
    paper = load_config(["configs/profiles/paper.yaml"])
    s = dp.settings(paper)
    assert set(dp.index_specs(s, gold_only=False)) == {"main", "opq"}
    assert s["filter"]["kept_fraction"] == 0.25 and s["filter"]["threshold"] is None
    assert s["filter"]["dev_questions"] == 500                                       # not smoke's 30 (default.yaml)
    assert "flat" in dp.index_specs(dp.settings(load_config()), gold_only=False)   # smoke keeps its exact reference


# ------------------------------------------------------------------------------------------ GradCache


def _smoke_examples(tmp_path, c, n: int):
    from harness.config import results_root
    from harness.datasets import prepare as prepare_dataset
    from harness.datasets import store

    data = results_root(c) / "data" / "smoke"
    prepare_dataset("smoke", c["datasets"]["smoke"], c, data)
    s = dp.settings(c)
    torch.manual_seed(0)
    model = dp.PhraseModel.from_backbone(c, s)
    docs = {d.id: d for d in store.iter_corpus(data)}
    questions = [q for q in store.read_queries(data, "train") if q.answers]
    exs, _ = dp.examples_of(s, model.tok, questions, docs)
    return data, s, model, exs[:n]


@pytest.mark.parametrize("shared", [False, True])
def test_a_step_in_sub_batches_gives_the_one_graph_loss_and_gradients(tmp_path, cfg, shared):
    """Every term of Eq. 9 (L_single, in-batch and pre-batch negatives, the teacher's KL, the filter's
    BCE) on a batch of 7 windows in GradCache sub-batches of 3 (3, 3, 1 windows and questions): the
    loss, its parts and every parameter's gradient are the one-graph step's (the model in eval mode:
    no dropout, so both see the same network); pre-batch negatives are queued once per step either way."""
    from collections import deque
    import random

    from harness.methods.densephrases.train import _step_fn

    c = copy.deepcopy(cfg)
    c["results_dir"] = str(tmp_path / "results")
    c["methods"]["densephrases"].update(shared_encoder=shared, negatives="prebatch", prebatch_batches=2)
    _, s, model, exs = _smoke_examples(tmp_path, c, 7)
    assert len(exs) == 7
    for m in model.modules():  # float64: the two orders of summation agree to 1e-15, not float32's 1e-3 of a
        m.to(torch.float64)    # near-zero gradient entry, so a wiring fault cannot hide in the tolerance
    g = np.random.default_rng(0)
    teacher = []
    for e in exs:
        ls, le = g.normal(size=len(e.window.ids)).astype(np.float32), g.normal(size=len(e.window.ids)).astype(np.float32)
        ls[:3] = le[:3] = np.nan  # tokens the reader does not see
        teacher.append((ls, le))
    index_of = {e.qid: i for i, e in enumerate(exs)}
    d = model.dim
    prior = [(torch.randn(7, d, dtype=torch.float64), torch.randn(7, d, dtype=torch.float64))]
    got = []
    for chunk in (0, 3):
        queue = deque(prior, maxlen=2)
        counts = {"prebatch_steps": 0}
        for p in (p for m in model.modules() for p in m.parameters()):
            p.grad = None
        step = _step_fn(torch, model, s, teacher, index_of, 0, queue, counts, chunk)
        loss, parts = step(exs, 1, random.Random(0))
        if loss.requires_grad:  # one graph: the loop's backward
            loss.backward()
        grads = {f"{i}.{n}": p.grad.clone() for i, m in enumerate(model.modules()) for n, p in m.named_parameters()
                 if p.grad is not None}
        got.append((loss.requires_grad, float(loss.detach()), parts, grads, len(queue), counts["prebatch_steps"]))
    (graph0, l0, p0, g0, q0, c0), (graph1, l1, p1, g1, q1, c1) = got
    assert graph0 and not graph1  # chunk 3 ran the GradCache step: its own backward, a detached loss
    assert set(p0) == {"single", "neg", "distill", "filter"} and p0.keys() == p1.keys()
    assert l1 == pytest.approx(l0, rel=1e-12)
    for k in p0:
        assert p1[k] == pytest.approx(p0[k], rel=1e-12, abs=1e-14), k
    assert (q0, c0) == (q1, c1) == (2, 1)
    assert g0.keys() == g1.keys() and any(k.startswith(f"{len(model.modules()) - 1}.") for k in g0)  # the filter's too
    for k in g0:
        assert torch.allclose(g0[k], g1[k], rtol=1e-9, atol=1e-12), (k, (g0[k] - g1[k]).abs().max())
    assert sum(float(v.abs().sum()) for v in g0.values()) > 0


def test_densephrases_trains_in_sub_batches_as_in_one_graph(tmp_path, cfg, monkeypatch):
    """``methods.densephrases.grad_cache_chunk``: two optimizer steps of the train job at batch 8 in
    sub-batches of 3 log the one-graph run's losses (dropout off) and record the setting; a runtime key,
    so the model's identity (its plan hash) is the one-graph model's; the key a job out of memory names."""
    import csv

    from harness.methods.base import sub_batch_key
    from harness.plan import get

    orig = torch.nn.Module.train
    monkeypatch.setattr(torch.nn.Module, "train", lambda self, mode=True: orig(self, False))
    losses, hashes = {}, {}
    for chunk in (0, 3):
        c = copy.deepcopy(cfg)
        c["results_dir"] = str(tmp_path / f"r{chunk}")
        c["methods"]["densephrases"].update(epochs=1, max_train_questions=16, batch_size=8, distill=False,
                                            negatives="inbatch", log_every=1, grad_cache_chunk=chunk)
        data, s, _, _ = _smoke_examples(tmp_path, c, 0)
        out = tmp_path / f"m{chunk}"
        out.mkdir()
        info = dp.train(c, dp.settings(c), {"data": data}, out)
        assert info["steps"] == 2 and info["grad_cache_chunk"] == chunk
        with open(out / "loss.tsv", encoding="utf-8") as fh:
            losses[chunk] = [float(r["loss"]) for r in csv.DictReader(fh, delimiter="\t")]
        p = get(c)
        hashes[chunk] = p.hash(p.job("train", "densephrases", None))
    assert losses[3][0] == pytest.approx(losses[0][0], rel=1e-5)
    assert losses[3][1] == pytest.approx(losses[0][1], rel=1e-4)
    assert hashes[0] == hashes[3]
    assert sub_batch_key("densephrases") == "methods.densephrases.grad_cache_chunk"
