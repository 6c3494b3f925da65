"""SVDR efficiency figures (Tables 2, 5, index facts): files, units, devices, bookkeeping.
Never asserts speed: only that figures exist, are positive and add up as documented."""
from __future__ import annotations

import json

import pytest

from harness.config import load_config
from harness.meta import write_meta
from harness.methods import vdr as eff
from harness.methods.base import Context

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def model(tmp_path_factory, smoke_context, train_on_smoke):
    root = tmp_path_factory.mktemp("eff")
    ctx = smoke_context(root, "svdr", {
        "epochs": 1, "batch_size": 8, "max_train_questions": 16, "p_max_len": 48, "q_max_len": 16, "topk": 32,
        "retrieval_start": 1.0, "latency": {"batches": 1, "rerank_batches": 1},
        "synthetic": {"passages": 3000, "vocab": 2000, "densities": [16, 32], "batch_sizes": [4, 8],
                      "base_density": 16, "base_batch": 4, "query_active": 50, "k": 5}},
        overrides={"timing": {"repeats": 3}})
    out, _ = train_on_smoke(ctx, root)
    return root, ctx, out


def _load(path):
    return json.loads(path.read_text())


def test_latency_rows_units_devices_and_totals(model, tmp_path):
    _, ctx, out = model
    paths = eff.latency(ctx, out, tmp_path)
    assert sorted(p.name for p in paths) == ["svdr.lat-alpha.json", "svdr.lat-beta.json", "svdr.lat-full.json"]
    full, alpha, beta = (_load(tmp_path / f"svdr.lat-{r}.json") for r in ("full", "alpha", "beta"))
    assert set(full["values"]) >= {"E_D", "E_q_cpu", "f_cpu", "search_total", "total"} and "T_D" not in full["values"]
    assert set(alpha["values"]) >= {"E_D", "T_q", "f_cpu"} and "E_q_cpu" not in alpha["values"]
    assert set(beta["values"]) >= {"T_D", "E_q_cpu", "f_cpu"} and "E_D" not in beta["values"]
    for row in (full, alpha, beta):
        assert row["not_run"]["f_cuda"].startswith("timing.device is cpu")     # CPU profile: why, not a literal
        assert row["values"]["search_total"]["kind"] == "projected"   # 1 of the 2 test batches timed
        assert "kind" not in row["values"][("T_D" if "T_D" in row["values"] else "E_D")]   # the whole corpus: measured
        assert all(v["unit"] == "s" and v["value"] > 0 and v["device"] == "cpu" for v in row["values"].values())
        v = row["values"]
        q = v.get("E_q_cpu", v.get("T_q"))["value"]
        assert v["search_total"]["value"] == pytest.approx(q + v["f_cpu"]["value"])
        index = v.get("T_D", v.get("E_D"))["value"]
        assert v["total"]["value"] == pytest.approx(v["search_total"]["value"] + index)
        assert row["test_batches"] == 2 and row["timed_batches"] == 1 and row["repeats"] == 3
        assert len(row["raw_samples_seconds"]["f_beta"]) == 3
    # per-batch figure x test batches = total
    assert full["values"]["E_q_cpu"]["value"] == pytest.approx(2 * full["values"]["E_q_per_batch"]["value"])
    rerank = eff.latency_rerank(ctx, out, tmp_path / "svdr.lat-beta.json", [5, 20], tmp_path)
    assert [p.name for p in rerank] == ["svdr.lat-beta-m5.json", "svdr.lat-beta-m20.json"]
    m20 = _load(tmp_path / "svdr.lat-beta-m20.json")["values"]
    # the beta row it adds to is named as its sibling: the job writes into a temporary folder, renamed after
    assert _load(tmp_path / "svdr.lat-beta-m20.json")["base"] == "svdr.lat-beta.json"
    assert m20["T_D"] == beta["values"]["T_D"] and m20["E_p"]["value"] > 0
    assert m20["search_total"]["value"] == pytest.approx(beta["values"]["search_total"]["value"] + m20["E_p"]["value"])


def test_index_metrics_from_meta(tmp_path):
    for name, nbytes, secs in (("t", 100, 1.0), ("e", 1000, 8.0)):
        d = tmp_path / name
        d.mkdir()
        (d / "blob").write_bytes(b"x" * nbytes)
        write_meta(d, "index", extra={"memory_bytes": nbytes, "build_seconds": secs, "density": 0.1})
    cfg = load_config([], overrides={"results_dir": str(tmp_path / "r")})
    out = eff.write_index_metrics(Context(cfg, "svdr", "smoke"), tmp_path / "t", tmp_path / "e", tmp_path / "m.json")
    v = _load(out)["values"]
    assert v["token_index_bytes"] == {"value": 100.0, "unit": "B"}
    assert v["token_to_emb_bytes"]["value"] == pytest.approx(0.1)
    assert v["token_to_emb_build_seconds"]["value"] == pytest.approx(1 / 8)


def test_synthetic_rows(model, tmp_path):
    _, ctx, _ = model
    paths = eff.synthetic(ctx, tmp_path)
    assert sorted(p.name for p in paths) == sorted(["svdr.synth-a16.json", "svdr.synth-a32.json",
                                                    "svdr.synth-bs4.json", "svdr.synth-bs8.json"])
    a16, a32 = _load(tmp_path / "svdr.synth-a16.json"), _load(tmp_path / "svdr.synth-a32.json")
    assert a32["values"]["memory_bytes"]["value"] > a16["values"]["memory_bytes"]["value"]   # denser index, more postings
    assert a16["values"]["storage_bytes"]["value"] > 0 and a16["passages"] == 3000
    bs8 = _load(tmp_path / "svdr.synth-bs8.json")["values"]
    assert bs8["latency_per_query"]["value"] == pytest.approx(bs8["latency_per_batch"]["value"] / 8)


def test_synthetic_postings_fill_one_buffer_with_the_draws_of_lists_and_concatenation():
    """synthetic_postings writes each token's draw into one buffer (a list of arrays and their
    concatenation held every posting twice): the same postings, for the same seed, as that list built
    here, a token present in every passage (p >= 1) included."""
    import numpy as np

    from harness.methods.vdr.synthetic import synthetic_postings, zipf_df

    n, vocab, tokens, a = 5000, 300, 60.0, 0.8
    indptr, ids, p = synthetic_postings(n, vocab, tokens, a, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    ref = np.empty(vocab)
    ref[rng.permutation(vocab)] = zipf_df(vocab, tokens, a)
    lists = []
    for t in range(vocab):
        if ref[t] >= 1.0:
            lists.append(np.arange(n, dtype=np.int32))
            continue
        m = int(n * ref[t] + 6 * np.sqrt(n * ref[t]) + 16)
        pos = np.cumsum(rng.geometric(ref[t], m)) - 1
        while pos[-1] < n:
            pos = np.concatenate([pos, pos[-1] + np.cumsum(rng.geometric(ref[t], m))])
        lists.append(pos[pos < n].astype(np.int32))
    assert (ref >= 1.0).any()  # the case of a token in every passage is exercised
    np.testing.assert_array_equal(p, ref)
    np.testing.assert_array_equal(ids, np.concatenate(lists))
    np.testing.assert_array_equal(np.diff(indptr), [x.size for x in lists])
    assert ids.dtype == np.int32 and indptr[-1] == ids.size


def test_the_synthetic_index_refuses_a_size_beyond_the_machines_memory_naming_what_it_needs(monkeypatch):
    """The paper profile's Table 5 job (10M passages, densities up to 1,024) needs ~62 GiB: on a
    machine with less it fails before drawing anything, naming the GiB; the paper profile books it."""
    import importlib

    import harness.cost
    from harness.config import load_config
    from harness.errors import ResourceError

    syn = importlib.import_module("harness.methods.vdr.synthetic")  # the package's `synthetic` is the step

    paper = load_config(["configs/profiles/paper.yaml"])
    s = {**syn.synthetic_defaults(), **paper["methods"]["svdr"]["synthetic"]}
    need = syn.synthetic_bytes(int(s["passages"]), sorted(set(s["densities"]) | {s["base_density"]}), int(s["base_density"]))
    assert need == 10_000_000 * 1024 * 6 + 10_000_000 * 256 * 2
    assert paper["scheduler"]["mem_mb"]["measure svdr.synthetic"] * 2**20 > need * 1.2
    monkeypatch.setattr(harness.cost, "mem_available", lambda: 24 * 2**30)
    with pytest.raises(ResourceError, match=r"10,000,000 passages at density 1,024 need about 62\.0 GiB.*24\.0 GiB available"):
        syn._check_memory(int(s["passages"]), [256, 512, 1024], 256)
    syn._check_memory(3000, [16, 32], 16)  # a small one passes


def test_baseline_rows_time_the_index_as_the_svdr_rows_do(tmp_path, monkeypatch):
    """Table 2's BM25 and DPR rows build their index latency.index_repeats times over latency.corpus_sample's
    first passages, scaled to the corpus (projected), as T(D) and E(D) of the SVDR rows are: the paper
    profile (repeats: the protocol's 10, corpus_sample 1M) rebuilt NQ's 21M-passage BM25 and DPR indexes
    ten times each before. Worked by hand: 2 s a build of 5 of 20 passages -> T(D) 8 s."""
    from harness.datasets import Doc, Query, store
    from harness.methods import bm25

    data = tmp_path / "data"
    data.mkdir()
    store.write_corpus(data, [Doc(f"d{i}", f"title {i}", f"text {i}") for i in range(20)])
    store.write_queries(data, "test", [Query(f"q{i}", f"query {i}") for i in range(4)])
    built: list[int] = []

    def fake_build(ctx, job, inputs, out):
        built.append(store.corpus_size(inputs["data"]))
        return {"build_seconds": 2.0}

    class FakeSearcher:
        def __init__(self, *a, **k):
            pass

        def encode(self, texts):
            return list(texts)

        def search(self, texts, k):
            return {str(i): [] for i in range(len(texts))}

    monkeypatch.setattr(bm25, "build", fake_build)
    monkeypatch.setattr(bm25, "Searcher", FakeSearcher)
    cfg = load_config([], overrides={"results_dir": str(tmp_path / "r"), "timing": {"repeats": 3},
                                     "methods": {"svdr": {"latency": {"baselines": ["bm25"], "index_repeats": 1,
                                                                      "corpus_sample": 5}}}})
    [path] = eff.latency_baselines(Context(cfg, "svdr", "smoke"), {"data": data, "bm25_index": tmp_path}, tmp_path / "o")
    row = _load(path)
    assert built == [5]   # once, over the sample
    assert row["values"]["T_D"]["value"] == pytest.approx(8.0) and row["values"]["T_D"]["kind"] == "projected"
    assert (row["timed_passages"], row["corpus_passages"], row["corpus_scale"], row["index_repeats"]) == (5, 20, 4.0, 1)
    assert row["repeats"] == 3   # the searches keep the profile's repeats
    # without a sample or index repeats: the whole corpus, the profile's repeats, as measured
    cfg["methods"]["svdr"]["latency"] = {"baselines": ["bm25"]}
    built.clear()
    [path] = eff.latency_baselines(Context(cfg, "svdr", "smoke"), {"data": data, "bm25_index": tmp_path}, tmp_path / "o2")
    row = _load(path)
    assert built == [20, 20, 20] and row["values"]["T_D"]["value"] == pytest.approx(2.0)
    assert "kind" not in row["values"]["T_D"] and row["corpus_scale"] == 1.0
