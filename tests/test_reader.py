"""The extractive reader: answer spans, training instances, a tiny training run, EM over runs."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.config import load_config
from harness.datasets import Doc, prepare, store
from harness.methods import reader
from harness.methods.base import Context
from harness.runs import write_run


def test_find_answer_respects_word_boundaries():
    assert reader.find_answer("The Kanmor Works opened in 1889.", ["1889"]) == (27, 31)
    assert reader.find_answer("Born in 18890, not 1889", ["1889"]) == (19, 23)
    assert reader.find_answer("nothing here", ["1889", ""]) is None
    assert reader.find_answer("In PARIS and in Lyon", ["paris", "lyon"]) == (3, 8)  # earliest, case-insensitive


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("reader")
    cfg = load_config([], overrides={"results_dir": str(root / "results"), "reader": {
        "epochs": 1, "max_train_questions": 48, "negative_passages": 3, "p_max_len": 128, "lr": 5e-4}})
    ctx = Context(cfg, "reader", "smoke")
    ctx.data_dir().mkdir(parents=True)
    prepare("smoke", cfg["datasets"]["smoke"], cfg, ctx.data_dir())
    docs = list(store.iter_corpus(ctx.data_dir()))
    # a fake retriever run: the gold passage at rank 3 behind two others, for train and test
    runs = {}
    for split in ("train", "test"):
        qs = store.read_queries(ctx.data_dir(), split)
        res = {q.id: [(docs[(i * 7) % len(docs)].id, 3.0), (docs[(i * 7 + 1) % len(docs)].id, 2.0), (q.gold[0], 1.0)]
               + [(d.id, 0.5 - j * 1e-3) for j, d in enumerate(docs[:10])] for i, q in enumerate(qs)}
        runs[split] = root / f"{split}.trec"
        write_run(runs[split], res, tag="fake")
    return ctx, runs, root


def test_span_tokens_point_at_the_answer(setup):
    ctx, _, _ = setup
    r = reader.Reader.from_backbone(ctx)
    doc = Doc("d1", "Kanmor Works", "The works were founded by Edda Lind in 1889 near the river.")
    enc, offsets, mask, starts = r.batch(["who founded the works?"], [doc])
    span = reader._span_tokens(offsets[0], mask[0], reader.find_answer(doc.text, ["Edda Lind"]), starts[0])
    toks = r.tok.convert_ids_to_tokens(enc["input_ids"][0][span[0]:span[1] + 1])
    assert r.tok.convert_tokens_to_string(toks) == "edda lind"
    # the title and the question are never answer tokens
    assert not mask[0][: enc.sequence_ids(0).index(1) + 2].any()


def test_text_mask_is_the_token_by_token_rule(setup):
    """reader.text_mask (tensor ops) marks the tokens the old per-token loop marked: second sequence,
    at or after the title prefix, non-empty offsets — with and without titles, truncated and padded."""
    import torch

    ctx, _, _ = setup
    r = reader.Reader.from_backbone(ctx)
    docs = list(store.iter_corpus(ctx.data_dir()))[:12] + [Doc("x", "", "no title here"), Doc("y", "T", "")]
    docs[0] = Doc(docs[0].id, docs[0].title, docs[0].text * 20)  # longer than max_len: truncated
    enc, offsets, mask, starts = r.batch(["who founded the works?"] * len(docs), docs)
    want = torch.zeros_like(enc["input_ids"], dtype=torch.bool)
    for i, start in enumerate(starts):
        for t, sid in enumerate(enc.sequence_ids(i)):
            if sid == 1 and offsets[i, t, 0] >= start and offsets[i, t, 1] > offsets[i, t, 0]:
                want[i, t] = True
    assert mask.dtype == torch.bool and torch.equal(mask, want)
    assert want.any(1)[:-1].all() and not want[-1].any() and (~want).any()


def test_training_instances(setup):
    ctx, runs, _ = setup
    inst, stats = reader.training_instances(ctx, runs["train"])
    assert stats["questions"] == 48 and len(inst) == 48 - stats["skipped"]
    docs = {d.id: d for d in store.iter_corpus(ctx.data_dir())}
    for q, pos, negs in inst:
        assert reader.find_answer(docs[pos].text, q.answers) is not None
        assert len(negs) == 3 and pos not in negs


@pytest.fixture(scope="module")
def trained(setup):
    ctx, runs, root = setup
    out = root / "model"
    info = reader.train(ctx, out, runs["train"])
    return ctx, runs, out, info


def test_training_moves_the_loss(trained):
    _, _, _, info = trained
    assert info["steps"] == 12 and info["instances"] == 48
    assert np.mean(info["loss_last"]) < np.mean(info["loss_first"])


def test_predictions_are_spans_of_the_selected_passage_and_round_trip(trained):
    ctx, _, out, _ = trained
    docs = list(store.iter_corpus(ctx.data_dir()))[:5]
    a = reader.Reader.load(ctx, out)
    a.train(False)
    p = a.predict("Who founded the works?", docs)
    text = next(d for d in docs if d.id == p["passage"]).text
    assert p["answer"] and p["answer"] in text
    assert len(a.tok.tokenize(p["answer"])) <= a.max_answer_len
    b = reader.Reader.load(ctx, out)
    b.train(False)
    assert b.predict("Who founded the works?", docs) == p
    assert a.predict("anything", [])["answer"] == ""


def test_exact_match_of_runs_and_cli(trained, tmp_path):
    ctx, runs, out, _ = trained
    res = reader.exact_match_of_runs(ctx, out, {"a": runs["test"], "b": runs["test"]}, "smoke")
    assert res["a"]["em"] == res["b"]["em"] and 0.0 <= res["a"]["em"] <= 1.0
    assert res["a"]["questions"] == 63
    preds = res["a"]["predictions"]
    assert sum(p["em"] for p in preds) / len(preds) == pytest.approx(res["a"]["em"])
    # "b" gives every question the passages "a" gave it: read once, the same answers as reading "b" alone
    assert res["a"]["read"] == res["b"]["read"] == 63
    alone = reader.exact_match_of_runs(ctx, out, {"b": runs["test"]}, "smoke")["b"]
    assert json.dumps(alone["predictions"]) == json.dumps(res["b"]["predictions"])
    import shutil

    from harness.job import Job

    job = Job("measure", "reader.em", "reader", "measure_em", "smoke", systems=("x", "y"))
    inputs = {"data": ctx.data_dir(), "model": out}
    for i, system in enumerate(job.systems):
        (tmp_path / system).mkdir()
        shutil.copyfile(runs["test"], tmp_path / system / f"{system}.trec")
        inputs[f"run_{i}"] = tmp_path / system
    (tmp_path / "em").mkdir()
    reader.measure_em(ctx, job, inputs, tmp_path / "em")
    doc = json.loads((tmp_path / "em" / "x.json").read_text())
    assert doc["values"]["em"]["unit"] == "ratio" and doc["values"]["em"]["value"] == pytest.approx(res["a"]["em"])
    assert doc["values"]["reader_params_millions"]["value"] > 1
    assert len(doc["predictions"]) == 63   # every question's EM: a claim's paired test uses them all
    assert doc["device_info"]["device"] == "cpu"


def test_the_em_job_reads_on_its_sections_device(trained, tmp_path):
    """The EM job reads on the reader section's device, as index and search jobs encode on theirs
    (the paper profile books it a GPU for NQ's 3,610 questions x 20 passages x 6 systems; it read them
    on the CPU whatever the section said): ``device: cuda`` on a machine without one fails naming the
    setting, or, under ``device_fallback`` (the rehearsal), reads here and records the fallback."""
    import shutil

    from harness import cost
    from harness.errors import ConfigError
    from harness.job import Job

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the job reads there (test_the_readers_answers_on_the_gpu_are_the_cpus)")
    ctx, runs, out, _ = trained
    cuda = Context({**ctx.cfg, "reader": {**ctx.cfg["reader"], "device": "cuda", "max_test_questions": 8}}, "reader", "smoke")
    job = Job("measure", "reader.em", "reader", "measure_em", "smoke", systems=("x",))
    (tmp_path / "x").mkdir()
    shutil.copyfile(runs["test"], tmp_path / "x" / "x.trec")
    inputs = {"data": ctx.data_dir(), "model": out, "run_0": tmp_path / "x"}
    for d in ("strict", "fallback"):
        (tmp_path / d).mkdir()
    cost.allow_fallbacks(False)
    with pytest.raises(ConfigError, match="device: cuda"):
        reader.measure_em(cuda, job, inputs, tmp_path / "strict")
    assert not (tmp_path / "strict" / "x.json").exists()
    cost.allow_fallbacks(True)
    try:
        reader.measure_em(cuda, job, inputs, tmp_path / "fallback")
        assert cost.fallbacks() == ["device cuda -> cpu: torch sees no CUDA device"]
    finally:
        cost.allow_fallbacks(False)
    doc = json.loads((tmp_path / "fallback" / "x.json").read_text())
    assert doc["device_info"]["device"] == "cpu" and len(doc["predictions"]) == 8


@pytest.mark.gpu
def test_the_readers_answers_on_the_gpu_are_the_cpus(trained):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    ctx, _, out, _ = trained
    docs = list(store.iter_corpus(ctx.data_dir()))[:8]
    cpu, gpu = reader.Reader.load(ctx, out), reader.Reader.load(ctx, out, "cuda")
    for m in (cpu, gpu):
        m.train(False)
    for q in ("Who founded the works?", "When was it built?"):
        a, b = cpu.predict(q, docs), gpu.predict(q, docs)
        assert (a["answer"], a["passage"]) == (b["answer"], b["passage"]) and a["score"] == pytest.approx(b["score"], abs=1e-3)


@pytest.mark.gpu
def test_densephrases_teacher_logits_on_the_gpu_are_the_cpus(trained):
    """DensePhrases' distillation reads every training example through the reader once, on the
    training's device (the paper profile's CUDA; it read them on the CPU before)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from harness.datasets import Query
    from harness.methods import densephrases as dp
    from harness.models.backbones import load_tokenizer

    ctx, _, out, _ = trained
    cfg = load_config()
    docs = {"a": Doc("a", "Paris", "Paris is the capital of France."), "b": Doc("b", "Rome", "Rome is old and big.")}
    exs, _ = dp.examples_of(dp.settings(cfg), load_tokenizer(cfg, "splade-tiny"),
                            [Query("1", "capital of france?", ["Paris"], ["a"]), Query("2", "what is old?", ["Rome"], ["b"])], docs)
    cpu = dp.teacher_logits(ctx.cfg, out, exs)
    gpu = dp.teacher_logits(ctx.cfg, out, exs, device="cuda")
    for (a_s, a_e), (b_s, b_e) in zip(cpu, gpu, strict=True):
        assert np.allclose(a_s, b_s, atol=1e-3, equal_nan=True) and np.allclose(a_e, b_e, atol=1e-3, equal_nan=True)


def test_em_sample_is_seeded(setup, trained):
    ctx, runs, out, _ = trained
    cfg = {**ctx.cfg, "reader": {**ctx.cfg["reader"], "max_test_questions": 10}}
    c2 = Context(cfg, "reader", "smoke")
    a = reader.exact_match_of_runs(c2, out, {"s": runs["test"]}, "smoke")["s"]
    b = reader.exact_match_of_runs(c2, out, {"s": runs["test"]}, "smoke")["s"]
    assert a["questions"] == 10 and a["test_questions"] == 63
    assert [p["id"] for p in a["predictions"]] == [p["id"] for p in b["predictions"]]
    assert json.dumps(a["predictions"]) == json.dumps(b["predictions"])


def test_a_reader_trained_in_sub_batches_trains_as_in_one_graph(setup, tmp_path, monkeypatch):
    """reader.sub_batch: 2 questions (each with its 4 passages) per forward and backward pass of a batch
    of 4 gives the one-graph step's loss and the same trained weights (dropout off, so both see the same
    network); it is a runtime setting; each sub-batch back-propagates through the loop's backward (fp16:
    scaled), never its own."""
    import csv
    import copy

    import torch
    from safetensors.torch import load_file

    from harness.plan import get

    orig = torch.nn.Module.train
    monkeypatch.setattr(torch.nn.Module, "train", lambda self, mode=True: orig(self, False))
    ctx, runs, _ = setup
    out = {}
    for chunk in (0, 2):
        cfg = copy.deepcopy(ctx.cfg)
        cfg["reader"].update(sub_batch=chunk, max_train_questions=8, log_every=1)
        out[chunk] = tmp_path / f"c{chunk}"
        info = reader.train(Context(cfg, "reader", "smoke"), out[chunk], runs["train"])
        assert info["steps"] == 2
    losses = {c: [float(r["loss"]) for r in csv.DictReader(open(out[c] / "loss.tsv", encoding="utf-8"), delimiter="\t")]
              for c in out}
    assert losses[2][0] == pytest.approx(losses[0][0], rel=1e-5) and losses[2][1] == pytest.approx(losses[0][1], rel=1e-4)
    weights = [load_file(next(out[c].rglob("*.safetensors"))) for c in (0, 2)]
    for name, w in weights[0].items():
        assert torch.allclose(w, weights[1][name], atol=5e-4), name
    diff = torch.cat([(w - weights[1][n]).abs().flatten() for n, w in weights[0].items()])
    assert diff.mean().item() < 1e-7 and diff.max().item() < 5e-4  # (7e-10 and 4e-5 seen: Adam moves a weight by up to lr)
    # a runtime setting: the model's identity is the one-graph model's
    plans = []
    for chunk in (0, 2):
        cfg = copy.deepcopy(ctx.cfg)
        cfg["reader"]["sub_batch"] = chunk
        p = get(cfg)
        plans.append(p.hash(p.job("train", "reader", None)))
    assert plans[0] == plans[1]
    import harness.train as loop

    calls = []
    monkeypatch.setattr(loop, "backward", lambda x: calls.append(1) or x.backward())
    cfg = copy.deepcopy(ctx.cfg)
    cfg["reader"].update(sub_batch=2, max_train_questions=4, log_every=1)
    reader.train(Context(cfg, "reader", "smoke"), tmp_path / "through-the-loop", runs["train"])
    assert len(calls) == 2  # one step of 4 questions: two sub-batches, each through the loop's backward
