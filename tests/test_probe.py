"""harness.models.probe: the checks that tell a pretrained backbone from the same architecture with
random weights (docs/backbones.md). On the smoke fixture's test questions (63, against 600 passages
of synthetic towns): the bundled splade-tiny, used as an untrained SPLADE retriever, must beat its
randomly initialised twin by a wide margin, or the check could not tell the two apart."""
from __future__ import annotations

import pytest

from harness.config import load_config
from harness.datasets import smoke
from harness.evaluate.ir import evaluate
from harness.models import probe
from harness.models.backbones import model_dir


@pytest.fixture(scope="module")
def collection():
    docs = smoke.read_corpus(smoke.fixture_files()[0])
    splits = smoke.read_questions(smoke.fixture_files()[1], {d.id for d in docs}, smoke.fixture_files()[0])
    test = splits["test"]
    return ([(d.id, f"{d.title} {d.text}") for d in docs], [(q.id, q.text) for q in test],
            {q.id: {g: 1 for g in q.gold} for q in test})


@pytest.fixture(scope="module")
def splade():
    path = model_dir("splade-tiny", load_config()["backbones"]["splade-tiny"])
    return probe.load(path, True), probe.random_twin(path, True, seed=0)


def test_zero_shot_splade_beats_its_random_twin(collection, splade):
    docs, queries, qrels = collection
    (run, pre), (rnd_run, rnd) = (probe.zero_shot(m, docs, queries, "sparse", max_length=128) for m in splade)
    assert pre["queries"] == len(queries) == len(run) and pre["documents"] == len(docs)
    assert all(len(r) == 100 for r in run.values())  # exact top 100 of each query
    ndcg, rnd_ndcg = (evaluate(qrels, r, ["nDCG@10"])["nDCG@10"] for r in (run, rnd_run))
    assert 0.0 <= rnd_ndcg < 0.3 < 0.6 < ndcg <= 1.0, (ndcg, rnd_ndcg)
    assert pre["active_terms_per_doc"] < 0.5 * 30522  # SPLADE: sparse over the vocabulary


def test_mlm_probe_reads_the_mask_position(splade):
    pre, rnd = (probe.mlm_probe(m, k=5) for m in splade)
    assert pre["of"] == len(probe.PROBES) and len(pre["probes"][0]["top"]) == 5
    assert rnd["hits"] <= pre["hits"]
    # a model with no MLM head says so rather than scoring 0
    assert probe.mlm_probe(probe.Loaded(splade[0].tokenizer, splade[0].encoder, None))["hits"] is None


def test_dense_vectors_are_mean_pooled_over_real_tokens(splade):
    import numpy as np

    m = splade[0]
    one = probe.encode(m, ["a town by the sea"], "dense")
    padded = probe.encode(m, ["a town by the sea", "a much longer sentence about a town by the sea and its harbour"], "dense")
    assert one.shape == (1, 128) and one.dtype == np.float32
    np.testing.assert_allclose(padded[0], one[0], rtol=1e-4, atol=1e-5)  # padding does not enter the mean
