"""LightRetriever's own logic (harness/methods/lightretriever/): config checks, the cached-token
query encoder against separate forward passes, the sparse sides, losses, impacts, top-k, and a
decoder backbone (a randomly initialised tiny Llama with LoRA through peft) trained, indexed and
searched end to end on the smoke fixture."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import scipy.sparse as sps
import torch

from harness.config import load_config
from harness.errors import ConfigError
from harness.methods import lightretriever as lr

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cfg():
    return load_config()


def _cfg_with(cfg, **changes):
    c = copy.deepcopy(cfg)
    c["methods"]["lightretriever"].update(changes)
    return c


# ------------------------------------------------------------------------------------------ config


def test_missing_instruction_for_an_evaluation_set_fails_naming_it(cfg):
    c = _cfg_with(cfg, instructions={"smoke": "x"})
    with pytest.raises(ConfigError, match=r"instructions has no instruction for dataset 'smoke-ir'"):
        lr.declare(c, "lightretriever")


def test_evaluation_set_must_be_on_the_test_side_of_decontam(cfg):
    c = copy.deepcopy(cfg)
    c["decontam"] = {**c["decontam"], "test": []}
    with pytest.raises(ConfigError, match=r"evaluation set smoke-ir is not on the test side of config key decontam"):
        lr.declare(c, "lightretriever")
    c["decontam"] = {**cfg["decontam"], "train": []}
    with pytest.raises(ConfigError, match=r"smoke \(train split\) is not on the training side"):
        lr.declare(c, "lightretriever")


def test_variants_have_their_own_models_and_systems(cfg):
    jobs = {(j.stage, j.id): j for j in lr.declare(cfg, "lightretriever")}
    assert ("train", "lightretriever.nokl") in jobs and ("train", "lightretriever.ref") in jobs
    assert jobs[("search", "lightretriever.binary")].systems == ("lightretriever.binary-sparse",)
    assert jobs[("search", "lightretriever.nokl-hybrid")].params["how"] == "interpolate"
    assert jobs[("search", "lightretriever.hybrid")].params["alpha"] == pytest.approx(0.7)
    # a variant's model hash covers its settings; the main model's does not
    assert "methods.lightretriever.variants.nokl" in jobs[("train", "lightretriever.nokl")].keys
    assert not any("variants" in k for k in jobs[("train", "lightretriever")].keys)
    # the training instruction is part of the model, the evaluation instruction only of the search
    assert "methods.lightretriever.instructions.smoke" in jobs[("train", "lightretriever")].keys
    assert "methods.lightretriever.instructions.smoke-ir" in jobs[("search", "lightretriever")].keys


# ------------------------------------------------------------------------------------------ pieces


def test_contrastive_target_is_each_querys_own_positive():
    scores = torch.full((2, 4), -10.0)
    scores[0, 0] = scores[1, 2] = 10.0     # n_per = 2: query 1's positive is column 2
    assert lr.contrastive(scores, 2).item() == pytest.approx(0.0, abs=1e-6)
    scores[1, 2], scores[1, 3] = -10.0, 10.0
    assert lr.contrastive(scores, 2).item() > 5


def test_flops_ramp_and_kl():
    w = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    assert lr.flops(w).item() == pytest.approx(2.0 ** 2 + 0 + 1.0 ** 2)
    assert lr.ramp(0, 40) == 0.0 and lr.ramp(20, 40) == pytest.approx(0.25) and lr.ramp(80, 40) == 1.0
    s = torch.randn(3, 5)
    assert lr.kl_align(s, s).item() == pytest.approx(0.0, abs=1e-6)
    assert lr.kl_align(s, -s).item() > 0


def test_impacts_round_scale_and_drop_zeros():
    row = sps.csr_matrix(np.array([[0.0, 0.004, 0.126, 1.5]], dtype=np.float32))
    assert lr.impacts(row[0], 100) == {"2": 13, "3": 150}   # 0.4 rounds to 0: dropped


def test_topk_rows_keeps_the_largest_weights():
    m = sps.csr_matrix(np.array([[0.1, 0.5, 0.3, 0.0], [0.2, 0.0, 0.0, 0.0]], dtype=np.float32))
    got = lr._topk_rows(m, 2).toarray()
    assert np.allclose(got, [[0.0, 0.5, 0.3, 0.0], [0.2, 0.0, 0.0, 0.0]])


# ------------------------------------------------------------------------------------------ model (BERT stand-in)


@pytest.fixture(scope="module")
def bert_model(cfg):
    s = lr.settings(cfg)
    m = lr.LightModel.from_backbone(cfg, s)
    m.lm.eval()
    return m


def test_cached_token_table_equals_separate_forward_passes(bert_model):
    m = bert_model
    prompt = m.prompt_ids("Given a question, retrieve Wikipedia passages that answer the question")
    assert prompt[0] == m.tok.cls_token_id and m.eos == m.tok.sep_token_id
    toks = [2054, 2003, 1996, 3007, 2054]
    with torch.no_grad():
        got = lr.token_vectors(m.base, prompt, toks, m.eos)
        for i, t in enumerate(toks):
            ids = torch.tensor([prompt + [t, m.eos]])
            want = m.base(input_ids=ids).last_hidden_state[0, -1]
            assert torch.allclose(got[i], want, atol=1e-5)
        # a query is the mean of its tokens' vectors (normalised), the served lookup gives the same
        q = m.light_mean(prompt, [toks[:3], []])
    assert torch.allclose(q[0], torch.nn.functional.normalize(got[:3].mean(0), dim=-1), atol=1e-5)
    assert torch.equal(q[1], torch.zeros_like(q[1]))          # an empty query: zeros, never NaN


def test_sparse_vectors_skip_special_and_padding_positions(bert_model):
    m = bert_model
    rows = [[2054, 2003, 1996], [3007]]
    prefix = m.prompt_ids(None)
    with torch.no_grad():
        h, mask = m.forward(prefix, rows)
        got = m.sparse_vectors(h, mask, len(prefix))
        transform, w, b = m.head()
        logits = transform(h) @ w.T + b
        for i, r in enumerate(rows):
            body = logits[i, len(prefix):len(prefix) + len(r)]     # [CLS], [SEP] and padding excluded
            want = torch.log1p(torch.relu(body.max(0).values))
            assert torch.allclose(got[i], want, atol=1e-5)


def test_sparse_queries_are_counts_binary_or_refused_when_out_of_vocabulary(bert_model):
    m = bert_model
    rows = [[5, 7, 5], []]
    c = lr._sparse_queries(m, {**m.s, "encode_batch_size": 8}, rows).toarray()
    assert c[0, 5] == 2 and c[0, 7] == 1 and c[1].sum() == 0
    m.s["sparse_query"] = "binary"
    try:
        b = lr._sparse_queries(m, {**m.s, "encode_batch_size": 8}, rows).toarray()
    finally:
        m.s["sparse_query"] = "counts"
    assert b[0, 5] == 1
    from harness.methods.lightretriever.ops import build_table, query_vector

    with pytest.raises(ValueError, match="outside the token-vector table of size 4"):
        query_vector(build_table(torch.zeros(4, 2)), [[1, 9]])


# ------------------------------------------------------------------------------------------ a decoder backbone, end to end


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory, cfg):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from harness.models import backbones

    folder = tmp_path_factory.mktemp("tiny-llama")
    tok = AutoTokenizer.from_pretrained(backbones.resolve(cfg, "splade-tiny")[0])
    tok.bos_token, tok.eos_token = "[CLS]", "[SEP]"
    torch.manual_seed(0)
    conf = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(conf).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


INSTR = "Given a question, retrieve Wikipedia passages that answer the question"


@pytest.fixture(scope="module")
def lora_trained(tmp_path_factory, cfg, tiny_llama):
    """The tiny Llama trained with LoRA on the smoke fixture: (config, data folder, model folder, train info)."""
    from harness.datasets import prepare as prepare_dataset
    from harness.io import write_jsonl

    tmp_path = tmp_path_factory.mktemp("lora-trained")
    c = copy.deepcopy(cfg)
    c["backbones"]["tiny-llama"] = {"source": f"path:{tiny_llama}", "has_mlm_head": False}
    c["methods"]["lightretriever"].update(backbone="tiny-llama", lora={"r": 4, "alpha": 8, "dropout": 0.1},
                                          max_train_questions=24, epochs=1, batch_size=8, p_max_len=48,
                                          encode_batch_size=32)
    data = tmp_path / "data"
    prepare_dataset("smoke", c["datasets"]["smoke"], c, data)
    decontam = tmp_path / "decontam"
    (decontam / "train").mkdir(parents=True)
    lines = [json.loads(x) for x in (data / "queries-train.jsonl").read_text().splitlines()]
    write_jsonl(decontam / "train" / "smoke.train.jsonl", lines[:-5])     # 5 dropped as "duplicates"
    write_jsonl(tmp_path / "negs.jsonl", [{"id": r["id"], "negatives": []} for r in lines])
    s = lr.settings(c)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    info = lr.train(c, s, {"decontam": decontam, "data_smoke": data, "negatives_smoke": tmp_path / "negs.jsonl"},
                    model_dir)
    return c, data, model_dir, info


def test_decoder_backbone_with_lora_trains_indexes_and_searches(tmp_path, lora_trained):
    from harness.job import Job
    from harness.methods.base import Context
    from harness.methods.lightretriever.measure import timed_table
    from harness.methods.lightretriever.speed import light_inputs, light_token_ids

    c, data, model_dir, info = lora_trained
    assert info["training_sets"]["smoke"]["after_decontam_and_sample"] == 24
    n_lora = info["trainable_parameters"]
    assert 0 < n_lora < sum(p.numel() for p in lr.LightModel.load(model_dir).lm.parameters()) / 5   # LoRA only
    model = lr.LightModel.load(model_dir)
    assert model.causal and model.eos == model.tok.sep_token_id
    # the served table equals the token vectors of separate passes of the saved (merged) model
    prompt = model.prompt_ids(INSTR)
    table = model.cache_table(INSTR)
    with torch.no_grad():
        for t in (2054, 3007):
            want = model.base(input_ids=torch.tensor([prompt + [t, model.eos]])).last_hidden_state[0, -1]
            assert torch.allclose(table.weight[t], want, atol=1e-4)
    # the rows of a few tokens (what a search over known queries builds) are those rows of the full table
    part = model.cache_table(INSTR, tokens=[3007, 2054])
    assert part.num_embeddings == 2
    assert torch.allclose(part.weight, table.weight[[3007, 2054]], atol=1e-5)
    # Table 1's table: the whole table's size, the rows its queries read as the whole table's, the rest zero
    texts = ["what is a cached table", "speed of light", "speed of light"]
    timed, n = timed_table(model, INSTR, texts)
    ids = light_token_ids(model.tok, texts, model.vocab)
    read = sorted({t for q in ids for t in q})
    assert timed.num_embeddings == table.num_embeddings and n == len(read) > 0
    assert torch.allclose(timed.weight[read], table.weight[read], atol=1e-5)
    unread = torch.ones(model.vocab, dtype=torch.bool)
    unread[read] = False
    assert not timed.weight[unread].any()
    flat, offsets = light_inputs(ids, len(ids))[0]   # the lookups Table 1 times: the same from either table
    assert torch.allclose(timed(flat, offsets), table(flat, offsets), atol=1e-5)
    index = tmp_path / "index"
    index.mkdir()
    job = Job("index", "lightretriever", "lightretriever", "build", params={"variant": None, "sparse": True})
    binfo = lr.build(Context(c, "lightretriever", "smoke-ir"), job, {"data": data, "model": model_dir}, index)
    assert binfo["documents"] == binfo["sparse_documents_indexed"] > 0
    out = tmp_path / "runs"
    out.mkdir()
    sjob = lr.search_job(c, "lightretriever", "smoke-ir")
    lr.run_search(Context(c, "lightretriever", "smoke-ir"), sjob, {"data": data, "model": model_dir, "index": index},
                  out)
    from harness.datasets import store
    from harness.runs import read_run

    n = len(store.read_queries(data, "test"))
    for system in sjob.systems:
        run = read_run(out / f"{system}.trec")
        live = sum(1 for h in run.values() if h)
        if "topk" not in system:   # a random model's top-16 document terms need not meet any query token
            assert live >= (n if "sparse" not in system else n // 2), (system, live, n)
    # light dense reads only its queries' rows of the cached table: the same query vectors as the full table
    from harness.methods.lightretriever.ops import query_vector
    from harness.methods.lightretriever.search import Searcher

    searcher = Searcher(c, sjob, {"data": data, "model": model_dir, "index": index})
    searcher.dense(tmp_path)
    full = table if searcher.instr == INSTR else model.cache_table(searcher.instr)   # 30,522 forward passes
    with torch.no_grad():
        want = torch.nn.functional.normalize(query_vector(full, searcher.qrows).float(), dim=-1).numpy()
    assert searcher.info["table_rows"] == len({t for r in searcher.qrows for t in r}) < full.num_embeddings
    assert np.allclose(searcher.qvec_light, want, atol=1e-5)


def test_encode_precision_bf16_encodes_the_corpus_and_queries_under_autocast(tmp_path, lora_trained):
    """``encode_precision: bf16``: the index's vectors are the fp32 ones to bf16's rounding (other bits,
    the same directions), recorded in the index's and the search's info; fp16 off CUDA is refused naming
    the key, or falls back to fp32 (recorded) where the job may (the rehearsal)."""
    from harness import cost
    from harness.errors import ConfigError
    from harness.indexes.faiss_dense import DenseFaissIndex
    from harness.job import Job
    from harness.methods.base import Context
    from harness.methods.lightretriever.index import DENSE_DIR
    from harness.models.runtime import encode_autocast

    c, data, model_dir, _ = lora_trained
    job = Job("index", "lightretriever", "lightretriever", "build", params={"variant": None, "sparse": False})
    vecs, infos = {}, {}
    for precision in ("fp32", "bf16"):
        ci = _cfg_with(c, encode_precision=precision)
        out = tmp_path / precision
        out.mkdir()
        infos[precision] = lr.build(Context(ci, "lightretriever", "smoke-ir"), job, {"data": data, "model": model_dir}, out)
        idx = DenseFaissIndex.load(out / DENSE_DIR, "Flat").index
        vecs[precision] = idx.reconstruct_n(0, idx.ntotal)
    assert [infos[p]["encode_precision"] for p in ("fp32", "bf16")] == ["fp32", "bf16"]
    a, b = vecs["fp32"], vecs["bf16"]
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32
    assert not np.array_equal(a, b)   # bf16 ran: other bits
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cos.min() > 0.98, cos.min()
    # the search's query encoders run under it too
    from harness.methods.lightretriever.search import Searcher

    sjob = lr.search_job(c, "lightretriever", "smoke-ir")
    searcher = Searcher(_cfg_with(c, encode_precision="bf16"), sjob, {"data": data, "model": model_dir, "index": tmp_path / "bf16"})
    assert searcher.info["encode_precision"] == "bf16"
    assert isinstance(searcher.autocast, torch.autocast)
    # fp16 off CUDA: refused naming the key, or fp32 under device_fallback (recorded)
    with pytest.raises(ConfigError, match="encode_precision: fp16 needs device: cuda"):
        encode_autocast({"encode_precision": "fp16"}, "cpu")
    cost.allow_fallbacks(True)
    try:
        ctx, got = encode_autocast({"encode_precision": "fp16"}, "cpu")
        assert got == "fp32" and "encode_precision fp16 -> fp32: fp16 needs device cuda" in cost.fallbacks()
    finally:
        cost.allow_fallbacks(False)


def test_an_index_probe_encodes_whole_batches_copies_their_vectors_and_projects_the_rest(tmp_path, lora_trained):
    """``probe_documents`` (the rehearsal's, where encoding a slice with an LLM outlasts a session): the
    first n documents, in whole encode batches, are encoded as without the probe; every other document
    takes the vectors (dense and sparse) of an encoded one, cycled; the indexes hold the whole corpus;
    the job's cost prices the copies at the encoded ones' mean seconds and says so in cost.probe."""
    import scipy.sparse as sps

    from harness import cost
    from harness.indexes.faiss_dense import DenseFaissIndex
    from harness.job import Job
    from harness.methods.base import Context
    from harness.methods.lightretriever.index import DENSE_DIR, SPARSE_NPZ

    c, data, model_dir, _ = lora_trained
    job = Job("index", "lightretriever", "lightretriever", "build", params={"variant": None, "sparse": True})
    got = {}
    for probe in (0, 6):
        cost.allow_fallbacks(False)
        out = tmp_path / str(probe)
        out.mkdir()
        info = lr.build(Context(_cfg_with(c, encode_batch_size=4, probe_documents=probe), "lightretriever", "smoke-ir"),
                        job, {"data": data, "model": model_dir}, out)
        idx = DenseFaissIndex.load(out / DENSE_DIR, "Flat").index
        got[probe] = (info, idx.reconstruct_n(0, idx.ntotal), sps.load_npz(out / SPARSE_NPZ).toarray(),
                      cost.record("index", info, 10.0))
    (full, dense, sparse, rec0), (info, pdense, psparse, rec) = got[0], got[6]
    n = full["documents"]
    assert n > 8 and info["documents"] == info["sparse_documents_indexed"] == n and info["probe_documents"] == 6
    assert pdense.shape == dense.shape and psparse.shape == sparse.shape
    assert np.allclose(pdense[:8], dense[:8], atol=1e-5) and np.allclose(psparse[:8], sparse[:8], atol=1e-4)  # 2 batches of 4
    src = np.arange(n) % 8
    assert np.array_equal(pdense, pdense[src]) and np.array_equal(psparse, psparse[src])
    assert not np.allclose(pdense[8:], dense[8:], atol=1e-3)   # the copies are copies, not the documents' vectors
    assert "probe" not in rec0
    p = rec["probe"]
    assert p["documents_encoded"] == 8 and p["documents"] == n and p["projected_seconds"] > 0
    priced = 10.0 + p["projected_seconds"] - rec["fixed_seconds"]   # its start-up (the model's load) once
    assert rec["seconds"] == 10.0 and rec["seconds_per_unit"] == pytest.approx(priced / (n / 1000), abs=1e-2)
    # sparse_doc_terms (the rehearsal's cap on a random model's dense sparse rows): each row's top terms
    out = tmp_path / "capped"
    out.mkdir()
    info = lr.build(Context(_cfg_with(c, sparse_doc_terms=5), "lightretriever", "smoke-ir"), job,
                    {"data": data, "model": model_dir}, out)
    capped = sps.load_npz(out / SPARSE_NPZ).toarray()
    assert info["sparse_doc_terms"] == 5 and (sparse > 0).sum(1).min() > 5
    assert ((capped > 0).sum(1) == 5).all()
    top = -np.sort(-sparse, axis=1)[:, :5]
    assert np.allclose(-np.sort(-capped, axis=1)[:, :5], top, atol=1e-5)   # the largest five, as they were


def test_a_light_document_table_is_paid_once_and_a_probe_builds_only_its_documents_rows(lora_trained):
    """Table 4's light document side (``dense_doc: light``): a document's vector is the mean of its
    tokens' cached vectors, the same whether the whole vocabulary's table is built or, under a cost probe,
    only the rows of the tokens its encoded documents hold; the table is priced once with the start-up
    (``fixed_seconds``), not per document, and a probe projects the rows it skipped at the built ones'
    mean (the rehearsal's 128,256-token table is projected at 71-75 min on two CPU cores)."""
    import time

    from harness import cost
    from harness.datasets import store
    from harness.methods.lightretriever.index import encode_corpus
    from harness.methods.lightretriever.model import doc_text
    from harness.methods.lightretriever.ops import query_vector

    c, data, model_dir, _ = lora_trained
    model = lr.LightModel.load(model_dir)
    texts = [doc_text(d) for d in store.iter_corpus(data, [])]
    n = len(texts)
    s = {**lr.settings(c), "dense_doc": "light", "sparse_doc": "light", "encode_batch_size": 4}
    full = model.cache_table(None)   # the whole vocabulary's rows, built apart
    rows = [list(x[:s["p_max_len"]]) for x in model.tok([" " + t for t in texts], add_special_tokens=False)["input_ids"]]
    want = torch.nn.functional.normalize(query_vector(full, rows).float(), dim=-1).numpy()
    got = {}
    for probe in (0, 6):
        cost.allow_fallbacks(False)
        cost.startup_done()
        t0 = time.perf_counter()
        dense, _, _ = encode_corpus(model, {**s, "probe_documents": probe}, texts, sparse=True, n=n)
        got[probe] = dense, cost.record("index", {"documents": n}, time.perf_counter() - t0 + 1e-3)
    (dense0, rec0), (dense6, rec6) = got[0], got[6]
    assert np.allclose(dense0, want, atol=1e-5) and np.allclose(dense6[:8], want[:8], atol=1e-5)   # 2 batches of 4
    once0, once6 = rec0["paid_once"], rec6["paid_once"]
    assert once0["rows_built"] == once0["rows"] == model.vocab and once0["projected_seconds"] == 0
    held = len({t for r in rows[:8] for t in r})
    assert once6["rows_built"] == held < model.vocab and once6["rows"] == model.vocab
    scale = (model.vocab - held) / held   # the seconds in meta.json are rounded to 1 ms
    assert once6["projected_seconds"] == pytest.approx(once6["seconds"] * scale, abs=5e-4 * scale + 1e-3)
    for rec, once in ((rec0, once0), (rec6, once6)):   # paid once: in the fixed seconds, not in the documents'
        assert rec["pricing"] == "steady" and rec["fixed_seconds"] >= once["seconds"] + once["projected_seconds"] - 1e-3
        priced = rec["seconds"] + once["projected_seconds"] + (rec.get("probe") or {}).get("projected_seconds", 0.0)
        assert rec["fixed_seconds"] + rec["seconds_per_unit"] * n / 1000 == pytest.approx(priced, abs=1e-2)
    assert rec6["probe"]["documents_encoded"] == 8


@pytest.mark.parametrize("variant", [{}, {"p_max_len": 8},
                                     {"dense_query": "full", "dense_doc": "light", "sparse_query": "full",
                                      "sparse_doc": "light", "p_max_len": 8}],
                         ids=["main", "main-short-passages", "qfull-dlight"])
def test_grad_cache_chunk_gives_the_whole_batchs_loss_and_gradients(tmp_path, cfg, tiny_llama, variant):
    """``grad_cache_chunk`` (the paper's batch on one GPU: the H200 rehearsal ran out of memory without
    it): passages, queries and the light sides' token vectors encoded in sub-batches without a graph,
    the loss on the whole batch, each sub-batch re-encoded and back-propagated; the same loss and LoRA
    gradients as one graph (dropout 0: the sub-batches' masks would differ from the whole batch's),
    every loss term included; for the main model (light dense queries: their token vectors) and Table 4's
    variant that reads the queries' full sparse side and the passages' light token vectors; passages of
    8 tokens: the queries' and the tokens' sub-batches (as many positions as a passage sub-batch's) then
    hold fewer than the batch (4 queries in 4, 38 query tokens in 8, 60 passage tokens in 3). The token
    sequences are packed into at most ``chunk`` rows of a passage row's length a pass (a longer prompt's
    own + 2 where the prompt does not fit): rows of 1,024 ran the rehearsal's light-both out of memory."""
    import random

    from harness.datasets import prepare as prepare_dataset
    from harness.io import write_jsonl
    from harness.methods.lightretriever.train import BatchLoss, read_training_sets, training_groups

    c = copy.deepcopy(cfg)
    c["backbones"]["tiny-llama"] = {"source": f"path:{tiny_llama}", "has_mlm_head": False}
    c["methods"]["lightretriever"].update(backbone="tiny-llama", lora={"r": 4, "alpha": 8, "dropout": 0.0},
                                          max_train_questions=8, batch_size=4, hard_negatives=2, p_max_len=32,
                                          mrl_dims=[8])
    data = tmp_path / "data"
    prepare_dataset("smoke", c["datasets"]["smoke"], c, data)
    (tmp_path / "decontam" / "train").mkdir(parents=True)
    lines = [json.loads(x) for x in (data / "queries-train.jsonl").read_text().splitlines()]
    write_jsonl(tmp_path / "decontam" / "train" / "smoke.train.jsonl", lines)
    write_jsonl(tmp_path / "negs.jsonl", [{"id": r["id"], "negatives": []} for r in lines])
    inputs = {"decontam": tmp_path / "decontam", "data_smoke": data, "negatives_smoke": tmp_path / "negs.jsonl"}
    results = []
    for chunk in (0, 5):  # 12 passages (4 queries x (1 + 2)): sub-batches of 5, 5 and 2
        c["methods"]["lightretriever"]["grad_cache_chunk"] = chunk
        c["methods"]["lightretriever"].update(variant)
        s = lr.settings(c)
        sets, docs, _ = read_training_sets(c, s, inputs, 0)
        group = training_groups(s, sets, 0)[0]
        torch.manual_seed(0)
        model = lr.LightModel.from_backbone(c, s)
        model.lm.train()
        step = BatchLoss(model, s, sets, docs)
        packed = []   # the token passes' forwards (the only ones with position ids): [rows, positions]
        hook = model.base.register_forward_pre_hook(
            lambda mod, args, kw: packed.append(tuple(kw["input_ids"].shape)) if kw.get("position_ids") is not None
            else None, with_kwargs=True)
        loss, parts = step([group], 3, random.Random(0))
        hook.remove()
        if chunk:   # packed in rows of a passage row's length (or a prompt's + 2), at most chunk rows a pass
            row = s["p_max_len"] + len(step.doc_prefix) + 1
            longest = max(row, *(len(p) + 2 for p in step.prompts.values()))
            assert packed and all(b <= chunk and n <= longest for b, n in packed), (packed, chunk, longest)
        graph = loss.requires_grad
        if graph:  # one graph: the training loop's backward
            loss.backward()
        grads = {n: p.grad.clone() for n, p in model.lm.named_parameters() if p.requires_grad}
        results.append((float(loss.detach()), parts, grads, graph))
    (l0, p0, g0, graph0), (l1, p1, g1, graph1) = results
    assert graph0 and not graph1  # chunk 5 ran the GradCache step (its own backward, a detached loss)
    assert l0 == pytest.approx(l1, rel=1e-5) and p0.keys() == p1.keys() and {"base", "dense", "sparse", "kl"} <= set(p0)
    assert g0.keys() == g1.keys() and len(g0) > 0
    for n in g0:   # to float32 rounding of the tensor's own scale: the two sum in different orders, and the
        # order (the kernels' blocking) differs between CPUs (an AVX2 EPYC: 2.9e-6 off an element of a tensor up
        # to 5.6); a lost or doubled term moves the gradient by its own size
        err, scale = float((g0[n] - g1[n]).abs().max()), float(g0[n].abs().max())
        assert err <= 1e-5 * scale + 1e-7, (n, err, scale)


def test_small_queries_each_evaluation_set_with_an_instruction_it_trains_on_and_ci_is_unchanged():
    """At CPU scale an instruction unseen in training leaves the light dense queries random (SciFact
    nDCG@10 0.007 under App. A.4's SciFact instruction vs 0.100 under NQ's, the same model:
    docs/backbones.md), so small queries every evaluation set with one of its training sets'
    instructions. The ci overlay keeps its own budget: 1 epoch on 150 questions per set, its
    variants at the small variants' scale with its ramp of 10."""
    from harness.methods.lightretriever.settings import eval_datasets, instruction_for, settings

    small = load_config(["configs/profiles/small.yaml"])
    s = settings(small)
    trained = {instruction_for(s, k) for k in s["train_datasets"]}
    for key in eval_datasets(s, False) + eval_datasets(s, True):
        assert instruction_for(s, key) in trained, key
    assert s["max_train_questions"] is None and s["epochs"] == 2
    ci = load_config(["configs/profiles/small.yaml", "configs/profiles/ci.yaml"])
    c, ref = settings(ci), settings(ci, "ref")
    assert (c["epochs"], c["max_train_questions"], c["flops_ramp_steps"]) == (1, 150, 10)
    assert (ref["epochs"], ref["max_train_questions"], ref["flops_ramp_steps"]) == (1, 200, 10)
    sref = settings(small, "ref")
    assert (sref["epochs"], sref["max_train_questions"], sref["flops_ramp_steps"]) == (1, 200, 30)
