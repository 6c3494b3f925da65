"""Corpus-wide jobs at the papers' corpus sizes (#28, item 3): QCR's k-means baseline (centroid fit and
index), its "w/ words" and code indexes, LightRetriever's, DPR's and BPR's indexes read the corpus as
they go and never hold what grows with it at once (token vectors: ~2 TB at MS MARCO's 8.8M passages;
analysed words; the corpus's texts and token ids; float vectors beside their index), and give what the
one-pass code gave. Memory is checked with tracemalloc (numpy's allocations are traced)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from harness.config import load_config
from harness.datasets import Doc, store
from harness.errors import DataError
from harness.methods.qcr import index as qindex
from harness.methods.qcr import kmeans as qkm
from harness.methods.qcr.settings import CENTROIDS, CODES_FILE, KMEANS_OFFSETS, settings

WORDS = ("river delta sediment water flows north across plains into the sea carrying silt clay sand "
         "while towns along banks trade grain fish timber cotton wool").split()


def _corpus(tmp_path, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    docs = [Doc(f"d{i}", "A title" if i % 3 == 0 else "", " ".join(rng.choice(WORDS, int(rng.integers(3, 30)))))
            for i in range(n)]
    data = tmp_path / "data"
    data.mkdir()
    store.write_corpus(data, docs)
    return data, docs


@pytest.fixture(scope="module")
def kmeans_settings():
    cfg = load_config()
    s = settings(cfg)
    s["backbone"] = "splade-tiny"
    s["kmeans"] = {**s["kmeans"], "encoder": "backbone", "clusters": 8, "sample_tokens": 400}
    s.update(p_max_len=32, encode_batch_size=16, device="cpu", torch_threads=1)
    return cfg, s


def _consume_lazily(monkeypatch, seen):
    """What Anserini's input writer does: one row at a time (the payload must not be a list)."""
    def consume(spec, payload, **options):
        seen["sequence"] = isinstance(payload, (list, tuple))
        seen["rows"] = list(payload)
    monkeypatch.setattr(qindex, "build_index", consume)


def test_kmeans_index_assigns_batch_by_batch_as_the_one_pass_code_did(tmp_path, monkeypatch, kmeans_settings):
    """The index's flat ids and offsets are each passage's ids from the one-pass assignment
    (kmeans_codes: every token vector listed, then one search); its Lucene strings are theirs, given one
    at a time; the batches' token vectors are not kept (tracemalloc peak well under all of them)."""
    cfg, s = kmeans_settings
    data, docs = _corpus(tmp_path, 600)
    model = tmp_path / "model"
    model.mkdir()
    rng = np.random.default_rng(1)
    tok, enc = qkm.token_encoder(cfg, s, None)
    np.save(model / CENTROIDS, rng.standard_normal((8, enc.config.hidden_size)).astype(np.float32))
    texts = [f"{d.title} {d.text}" for d in docs]
    vectors = qkm.token_vectors(tok, enc, texts, s["p_max_len"] + 2, s["encode_batch_size"])
    all_vector_bytes = sum(v.nbytes for v in vectors)
    expected = qkm.kmeans_codes(cfg, s, {"model": model}, texts, s["p_max_len"] + 2)
    seen = {}
    _consume_lazily(monkeypatch, seen)
    monkeypatch.setattr(qkm, "token_encoder", lambda *a: (tok, enc))   # loaded: the peak is the job's work
    out = tmp_path / "index"
    out.mkdir()
    tracemalloc.start()
    info = qkm.kmeans_index(cfg, s, {"data": data, "model": model}, out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    flat, offsets, ids = qindex.load_kmeans_codes(out)
    assert ids == [d.id for d in docs] and flat.dtype == np.uint16 and info["tokens"] == len(flat)
    assert [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [e.tolist() for e in expected]
    assert not seen["sequence"]
    assert seen["rows"] == [(d, " ".join(f"k{c}" for c in e.tolist())) for d, e in zip(ids, expected)]
    # ~0.5 MB (a batch) against 5.2 MB of vectors; the old code peaked over twice their bytes
    assert peak < all_vector_bytes / 4, (peak, all_vector_bytes)


def test_kmeans_index_files_are_checked_when_read(tmp_path):
    """An index folder without the offsets (built by the older code) or with offsets that do not span
    the codes fails naming the file and the fix."""
    np.save(tmp_path / CODES_FILE, np.arange(5, dtype=np.uint16))
    with pytest.raises(DataError, match="no offsets.npy"):
        qindex.load_kmeans_codes(tmp_path)
    np.save(tmp_path / KMEANS_OFFSETS, np.array([0, 2, 4]))
    with pytest.raises(DataError, match="do not span codes.npy's 5 codes"):
        qindex.load_kmeans_codes(tmp_path)


def test_fit_centroids_uses_every_sampled_vector_filled_in_place(tmp_path, monkeypatch, kmeans_settings):
    """The sample faiss clusters is the first ``sample_tokens`` token vectors of the seeded passage
    order (as before), and faiss is told to keep all of them: its default keeps 256 a centroid (8.2M of
    the paper's 50M at K = 32,000)."""
    import faiss

    cfg, s = kmeans_settings
    data, docs = _corpus(tmp_path, 120, seed=2)
    got = {}

    class Spy:
        def __init__(self, d, k, **kw):
            got.update(d=d, k=k, **kw)
            self.centroids = np.zeros((k, d), np.float32)

        def train(self, x):
            got["x"] = x

    monkeypatch.setattr(faiss, "Kmeans", Spy)
    k = 2   # 400 tokens over 2 centroids: 200 a centroid, under faiss's 256
    s2 = {**s, "kmeans": {**s["kmeans"], "clusters": k}}
    out = tmp_path / "m"
    out.mkdir()
    info = qkm.fit_centroids(cfg, s2, {"data": data}, out)
    tok, enc = qkm.token_encoder(cfg, s, None)
    order = np.random.default_rng(cfg["seed"]).permutation(len(docs))
    vecs = qkm.token_vectors(tok, enc, [f"{docs[i].title} {docs[i].text}" for i in order], s["p_max_len"] + 2)
    want = np.concatenate(vecs)[:400]
    np.testing.assert_array_equal(got["x"], want)
    assert got["x"].flags["C_CONTIGUOUS"] and info["tokens"] == 400
    assert got["max_points_per_centroid"] == 256 == info["max_points_per_centroid"]
    s3 = {**s, "kmeans": {**s["kmeans"], "clusters": 1}}   # 400 points for one centroid: the cap follows
    assert qkm.fit_centroids(cfg, s3, {"data": data}, out)["max_points_per_centroid"] == 400
    assert got["max_points_per_centroid"] == 400 and got["gpu"] is False
    # a sample larger than the corpus (the rehearsal's slice under the paper's 50M tokens): the array is
    # sized by the corpus (120 passages x p_max_len), not by the sample, which no machine could allocate
    s4 = {**s, "kmeans": {**s["kmeans"], "clusters": 2, "sample_tokens": 10**13}}
    info = qkm.fit_centroids(cfg, s4, {"data": data}, out)
    np.testing.assert_array_equal(got["x"], np.concatenate(vecs))
    assert info["tokens"] == sum(len(v) for v in vecs) <= 120 * s["p_max_len"]


def test_words_index_streams_codes_and_words_in_corpus_order(tmp_path, monkeypatch):
    """The "w/ words" strings are the codes' plus each passage's analysed words (title, newline,
    text), as with_words gives them, handed to Lucene one at a time; a source index whose rows are
    not the corpus's order fails naming the record."""
    data, docs = _corpus(tmp_path, 50, seed=3)
    src = tmp_path / "src"
    src.mkdir()
    codes = np.random.default_rng(4).integers(0, 125, (len(docs), 6)).astype(np.uint16)
    np.save(src / CODES_FILE, codes)
    qindex.write_docids(src, [d.id for d in docs])
    s = {"index": "lucene:pretokenized", "k1": 0.9, "b": 0.4, "positional": True}
    seen = {}
    _consume_lazily(monkeypatch, seen)
    out = tmp_path / "words"
    out.mkdir()
    qindex.words_index(s, src, data, out, kmeans=False)
    texts = [f"{d.title}\n{d.text}" if d.title else d.text for d in docs]
    strings = qindex.code_strings(codes, [d.id for d in docs], k=6, size=125, positional=True)
    assert not seen["sequence"]
    assert seen["rows"] == list(zip([d.id for d in docs], qindex.with_words(strings, texts)))
    assert list(qindex.iter_with_words(strings, texts, block=7)) == qindex.with_words(strings, texts)
    with pytest.raises(DataError, match="more code strings than texts"):
        qindex.with_words(strings, texts[:-1])
    qindex.write_docids(src, [d.id for d in reversed(docs)])
    with pytest.raises(DataError, match=r"corpus.jsonl: record 1 is 'd0', the source index's row 1 is 'd49'"):
        qindex.words_index(s, src, data, out, kmeans=False)


def test_qcr_encode_reads_an_iterable_batch_by_batch_with_its_count():
    """A corpus streamed from its file gives the codes its list gives; a count other than the
    announced one fails."""
    import torch

    from harness.methods.qcr.model import QCRModel

    cfg = load_config()
    s = settings(cfg)
    torch.manual_seed(0)
    m = QCRModel.from_backbone(cfg, s)
    texts = [("T", f"passage {i} about " + " ".join(WORDS[: i % 9 + 2])) for i in range(21)]
    want = m.encode(texts, 32, 4)
    np.testing.assert_array_equal(m.encode(iter(texts), 32, 4, n=len(texts)), want)
    with pytest.raises(DataError, match="20 texts where 21 were announced"):
        m.encode(iter(texts[:20]), 32, 4, n=21)
    with pytest.raises(DataError, match="more than the 20 texts announced"):
        m.encode(iter(texts), 32, 4, n=20)


def test_lightretriever_encodes_a_streamed_corpus_as_its_list_in_batches():
    """LightRetriever's index job reads its corpus as it encodes (MS MARCO's 8.8M passages were held as
    Docs, texts and token-id lists, ~40 GB, beside the dense batches and their concatenation): the
    vectors, sparse rows and truncation count of an iterable with its count equal the list's, with
    batches that do not divide it; another count fails."""
    from harness.methods import lightretriever as lr
    from harness.methods.lightretriever.index import encode_corpus

    cfg = load_config([])
    s = {**lr.settings(cfg), "encode_batch_size": 3, "p_max_len": 6}
    model = lr.LightModel.from_backbone(cfg, s)
    texts = [" ".join(WORDS[i % 7: i % 7 + 2 + i % 9]) for i in range(11)]
    d, sp, tr = encode_corpus(model, s, texts, sparse=True)
    d2, sp2, tr2 = encode_corpus(model, s, iter(texts), sparse=True, n=len(texts))
    np.testing.assert_array_equal(d, d2)
    assert (sp != sp2).nnz == 0 and tr == tr2 > 0 and d.shape[0] == len(texts) and d.dtype == np.float32
    with pytest.raises(DataError, match="10 texts where 11 were announced"):
        encode_corpus(model, s, iter(texts[:10]), sparse=False, n=11)
    with pytest.raises(DataError, match="more than the 10 texts announced"):
        encode_corpus(model, s, iter(texts), sparse=False, n=10)


def test_a_flat_faiss_index_takes_its_vectors_batch_by_batch_as_one_build_does():
    """DenseFaissIndex.build_batches: a Flat index adds each batch as it comes (a generator is read once,
    lazily) and equals the index built from the whole matrix (the same vectors, fixed bytes, spec and
    hits); a spec that trains (PQ) collects the batches and builds as build does; no batch is an error."""
    from harness.errors import ConfigError
    from harness.indexes.faiss_dense import DenseFaissIndex

    rng = np.random.default_rng(5)
    x = rng.standard_normal((3000, 32)).astype(np.float32)
    given = []

    def gen():
        for a in range(0, len(x), 700):
            given.append(a)
            yield x[a:a + 700]

    one, many = DenseFaissIndex.build("Flat", x), DenseFaissIndex.build_batches("Flat", gen())
    assert given == list(range(0, 3000, 700)) and many.ntotal == one.ntotal == 3000
    np.testing.assert_array_equal(many.index.reconstruct_n(0, 3000), x)
    assert many.fixed_bytes == one.fixed_bytes and many.spec == one.spec == "faiss:Flat"
    q = rng.standard_normal((5, 32)).astype(np.float32)
    np.testing.assert_array_equal(many.index.search(q, 10)[1], one.index.search(q, 10)[1])
    pq = DenseFaissIndex.build_batches("PQ8x8np", (x[a:a + 700] for a in range(0, 3000, 700)))
    np.testing.assert_array_equal(pq.index.search(q, 10)[1], DenseFaissIndex.build("PQ8x8np", x).index.search(q, 10)[1])
    with pytest.raises(ConfigError, match="got no batch"):
        DenseFaissIndex.build_batches("Flat", iter(()))


def test_qcr_table2_reads_each_documents_codes_and_words_as_pmi_iterates_them(tmp_path, monkeypatch):
    """Table 2's PMI over every document: its code sets and analysed words are made as pmi_words
    iterates them (twice), not listed (MS MARCO: ~120 GB of sets and words); the result is the one the
    lists give."""
    from harness.indexes.lucene import analyze_words
    from harness.methods.qcr import measure as qm
    from harness.methods.qcr.codebook import pmi_words

    data, docs = _corpus(tmp_path, 60, seed=6)
    codes = np.random.default_rng(7).integers(0, 20, (60, 8)).astype(np.uint16)
    ids = [d.id for d in docs]
    got = {}

    def spy(rows, words, **kw):
        got["lists"] = isinstance(rows, list) or isinstance(words, list)
        got["pmi"] = pmi_words(rows, words, **kw)
        return got["pmi"]

    monkeypatch.setattr(qm, "pmi_words", spy)
    out = tmp_path / "out"
    out.mkdir()
    qm._table2({"analysis": {"pmi_top": 5, "pmi_min_count": 2, "pmi_codes": 3}}, "d", "t", {"data": data}, out, codes, ids)
    want = pmi_words([set(r) for r in codes.tolist()], [set(w) for w in analyze_words([d.text for d in docs])],
                     top=5, min_count=2, n_codes=3)
    assert not got["lists"] and got["pmi"] == want and len(want) == 3 and all(want.values())


def test_qcr_table2_says_when_a_codes_words_are_ties_at_pmi_zero(tmp_path, capsys):
    """A code in every document (a collapsed codebook's most used code) has PMI 0 with every word: its
    'top' words are ties in word order, and Table 2 says so rather than listing them as associations; a
    code in some documents lists its words unmarked."""
    import json

    from harness.methods.qcr import measure as qm

    data, docs = _corpus(tmp_path, 60, seed=6)
    codes = np.random.default_rng(7).integers(1, 20, (60, 8)).astype(np.uint16)
    codes[:, 0] = 0                                  # code 0 in every document: chosen first, PMI 0
    out = tmp_path / "out"
    out.mkdir()
    qm._table2({"analysis": {"pmi_top": 5, "pmi_min_count": 2, "pmi_codes": 2}}, "d", "t", {"data": data}, out,
               codes, [d.id for d in docs])
    lines = [x for x in (out / "table2.md").read_text().splitlines() if x.startswith("- **code")]
    assert len(lines) == 2 and lines[0].startswith("- **code 0**: *no word co-occurs with it more than chance")
    assert "chance" not in lines[1] and ": 0.00" not in lines[1].split(", ")[0]
    first = json.loads((out / "qcr.pmi-1.json").read_text())
    assert first["values"]["top_pmi"]["value"] == 0.0 and "more than chance" in first["note"]
    assert "more than chance" not in json.loads((out / "qcr.pmi-2.json").read_text())["note"]
    assert "WARNING: qcr.pmi-1: code 0 no word" in capsys.readouterr().out


def test_codebook_usage_counts_a_block_at_a_time_as_one_bincount(monkeypatch):
    """usage() counts the code ids a block at a time (np.bincount copies its input to int64: 17.7 GB for
    MS MARCO's 8.8M x 250 codes); blocks that do not divide the ids give the one-piece counts."""
    from harness.methods.qcr import codebook

    ids = np.random.default_rng(8).integers(0, 300, (997, 13)).astype(np.uint16)
    whole = codebook.usage(ids, 300)
    monkeypatch.setattr(codebook, "_COUNT_BLOCK", 1000)
    assert codebook.usage(ids, 300) == whole and whole["n"] == ids.size
    assert sorted(whole["counts"], reverse=True) == sorted(np.bincount(ids.ravel()).tolist(), reverse=True)[:whole["used"]]


def test_svdr_stacks_its_passage_vectors_freeing_each_part_and_searches_in_bounded_batches(monkeypatch):
    """E(D) at NQ's size: the per-batch CSR parts are stacked into one matrix, each part freed as it is
    copied (vstack held the parts beside the result: twice ~180 GiB), equal to vstack in values and
    index types; a search over many documents takes fewer queries a batch (256 x 21M float32 scores
    were 21.5 GB) and finds the same hits."""
    import scipy.sparse as sp

    from harness.indexes import sparse_csr
    from harness.methods.vdr.model import stack_csr

    rng = np.random.default_rng(9)
    parts = [sp.random(int(rng.integers(1, 9)), 50, density=0.2, format="csr", dtype=np.float32, random_state=i)
             for i in range(7)]
    want = sp.vstack(parts, format="csr")
    given = list(parts)
    got = stack_csr(given, 50)
    assert given == [] and got.shape == want.shape and got.indices.dtype == want.indices.dtype
    for a in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(got, a), getattr(want, a))
    index = sparse_csr.SparseEmbeddingIndex(sp.random(300, 50, density=0.3, format="csr", dtype=np.float32,
                                                      random_state=1), [f"d{i}" for i in range(300)])
    q = sp.random(40, 50, density=0.3, format="csr", dtype=np.float32, random_state=2)
    whole = index.search(q, 10)
    monkeypatch.setattr(sparse_csr, "SCORES_MAX_ELEMENTS", 900)   # 3 queries a batch over 300 documents
    shapes, real = [], sparse_csr.topk_rows
    monkeypatch.setattr(sparse_csr, "topk_rows", lambda scores, k: shapes.append(scores.shape) or real(scores, k))
    small = index.search(q, 10)
    assert max(shapes) == (3, 300) and len(shapes) == 14
    np.testing.assert_array_equal(whole[0], small[0])
    np.testing.assert_array_equal(whole[1], small[1])


def test_corpus_size_counts_the_records_iter_corpus_gives_without_parsing(tmp_path):
    """The count an index job preallocates for: the corpus file's non-blank lines, as iter_corpus reads
    them (a meta.json's "documents" is not trusted: a queries-only folder writes 0 there)."""
    data, docs = _corpus(tmp_path, 37, seed=10)
    with open(data / store.CORPUS, "a", encoding="utf-8") as fh:
        fh.write("\n  \n")
    (data / "meta.json").write_text('{"documents": 0}')
    assert store.corpus_size(data) == sum(1 for _ in store.iter_corpus(data)) == 37


# ---------------------------------------------------------------- the corpus by id (trainers, negatives)
def _written(tmp_path, docs, blank_lines=False):
    data = tmp_path / "lookup"
    data.mkdir()
    store.write_corpus(data, docs)
    if blank_lines:   # blank lines are skipped, as iter_corpus skips them
        path = data / store.CORPUS
        path.write_text("\n" + path.read_text().replace("\n", "\n\n", 2))
    return data


def test_corpus_lookup_is_corpus_by_id_read_on_demand(tmp_path):
    """CorpusLookup gives corpus_by_id's documents, in its order (the trainers' random draws are the
    same draws), for ids of any width and script; absent ids are absent, however long."""
    import random

    docs = [Doc(f"d{i}", "T" if i % 2 else "", f"text {i} " * (i % 7 + 1)) for i in range(300)]
    docs += [Doc("ü-ßé", "", "unicode id"), Doc("x" * 40, "long", "the longest id"), Doc("", "", "empty id")]
    data = _written(tmp_path, docs, blank_lines=True)
    want = store.corpus_by_id(data)
    got = store.corpus_lookup(data)
    assert len(got) == len(want) == len(docs) and list(got) == list(want)
    assert all(got[k] == want[k] for k in reversed(list(want)))
    assert list(got.values()) == list(want.values()) and list(got.items()) == list(want.items())
    assert list(store.ids_of(got)) == list(want) and store.ids_of(got)[5:8] == list(want)[5:8]
    a, b = random.Random(7), random.Random(7)
    assert [a.choice(list(want)) for _ in range(200)] == [b.choice(store.ids_of(got)) for _ in range(200)]
    for absent in ("d300", "d", "x" * 41, "x" * 39, "ü", 3, None):
        assert absent not in got
    with pytest.raises(KeyError):
        got["x" * 41]
    assert got.get("d3") == want["d3"] and got.get("nope") is None
    assert [got.doc_at(i) for i in (0, 150, len(docs) - 1)] == [docs[0], docs[150], docs[-1]]
    assert dict(got.texts) == store.corpus_texts(data) and "nope" not in got.texts


def test_corpus_lookup_names_a_bad_line(tmp_path):
    data = _written(tmp_path, [Doc("a", "", "x"), Doc("b", "", "y")])
    path = data / store.CORPUS
    path.write_text(path.read_text() + '{"id": "c", "text": \n')
    with pytest.raises(DataError, match=r"corpus.jsonl:3: invalid JSON"):
        store.corpus_lookup(data)
    path.write_text('{"text": "no id"}\n')
    with pytest.raises(DataError, match=r"corpus.jsonl:1: .*needs an \"id\""):
        store.corpus_lookup(data)


def test_corpus_lookup_holds_ids_and_offsets_not_the_corpus(tmp_path):
    """The lookup's memory is its ids and offsets (noted as its hold, for the estimate), a small part of
    the Docs corpus_by_id holds: what tracemalloc counts after it is built under a twentieth of theirs."""
    from harness import cost

    rng = np.random.default_rng(3)
    docs = [Doc(f"p{i}", "a title", " ".join(rng.choice(WORDS, 120))) for i in range(3000)]
    data = _written(tmp_path, docs)
    cost.allow_fallbacks(False)
    tracemalloc.start()
    held = store.corpus_by_id(data)
    full = tracemalloc.get_traced_memory()[0]
    del held
    tracemalloc.stop()
    store.corpus_lookup(data)   # its imports, outside the count
    cost.allow_fallbacks(False)
    tracemalloc.start()
    lookup = store.corpus_lookup(data)
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert kept < full / 20 and peak < full / 4, (kept, peak, full)   # peak: one block's (id, offset) pairs
    noted = cost.record("train", {"steps": 1}, 1.0)["held_corpora"]["lookup"]
    assert noted == {"documents": 3000, "bytes": lookup.nbytes} and lookup.nbytes < 40 * 3000


def test_trainers_and_negatives_read_their_corpus_by_id():
    """Every trainer reads its training corpus through corpus_lookup (gold, negatives, random draws),
    and the negatives job its answer checks: none calls corpus_by_id or corpus_texts (the tiny-slice
    rehearsal, tests/test_rehearsal.py, runs them and checks what they note as held)."""
    import importlib
    import inspect

    for mod in ("harness.methods.dpr", "harness.methods.bpr.train", "harness.methods.vdr.train",
                "harness.methods.reader", "harness.methods.densephrases.train",
                "harness.methods.lightretriever.train", "harness.methods.qcr.train", "harness.negatives"):
        src = inspect.getsource(importlib.import_module(mod))
        assert "corpus_lookup(" in src and "corpus_by_id(" not in src and "corpus_texts(" not in src, mod


# ---------------------------------------------------------------- SVDR's T(D) and E(D), streamed
def test_svdr_token_ids_are_tokenised_as_the_index_takes_them():
    """token_ids tokenises a batch at a time as its rows are taken (the old code listed every
    passage's ids first: ~100 GB at NQ's 21M passages); build_token_index from a stream equals it
    from a list."""
    from harness.methods import vdr
    from harness.models.backbones import load_tokenizer

    cfg = load_config()
    tok = load_tokenizer(cfg, "splade-tiny")
    calls = []

    def spy(texts, **kw):
        calls.append(len(texts))
        return tok(texts, **kw)

    texts = (f"passage {i} about rivers and towns" for i in range(3000))
    rows = vdr.token_ids(spy, texts, 16, batch=1024)
    first = next(rows)
    assert calls == [1024] and first == tok(["passage 0 about rivers and towns"], truncation=True,
                                             max_length=16)["input_ids"][0]
    assert len(list(rows)) == 2999 and calls == [1024, 1024, 952]
    docs = [Doc(f"d{i}", "", f"text {i} of the corpus") for i in range(50)]
    a = vdr.build_token_index(tok, docs, 16, 999).to_scipy_csr()
    b = vdr.build_token_index(tok, iter(docs), 16, 999).to_scipy_csr()
    assert (a != b).nnz == 0 and a.nnz > 0


def test_svdr_indexes_stream_their_corpus_and_give_the_same_index(tmp_path):
    """write_token_index and emb_index read the corpus as they go (iter_corpus, nothing held: no
    held corpus noted) and give the index the listed corpus gave, ids in file order."""
    from harness import cost
    from harness.methods import vdr
    from harness.methods.base import Context
    from harness.methods.vdr.settings import settings as vsettings

    cfg = load_config()
    data, docs = _corpus(tmp_path, 150)
    m = vdr.VDRModel.from_backbone(cfg, vsettings(cfg["methods"]["svdr"], method="svdr"))
    cost.allow_fallbacks(False)
    streamed, seconds = vdr.emb_index(m, store.iter_corpus(data))
    listed, _ = vdr.emb_index(m, docs)
    assert streamed.docids == [d.id for d in docs] == listed.docids and seconds > 0
    assert abs(streamed.matrix - listed.matrix).max() == 0 and streamed.matrix.nnz > 0
    out = tmp_path / "tok"
    out.mkdir()
    info = vdr.write_token_index(Context(cfg, "svdr", "smoke"), data, out)
    index, ids = vdr.load_token_index(out)
    assert info["documents"] == 150 and ids == [d.id for d in docs] and info["build_seconds"] > 0
    want = vdr.build_token_index(m.tok, docs, m.s["p_max_len"], m.s["skip_vocab"]).to_scipy_csr()
    assert (index.to_scipy_csr() != want).nnz == 0
    assert "held_corpora" not in cost.record("index", {"documents": 150}, 1.0)
    # an ablation's search encodes the whole corpus itself: it says so, and its cost is priced per
    # document for that part and per query for the rest (it was priced per query alone, so the paper
    # profile's 21M passages were never counted)
    from harness.datasets.store import Query
    from harness.methods.vdr import search as vsearch

    queries = [Query(f"q{i}", " ".join(WORDS[i:i + 4])) for i in range(5)]
    orig_read = store.read_queries
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vsearch.VDRModel, "load", classmethod(lambda cls, *a, **k: m))
        mp.setattr(vsearch.store, "read_queries", lambda d, split: queries if split == "test" else orig_read(d, split))
        runs = tmp_path / "runs"
        runs.mkdir()
        info = vsearch.search_ablation(Context(cfg, "svdr", "smoke"), {"data": data, "model": tmp_path, "token_index": out},
                                       runs, "svdr", "m1", "smoke")
    assert info["corpus_documents"] == 150 and info["corpus_seconds"] > 0 and info["queries"] == 5
    rec = cost.record("search", info, info["corpus_seconds"] + 1.0)
    assert rec["pricing"] == "corpus + queries" and rec["corpus_documents"] == 150
    assert abs(rec["seconds_per_unit"] - 1.0 / 5) < 1e-6
    # and it holds that E(D) in memory while it searches: noted as a corpus held, so the estimate
    # projects it to the profile's corpus (the memory it books must hold it)
    # (a scipy CSR: its entries go with it, so the estimate can say when its ids turn int64)
    assert rec["held_corpora"] == {data.name: {"documents": 150, "bytes": streamed.nbytes,
                                               "csr_entries": streamed.matrix.nnz}} and streamed.nbytes > 0
    assert streamed.nbytes == 8 * streamed.matrix.nnz + 4 * (150 + 1)   # float32 values, int32 ids and offsets
    assert sorted(f.name for f in runs.glob("*.trec")) == ["svdr.abl-m1-beta.trec", "svdr.abl-m1-full.trec"]


# ---------------------------------------------------------------- DensePhrases' dump, streamed
def test_densephrases_dump_windows_and_encodes_a_batch_of_passages_at_a_time(tmp_path, monkeypatch):
    """dump_corpus reads its passages a batch (encode_batch_size) at a time and windows only those (the
    old code windowed the whole corpus first: ~300 GB of token lists at NQ's 21M passages); a stream
    and a list give the same dump, every passage counted."""
    import torch

    from harness.indexes.phrase_dump import PhraseDump
    from harness.methods import densephrases as dp
    from harness.methods.densephrases import index as dindex

    cfg = load_config()
    s = dp.settings(cfg)
    s.update(encode_batch_size=8, device="cpu")
    torch.manual_seed(0)
    model = dp.PhraseModel.from_backbone(cfg, s)
    data, docs = _corpus(tmp_path, 30)
    sizes = []
    real = dindex.windows

    def spy(tok, batch, *a, **k):
        sizes.append(len(batch))
        return real(tok, batch, *a, **k)

    monkeypatch.setattr(dindex, "windows", spy)
    a = dindex.dump_corpus(model, s, store.iter_corpus(data), tmp_path / "a", None)
    assert sizes == [8, 8, 8, 6] and a["documents"] == 30
    dindex.dump_corpus(model, s, docs, tmp_path / "b", None)
    da, db = PhraseDump.open(tmp_path / "a"), PhraseDump.open(tmp_path / "b")
    assert da.ntotal == db.ntotal == a["tokens_seen"] > 0 and da.passages == 30
    assert np.array_equal(da.all_vectors(), db.all_vectors()) and list(da.docids) == [d.id for d in docs]
