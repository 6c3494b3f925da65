"""DensePhrases' own logic (harness/methods/densephrases.py): the span search of one passage against a
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


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


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
    assert jobs[("index", "densephrases.pb-c2")].params["gold_only"] is True
    assert jobs[("index", "densephrases")].params["gold_only"] is False
    em = jobs[("measure", "densephrases.em")]
    assert {"densephrases", "densephrases.flat", "densephrases.opq", "densephrases.qs", "densephrases.pb-c2"} <= set(em.systems)
    rc = jobs[("measure", "densephrases.rc")]
    assert "densephrases.rc" in rc.systems and "densephrases.shared-rc" in rc.systems
    assert dp.settings(cfg, "pb-c4")["prebatch_batches"] == 4
    assert dp.settings(cfg, "ref")["distill"] is True and dp.settings(cfg, "nodistill")["distill"] is False
