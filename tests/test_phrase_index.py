"""DensePhrases' phrase dump, phrase index backend and Eq. 10 span search, against brute force."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.errors import ConfigError, DataError
from harness.indexes import build_index, check_spec, load_index
from harness.indexes.phrase import Phrase, PhraseBackend, PhraseIndex
from harness.indexes.phrase_dump import DumpWriter, PhraseDump, decode, encode

D = 32
L = 3


def _passages(rng: np.random.Generator, n_passages: int, n_clusters: int = 12, gaps: bool = False):
    """(docid, text, vectors, offsets, positions) per passage: words 'w<p>_<t>' separated by spaces,
    token vectors near one of ``n_clusters`` centres (so IVF has structure); with ``gaps`` some
    tokens are 'filtered' (positions skip)."""
    centres = rng.standard_normal((n_clusters, D)).astype(np.float32)
    out = []
    for p in range(n_passages):
        n_all = int(rng.integers(1, 40))
        words = [f"w{p}_{t}" for t in range(n_all)]
        text = " ".join(words)
        starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
        keep = np.sort(rng.choice(n_all, max(1, int(n_all * 0.6)), replace=False)) if gaps else np.arange(n_all)
        offsets = np.stack([starts[keep], starts[keep] + np.array([len(words[t]) for t in keep])], 1).astype(np.int32)
        vecs = centres[rng.integers(0, n_clusters, len(keep))] + 0.5 * rng.standard_normal((len(keep), D))
        out.append((f"doc-{p}", text, vecs.astype(np.float32), offsets, keep.astype(np.int32)))
    return out


def _write(folder: Path, passages, codec: str = "float32", shard_tokens: int = 1 << 19, positions: bool = False):
    with DumpWriter(folder, D, codec=codec, shard_tokens=shard_tokens) as w:
        for docid, _, vecs, offs, pos in passages:
            w.add(docid, vecs, offs, pos if positions else None)
    return PhraseDump.open(folder)


def brute_force(dump: PhraseDump, qs: np.ndarray, qe: np.ndarray, L: int, top: int):
    """Every valid (i, j): same passage, i <= j, pos[j] - pos[i] < L, scored in float64."""
    H = dump.all_vectors().astype(np.float64)
    doc, pos = np.asarray(dump.doc_rows), np.asarray(dump.positions)
    pairs = [(i, j) for i in range(len(H)) for j in range(i, min(len(H), i + L))
             if doc[i] == doc[j] and pos[j] - pos[i] < L]
    I = np.array([p[0] for p in pairs])
    J = np.array([p[1] for p in pairs])
    out = []
    for b in range(len(qs)):
        s = H[I] @ qs[b].astype(np.float64) + H[J] @ qe[b].astype(np.float64)
        order = np.lexsort((J, I, -s))[:top]
        out.append([(float(s[o]), int(I[o]), int(J[o])) for o in order])
    return out


@pytest.fixture(scope="module")
def corpus():
    return _passages(np.random.default_rng(3), 120)


@pytest.fixture(scope="module")
def dump(corpus, tmp_path_factory) -> PhraseDump:
    return _write(tmp_path_factory.mktemp("dump") / "dump", corpus, codec="float32", shard_tokens=500)


@pytest.fixture(scope="module")
def queries(dump):
    rng = np.random.default_rng(7)
    H = dump.all_vectors()
    rows = rng.integers(0, dump.ntotal, 24)
    qs = H[rows] + 0.3 * rng.standard_normal((24, D)).astype(np.float32)
    qe = H[np.minimum(rows + 1, dump.ntotal - 1)] + 0.3 * rng.standard_normal((24, D)).astype(np.float32)
    return qs.astype(np.float32), qe.astype(np.float32)


# --- the dump --------------------------------------------------------------------------------------


def test_int8_codec_round_trip():
    x = np.linspace(-2.0, 4.35, 100_001, dtype=np.float32)
    q = encode(x, "int8")
    assert q.dtype == np.int8
    assert np.max(np.abs(decode(q, "int8") - x)) <= 0.025 + 1e-6
    # the authors' formula, and clipping outside the representable range
    np.testing.assert_array_equal(encode(np.array([-2.0, 0.0, 1.0, 100.0, -100.0]), "int8"), [0, 40, 60, 127, -128])
    assert decode(np.array([127], np.int8), "int8")[0] == pytest.approx(4.35)


@pytest.mark.parametrize("codec,tol", [("float32", 0.0), ("float16", 2e-3), ("int8", 0.025 + 1e-6)])
def test_dump_round_trip_counts_and_offsets(tmp_path, corpus, codec, tol):
    pd = _write(tmp_path / "d", corpus, codec=codec, shard_tokens=300)
    n = sum(len(c[2]) for c in corpus)
    assert (pd.ntotal, pd.passages, pd.dim, pd.codec) == (n, len(corpus), D, codec)
    assert len(pd.shards) > 1 and all(len(s) <= 300 + 40 for s in pd.shards)
    V = np.concatenate([c[2] for c in corpus])
    if codec == "int8":  # values above 4.35 (the largest int8 code) are clipped
        V = np.minimum(V, 4.35)
    assert np.max(np.abs(pd.all_vectors() - V)) <= tol + (np.abs(V).max() * 1e-3 if codec == "float16" else 0)
    rows = np.random.default_rng(0).integers(0, n, 200)
    np.testing.assert_array_equal(pd.vectors(rows), pd.all_vectors()[rows])  # gathers across shards
    np.testing.assert_array_equal(pd.offsets, np.concatenate([c[3] for c in corpus]))
    np.testing.assert_array_equal(pd.doc_rows, np.repeat(np.arange(len(corpus)), [len(c[2]) for c in corpus]))
    assert pd.docids == [c[0] for c in corpus]
    lo, hi = pd.passage_rows(5)
    assert hi - lo == len(corpus[5][2]) and set(np.asarray(pd.doc_rows[lo:hi])) == {5}
    assert pd.nbytes_on_disk > n * D * {"float32": 4, "float16": 2, "int8": 1}[codec]
    pd.verify()


def test_dump_writer_close_reports(tmp_path, corpus):
    w = DumpWriter(tmp_path / "d", D, codec="int8", shard_tokens=1000)
    for docid, _, vecs, offs, _ in corpus:
        w.add(docid, vecs, offs)
    info = w.close()
    n = sum(len(c[2]) for c in corpus)
    assert info["passages"] == len(corpus) and info["tokens"] == n and info["codec"] == "int8"
    assert info["shards"] == len(PhraseDump.open(tmp_path / "d").shards) >= 2
    assert info["bytes"] == sum(p.stat().st_size for p in (tmp_path / "d").iterdir())


def test_dump_bad_input(tmp_path):
    w = DumpWriter(tmp_path / "d", D)
    with pytest.raises(DataError, match="dim is 32"):
        w.add("a", np.zeros((3, D + 1), np.float32), np.zeros((3, 2), np.int32))
    with pytest.raises(DataError, match=r"expected \(3, 2\)"):
        w.add("a", np.zeros((3, D), np.float32), np.zeros((2, 2), np.int32))
    with pytest.raises(DataError, match="strictly increasing"):
        w.add("a", np.zeros((3, D), np.float32), np.zeros((3, 2), np.int32), np.array([0, 2, 2]))
    w.add("a", np.zeros((3, D), np.float32), np.zeros((3, 2), np.int32))
    with pytest.raises(DataError, match="added twice"):
        w.add("a", np.zeros((1, D), np.float32), np.zeros((1, 2), np.int32))
    w.close()
    with pytest.raises(DataError, match="already holds a phrase dump"):
        DumpWriter(tmp_path / "d", D)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no finished phrase dump") as exc:
        PhraseDump.open(tmp_path / "empty")
    assert exc.value.fix


def test_dump_json_not_matching_files(tmp_path, corpus):
    _write(tmp_path / "d", corpus[:10])
    meta = json.loads((tmp_path / "d" / "dump.json").read_text())
    meta["tokens"] += 1
    (tmp_path / "d" / "dump.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="dump.json"):
        PhraseDump.open(tmp_path / "d")
    shutil.rmtree(tmp_path / "d")
    _write(tmp_path / "d", corpus[:10])
    (tmp_path / "d" / "offsets.npy").unlink()
    with pytest.raises(DataError, match="offsets.npy is missing"):
        PhraseDump.open(tmp_path / "d")


def test_verify_detects_modified_vectors(tmp_path, corpus):
    pd = _write(tmp_path / "d", corpus[:10], codec="int8")
    arr = np.load(tmp_path / "d" / "vectors-00000.npy")
    arr[0, 0] += 1
    np.save(tmp_path / "d" / "vectors-00000.npy", arr)
    with pytest.raises(DataError, match="content hash"):
        PhraseDump.open(tmp_path / "d").verify()
    del pd


# --- span search -----------------------------------------------------------------------------------


def test_flat_span_search_equals_brute_force(dump, queries):
    qs, qe = queries
    index = PhraseIndex.build("Flat", dump, max_phrase_len=L)
    got = index.search_phrases(qs, qe, k=dump.ntotal, top_phrases=5)  # every row is a candidate: exact
    ref = brute_force(dump, qs, qe, L, 5)
    for g, r in zip(got, ref):
        assert [(p.start_row, p.end_row) for p in g] == [(i, j) for _, i, j in r]
        np.testing.assert_allclose([p.score for p in g], [s for s, _, _ in r], rtol=1e-5, atol=1e-4)
        for p in g:
            assert p.score == pytest.approx(p.start_score + p.end_score, rel=1e-6)
            assert p.doc_row == dump.doc_rows[p.start_row]


def test_small_k_scores_are_exact_and_best_among_candidates(dump, queries):
    """With k << N, each returned phrase has its exact score, and no valid pair built from the
    candidates scores higher than the last one returned."""
    qs, qe = queries
    index = PhraseIndex.build("Flat", dump, max_phrase_len=L)
    k = 8
    got = index.search_phrases(qs, qe, k=k, top_phrases=4)
    H = dump.all_vectors().astype(np.float64)
    s_rows, e_rows = index.mips(qs, qe, k)
    for b, phrases in enumerate(got):
        assert len(phrases) == 4
        for p in phrases:
            exact = H[p.start_row] @ qs[b] + H[p.end_row] @ qe[b]
            assert p.score == pytest.approx(exact, rel=1e-5, abs=1e-4)
            assert p.start_row in s_rows[b] or p.end_row in e_rows[b]
        i, j = index.span_candidates(s_rows[b], e_rows[b])
        allsc = H[i] @ qs[b] + H[j] @ qe[b]
        assert np.sort(allsc)[::-1][3] == pytest.approx(phrases[3].score, rel=1e-5, abs=1e-4)


def test_span_constraint_respects_passages_length_and_positions(tmp_path):
    corpus = _passages(np.random.default_rng(11), 60, gaps=True)
    pd = _write(tmp_path / "d", corpus, positions=True)
    rng = np.random.default_rng(1)
    qs = rng.standard_normal((16, D)).astype(np.float32)
    qe = rng.standard_normal((16, D)).astype(np.float32)
    index = PhraseIndex.build("Flat", pd, max_phrase_len=4)
    got = index.search_phrases(qs, qe, k=pd.ntotal, top_phrases=50)
    ref = brute_force(pd, qs, qe, 4, 50)
    doc, pos = np.asarray(pd.doc_rows), np.asarray(pd.positions)
    for g, r in zip(got, ref):
        assert [(p.start_row, p.end_row) for p in g] == [(i, j) for _, i, j in r]
        for p in g:
            assert doc[p.start_row] == doc[p.end_row] == p.doc_row
            assert 0 <= p.end_row - p.start_row < 4 and 0 <= pos[p.end_row] - pos[p.start_row] < 4
    # candidates at passage boundaries never pair across them
    last_rows = np.nonzero(np.diff(doc))[0]
    i, j = index.span_candidates(last_rows, last_rows + 1)
    assert np.all(doc[i] == doc[j])


def test_answer_text_and_doc(dump, corpus, queries):
    index = PhraseIndex.build("Flat", dump, max_phrase_len=L)
    texts = {c[0]: c[1] for c in corpus}
    for phrases in index.search_phrases(*queries, k=50, top_phrases=3):
        for p in phrases:
            docid = index.doc_of(p)
            text = index.answer_text(p, texts)
            assert text == index.answer_text(p, texts.__getitem__)
            words = text.split(" ")
            assert len(words) == p.end_row - p.start_row + 1 and all(w.startswith(f"w{docid[4:]}_") for w in words)


def test_ivf_sq4_full_probe_recovers_flat_top1(dump, queries):
    qs, qe = queries
    flat = PhraseIndex.build("Flat", dump, max_phrase_len=L)
    ivf = PhraseIndex.build("IVF16,SQ4", dump, max_phrase_len=L, nprobe=16)
    assert ivf.nlist == 16 and ivf.spec == "phrase:IVF16,SQ4"
    a = flat.search_phrases(qs, qe, k=20, top_phrases=1)
    b = ivf.search_phrases(qs, qe, k=20, top_phrases=1)
    same = np.mean([x[0][1:3] == y[0][1:3] for x, y in zip(a, b)])
    assert same >= 0.8
    assert ivf.nbytes < flat.nbytes  # 4 bits/dim + ids vs 32 bits/dim


def test_opq_ivf_pq_builds_and_searches(dump, queries):
    index = build_index("phrase:OPQ8,IVF8,PQ8x8", dump, max_phrase_len=L, nprobe=8, opq_niter=5)
    assert index.spec == "phrase:OPQ8,IVF8,PQ8x8" and index.ntotal == dump.ntotal
    spelled = build_index("phrase:OPQ8_32,IVF8,PQ8x8", dump, max_phrase_len=L, opq_niter=2)
    assert spelled.spec == "phrase:OPQ8_32,IVF8,PQ8x8"
    got = index.search_phrases(*queries, k=10, top_phrases=3)
    assert all(len(g) == 3 for g in got)
    S, rows = index.search(queries[0], 5)
    assert S.shape == rows.shape == (len(queries[0]), 5) and np.all(rows >= 0)


def test_plain_search_protocol(dump, queries):
    flat = build_index("phrase:Flat", dump)
    S, rows = flat.search(queries[0], 7)
    H = dump.all_vectors()
    exact = queries[0] @ H.T
    np.testing.assert_array_equal(rows, np.argsort(-exact, axis=1, kind="stable")[:, :7])
    np.testing.assert_allclose(S, np.take_along_axis(exact, rows, 1), rtol=1e-5, atol=1e-4)


def test_wrong_query_dims(dump):
    index = PhraseIndex.build("Flat", dump)
    with pytest.raises(ValueError, match="q_start has 31 dims and q_end 32"):
        index.search_phrases(np.zeros((2, D - 1), np.float32), np.zeros((2, D), np.float32), 5)


# --- specs, training sizes, persistence -----------------------------------------------------------


@pytest.mark.parametrize("part,msg", [
    ("IVF64,SQ8", "SQ4 only"), ("HNSW32", "did you mean"), ("IVF64,PQ8x8", "OPQ rotation"),
    ("OPQ96,IVF64,PQ96", "PQ bits"), ("OPQ96,IVF64,PQ48x8", "same number"), ("IVF0,SQ4", "nlist"),
    ("IVF1048576,SQ", "did you mean 'phrase:IVF1048576,SQ4'"),
])
def test_spec_errors(part, msg):
    with pytest.raises(ConfigError, match=msg) as exc:
        check_spec(f"phrase:{part}")
    assert "phrase:Flat" in exc.value.fix


def test_good_specs_pass():
    for part in ("Flat", "IVF1048576,SQ4", "OPQ96,IVF1048576,PQ96x8", "OPQ96_768,IVF4096,PQ96x8"):
        PhraseBackend.check_spec(part)


def test_nlist_too_large_is_a_config_error(dump):
    with pytest.raises(ConfigError, match="smaller nlist") as exc:
        PhraseIndex.build("IVF4096,SQ4", dump)
    assert "4,096" in str(exc.value) and "not changed silently" in str(exc.value)
    with pytest.raises(ConfigError, match="PQ8x8 need at least 256"):
        PhraseIndex.build("OPQ8,IVF4,PQ8x8", dump, train_fraction=0.05)


def test_the_rehearsal_lowers_an_nlist_its_slice_cannot_train_and_says_so(tmp_path, dump, queries):
    """Where the job may take fallbacks (device_fallback: the rehearsal's slices hold far fewer token
    vectors than 1,048,576 lists need), nlist is lowered to the paper's list size (ntotal / 734),
    recorded in the job's fallbacks and in phrase.json; the index loads under its configured spec only
    where fallbacks are allowed too, so a search outside the rehearsal never reads it as the paper's."""
    from harness import cost
    from harness.indexes.phrase import PAPER_LIST_SIZE

    want = max(1, dump.ntotal // PAPER_LIST_SIZE)
    cost.allow_fallbacks(True)
    try:
        index = PhraseIndex.build("IVF4096,SQ4", dump, max_phrase_len=L, nprobe=256)
        assert index.nlist == want < 4096 and index.spec == f"phrase:IVF{want},SQ4"
        assert [f for f in cost.fallbacks() if f.startswith("phrase:IVF4096,SQ4: nlist 4,096 -> ")]
        assert index.train_info["nlist_fallback"] == {"configured": "phrase:IVF4096,SQ4", "built": index.spec}
        assert index.built_in_place_of == "phrase:IVF4096,SQ4"
        # through the registry, as the index job builds it (the rehearsal's first run at the paper's shape
        # failed here: build_index read the lowered nlist back as a misspelt spec)
        via = build_index("phrase:IVF4096,SQ4", dump, max_phrase_len=L, nprobe=256)
        assert via.spec == index.spec and via.built_in_place_of == "phrase:IVF4096,SQ4"
        index.save(tmp_path / "ix")
        loaded = PhraseIndex.load(tmp_path / "ix", "IVF4096,SQ4")
        assert loaded.spec == index.spec and loaded.nlist == want
        assert loaded.search_phrases(*queries, k=10, top_phrases=3) == index.search_phrases(*queries, k=10, top_phrases=3)
        assert any("searched as built" in f for f in cost.fallbacks())
    finally:
        cost.allow_fallbacks(False)
    for spec in ("IVF4096,SQ4", f"IVF{want},SQ4"):  # the configured spec, or the built one as the index job records it
        with pytest.raises(DataError, match="device_fallback"):
            PhraseIndex.load(tmp_path / "ix", spec)
    with pytest.raises(DataError, match="records"):  # another configured spec: refused as any mismatch
        PhraseIndex.load(tmp_path / "ix", "IVF2048,SQ4")


def test_save_load_identical_and_nprobe_override(tmp_path, dump, queries):
    from harness.meta import write_meta

    index = build_index("phrase:IVF16,SQ4", dump, max_phrase_len=L, nprobe=4)
    index.save(tmp_path / "ix")
    write_meta(tmp_path / "ix", "index", spec=index.spec)
    loaded = load_index(tmp_path / "ix")
    assert loaded.spec == index.spec and loaded.nprobe == 4 and loaded.max_phrase_len == L
    assert loaded.search_phrases(*queries, k=10, top_phrases=5) == index.search_phrases(*queries, k=10, top_phrases=5)
    assert load_index(tmp_path / "ix", nprobe=16).nprobe == 16


def test_load_refuses_changed_or_missing_dump(tmp_path, corpus):
    pd = _write(tmp_path / "d", corpus[:40])
    index = PhraseIndex.build("Flat", pd)
    index.save(tmp_path / "ix")
    # the dump is written again with other vectors: its dump.json content hash changes
    shutil.rmtree(tmp_path / "d")
    other = [(d, t, v + 1.0, o, p) for d, t, v, o, p in corpus[:40]]
    _write(tmp_path / "d", other)
    with pytest.raises(DataError, match="changed since the index was built"):
        PhraseIndex.load(tmp_path / "ix", "Flat")
    shutil.rmtree(tmp_path / "d")
    with pytest.raises(DataError, match="is missing"):
        PhraseIndex.load(tmp_path / "ix", "Flat")


def test_load_refuses_spec_mismatch(tmp_path, dump):
    PhraseIndex.build("Flat", dump).save(tmp_path / "ix")
    with pytest.raises(DataError, match=r"records 'phrase:Flat' but the index is loaded as 'phrase:IVF8,SQ4'"):
        PhraseIndex.load(tmp_path / "ix", "IVF8,SQ4")
    info = json.loads((tmp_path / "ix" / "phrase.json").read_text())
    info["spec"] = "phrase:IVF8,SQ4"
    (tmp_path / "ix" / "phrase.json").write_text(json.dumps(info))
    with pytest.raises(DataError, match=r"reads back as 'phrase:Flat'.*'phrase:IVF8,SQ4'"):
        PhraseIndex.load(tmp_path / "ix", "IVF8,SQ4")


def test_phrase_is_a_namedtuple():
    p = Phrase(1.5, 3, 4, 0, 1.0, 0.5)
    assert p.score == 1.5 and p._fields == ("score", "start_row", "end_row", "doc_row", "start_score", "end_score")


def test_opq_index_reads_back_after_save_and_load(tmp_path):
    """faiss writes the OPQ rotation as a plain LinearTransform: the saved index must still load as its spec."""
    from harness.indexes import build_index, load_index
    from harness.indexes.phrase_dump import DumpWriter, PhraseDump
    from harness.meta import write_meta

    rng = np.random.default_rng(3)
    with DumpWriter(tmp_path / "dump", 16, codec="float32") as w:
        for p in range(40):
            n = 30
            w.add(f"p{p}", rng.normal(size=(n, 16)).astype(np.float32),
                  np.stack([np.arange(n) * 4, np.arange(n) * 4 + 3], 1).astype(np.int32))
    dump = PhraseDump.open(tmp_path / "dump")
    idx = build_index("phrase:OPQ4,IVF4,PQ4x4", dump, nprobe=4, train_fraction=1.0, max_phrase_len=3)
    idx.save(tmp_path / "ix")
    write_meta(tmp_path / "ix", "index", spec=idx.spec)
    back = load_index(tmp_path / "ix", dump=tmp_path / "dump")
    assert back.spec == "phrase:OPQ4,IVF4,PQ4x4"
    q = rng.normal(size=(3, 16)).astype(np.float32)
    assert [[p[:3] for p in r] for r in back.search_phrases(q, q, 5, 3)] == \
        [[p[:3] for p in r] for r in idx.search_phrases(q, q, 5, 3)]


@pytest.mark.parametrize("factory", ["IVF8,SQ4", "OPQ8,IVF8,PQ8x4"])
@pytest.mark.parametrize("nprobe", [1, 3, 8])
def test_blas_coarse_step_gives_faiss_own_results(dump, queries, factory, nprobe):
    """PhraseIndex searches IVF lists chosen by numpy's BLAS (coarse_assign) + search_preassigned: the
    same rows as faiss's own search (its IndexFlatIP quantiser), scores within float rounding."""
    import faiss

    from harness.indexes.phrase import coarse_assign

    index = PhraseIndex.build(factory, dump, nprobe=nprobe, opq_niter=2)
    q = np.concatenate(queries)
    want_s, want_i = index.index.search(q, 15)           # faiss end to end
    got_s, got_i = index.search(q, 15)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-5, atol=1e-4)
    quant = faiss.downcast_index(faiss.extract_index_ivf(index.index).quantizer)
    C = faiss.rev_swig_ptr(quant.get_xb(), quant.ntotal * quant.d).reshape(quant.ntotal, quant.d)
    qt = q if factory.startswith("IVF") else faiss.downcast_VectorTransform(index.index.chain.at(0)).apply(q)
    dis, lists = coarse_assign(C, qt, nprobe)
    fd, fl = quant.search(qt, nprobe)
    np.testing.assert_array_equal(lists, fl)
    np.testing.assert_allclose(dis, fd, rtol=1e-5, atol=1e-4)
