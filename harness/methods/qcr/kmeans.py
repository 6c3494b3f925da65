"""QCR's k-means baseline (§4.4): token vectors of the profile's dense encoder (or QCR's backbone)
clustered with faiss, every token of a text replaced by its centroid id (``k<id>``, no positions),
searched with BM25 alone and with the words."""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import write_docids, write_run_with_meta
from harness.cost import startup_done
from harness.datasets import store
from harness.errors import ConfigError, DataError
from harness.methods.qcr.index import build_lucene, iter_kmeans_strings, load_lucene, with_words
from harness.methods.qcr.model import code_dtype
from harness.methods.qcr.settings import CENTROIDS, CODES_FILE, KMEANS_OFFSETS
from harness.models.backbones import load_encoder, load_tokenizer
from harness.models.runtime import encode_device, quiet_transformers, torch_for
from harness.progress import chunks


def token_encoder(cfg: Mapping[str, Any], s: Mapping[str, Any], dpr_model: Path | None, device: str = "cpu"):
    """(tokenizer, encoder on ``device``) whose token outputs the k-means baseline clusters."""
    from transformers import AutoModel, AutoTokenizer

    from harness.methods.dpr import ENCODERS

    quiet_transformers()
    if s["kmeans"]["encoder"] == "dpr":
        if dpr_model is None:
            raise ConfigError("methods.qcr.kmeans.encoder: dpr, but the plan gave no DPR model")
        folder = Path(dpr_model) / ENCODERS[1]
        return AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).to(device)
    return load_tokenizer(cfg, s["backbone"]), load_encoder(cfg, s["backbone"]).to(device)


def iter_token_vectors(tok, enc, texts: Iterable[str], max_len: int, batch_size: int = 64
                       ) -> Iterator[list[np.ndarray]]:
    """Per batch of ``texts`` (an iterable, read a batch at a time), each text's encoder output vectors
    of its word-piece tokens ([CLS]/[SEP] left out), float32 on the host."""
    import torch

    device = next(enc.parameters()).device
    enc.eval()
    with torch.inference_mode():
        for batch in chunks(texts, batch_size):
            b = tok(batch, padding=True, truncation=True, max_length=max_len,
                    return_tensors="pt", return_special_tokens_mask=True)
            special = b.pop("special_tokens_mask")
            h = enc(**{k: v.to(device) for k, v in b.items()}).last_hidden_state.float().cpu().numpy()
            keep = (b["attention_mask"].numpy() == 1) & (special.numpy() == 0)
            yield [h[j][keep[j]] for j in range(h.shape[0])]


def token_vectors(tok, enc, texts: Sequence[str], max_len: int, batch_size: int = 64) -> list[np.ndarray]:
    """Per text, the encoder's output vectors of its word-piece tokens ([CLS]/[SEP] left out)."""
    return [v for batch in iter_token_vectors(tok, enc, texts, max_len, batch_size) for v in batch]


def centroid_index(centroids: np.ndarray):
    """The exact L2 index over the centroids that assigns a token its nearest one (on the GPUs where
    faiss has them)."""
    import faiss

    index = faiss.IndexFlatL2(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    return faiss.index_cpu_to_all_gpus(index) if faiss.get_num_gpus() > 0 else index


def kmeans_assign(centroids: np.ndarray, vectors: Sequence[np.ndarray], index: Any = None) -> list[np.ndarray]:
    """Each text's nearest-centroid ids (``index``: :func:`centroid_index` of ``centroids``, built once
    by a caller that assigns batch after batch)."""
    flat = np.concatenate([v for v in vectors if len(v)]) if any(len(v) for v in vectors) else None
    if flat is None:
        return [np.zeros(0, np.int64) for _ in vectors]
    index = centroid_index(centroids) if index is None else index
    _, ids = index.search(np.ascontiguousarray(flat, dtype=np.float32), 1)
    out, start = [], 0
    for v in vectors:
        out.append(ids[start:start + len(v), 0])
        start += len(v)
    return out


def fit_centroids(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path
                  ) -> dict[str, Any]:
    """faiss k-means over a seeded sample of the training corpus's token vectors (§4.4), every sampled
    vector used: faiss's default keeps 256 a centroid (8.2M of the paper's 50M at K = 32,000), so the
    cap is raised to the sample over K where that is more. The sample fills one preallocated array
    (the paper's 50M x 768 float32 are 143 GiB, never held twice), no larger than the corpus's passages
    times p_max_len (the most word-pieces a passage gives)."""
    import faiss

    km = s["kmeans"]
    torch_for(s)
    tok, enc = token_encoder(cfg, s, inputs.get("encoder"), encode_device(s))
    docs = store.corpus_lookup(inputs["data"])   # passages read in the sample's order, as it fills
    rng = np.random.default_rng(cfg["seed"])
    order = rng.permutation(len(docs))
    # a passage gives at most p_max_len word-pieces: a corpus smaller than the sample (the rehearsal's
    # slice: 2,067 passages, ~0.5M tokens) fills no more, so the array is not sized for 50M (143 GiB)
    want = min(int(km["sample_tokens"]), len(docs) * int(s["p_max_len"]))
    x, n = None, 0
    texts = (f"{d.title} {d.text}" for d in map(docs.doc_at, order))
    for batch in iter_token_vectors(tok, enc, texts, int(s["p_max_len"]) + 2):   # batches of 64, as ever
        for v in batch:
            take = min(len(v), want - n)
            if take <= 0:
                break
            if x is None:
                x = np.empty((want, v.shape[1]), np.float32)
            x[n:n + take] = v[:take]
            n += take
        if n >= want:
            break
    del docs
    if x is None:
        raise DataError(f"{inputs['data']}: no token to cluster in the training corpus",
                        fix="check the corpus of methods.qcr.train_dataset")
    x = x[:n]
    k = min(int(km["clusters"]), len(x))
    t0 = time.perf_counter()
    cap = max(256, -(-len(x) // k))   # faiss's default (256) unless the sample holds more a centroid
    kmeans = faiss.Kmeans(x.shape[1], k, niter=int(km["niter"]), seed=int(cfg["seed"]), verbose=False,
                          max_points_per_centroid=cap, gpu=faiss.get_num_gpus() > 0)
    kmeans.train(x)
    np.save(out / CENTROIDS, kmeans.centroids)
    return {"clusters": k, "tokens": len(x), "dim": int(x.shape[1]), "encoder": km["encoder"],
            "max_points_per_centroid": cap, "seconds": round(time.perf_counter() - t0, 3)}


def kmeans_codes(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path],
                 texts: Sequence[str], max_len: int) -> list[np.ndarray]:
    """Centroid ids of every token of ``texts`` (the centroids of ``inputs["model"]``)."""
    torch_for(s)
    tok, enc = token_encoder(cfg, s, inputs.get("encoder"), encode_device(s))
    centroids = np.load(inputs["model"] / CENTROIDS)
    return kmeans_assign(centroids, token_vectors(tok, enc, texts, max_len, int(s["encode_batch_size"])))


def kmeans_index(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path
                 ) -> dict[str, Any]:
    """Every corpus token replaced by its nearest centroid id (``k<id>``, one per token, no positions).
    The corpus is encoded and assigned a batch at a time: its token vectors are never held (MS
    MARCO's ~660M tokens x 768 float32 are ~2 TB); the ids are kept flat (``codes.npy``, the smallest
    integer type for K) with row offsets (``offsets.npy``), and their strings stream to Lucene."""
    torch_for(s)
    tok, enc = token_encoder(cfg, s, inputs.get("encoder"), encode_device(s))
    centroids = np.load(inputs["model"] / CENTROIDS)
    index, dtype = centroid_index(centroids), code_dtype(len(centroids))
    startup_done()  # the rest is per document (python -m harness estimate)
    ids: list[str] = []
    blocks: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    texts = (f"{d.title} {d.text}" for d in store.iter_corpus(inputs["data"], ids))
    for batch in iter_token_vectors(tok, enc, texts, int(s["p_max_len"]) + 2, int(s["encode_batch_size"])):
        codes = kmeans_assign(centroids, batch, index)
        lengths.append(np.array([len(c) for c in codes], np.int64))
        blocks.append(np.concatenate(codes).astype(dtype) if codes else np.zeros(0, dtype))
    flat = np.concatenate(blocks) if blocks else np.zeros(0, dtype)
    del blocks
    offsets = np.zeros(len(ids) + 1, np.int64)
    if lengths:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    np.save(out / CODES_FILE, flat)
    np.save(out / KMEANS_OFFSETS, offsets)
    write_docids(out, ids)
    return {**build_lucene(s["index"], ids, iter_kmeans_strings(flat, offsets), out, s), "tokens": len(flat)}


def kmeans_runs(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path, *,
                dataset: str | None, k: int) -> dict[str, Any]:
    """Runs ``qcr.kmeans`` (centroid ids) and ``qcr.kmeans-words`` (ids and words) of the test questions."""
    queries = store.read_queries(inputs["data"], "test")
    codes = kmeans_codes(cfg, s, inputs, [q.text for q in queries], int(s["q_max_len"]) + 2)
    qids = [q.id for q in queries]
    strs = [" ".join(f"k{c}" for c in row) for row in codes]
    for system, folder, qs in (("qcr.kmeans", "index", strs),
                               ("qcr.kmeans-words", "words_index", with_words(strs, [q.text for q in queries]))):
        hits = load_lucene(inputs[folder], s).search(dict(zip(qids, qs)), k)
        write_run_with_meta(out / f"{system}.trec", hits, system=system,
                            meta={"dataset": dataset, "depth": k})
    return {"queries": len(queries)}
