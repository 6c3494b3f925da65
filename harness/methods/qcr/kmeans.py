"""QCR's k-means baseline (§4.4): token vectors of the profile's dense encoder (or QCR's backbone)
clustered with faiss, every token of a text replaced by its centroid id (``k<id>``, no positions),
searched with BM25 alone and with the words."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import write_docids, write_run_with_meta
from harness.datasets import store
from harness.errors import ConfigError
from harness.methods.qcr.index import build_lucene, load_lucene, with_words
from harness.methods.qcr.settings import CENTROIDS, CODES_FILE
from harness.models.backbones import load_encoder, load_tokenizer
from harness.models.runtime import quiet_transformers, torch_for


def token_encoder(cfg: Mapping[str, Any], s: Mapping[str, Any], dpr_model: Path | None):
    """(tokenizer, encoder) whose token outputs the k-means baseline clusters."""
    from transformers import AutoModel, AutoTokenizer

    from harness.methods.dpr import ENCODERS

    quiet_transformers()
    if s["kmeans"]["encoder"] == "dpr":
        if dpr_model is None:
            raise ConfigError("methods.qcr.kmeans.encoder: dpr, but the plan gave no DPR model")
        folder = Path(dpr_model) / ENCODERS[1]
        return AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder)
    return load_tokenizer(cfg, s["backbone"]), load_encoder(cfg, s["backbone"])


def token_vectors(tok, enc, texts: Sequence[str], max_len: int, batch_size: int = 64) -> list[np.ndarray]:
    """Per text, the encoder's output vectors of its word-piece tokens ([CLS]/[SEP] left out)."""
    import torch

    enc.eval()
    out: list[np.ndarray] = []
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            b = tok(list(texts[i:i + batch_size]), padding=True, truncation=True, max_length=max_len,
                    return_tensors="pt", return_special_tokens_mask=True)
            special = b.pop("special_tokens_mask")
            h = enc(**b).last_hidden_state.float().numpy()
            keep = (b["attention_mask"].numpy() == 1) & (special.numpy() == 0)
            out += [h[j][keep[j]] for j in range(h.shape[0])]
    return out


def kmeans_assign(centroids: np.ndarray, vectors: Sequence[np.ndarray]) -> list[np.ndarray]:
    import faiss

    index = faiss.IndexFlatL2(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    flat = np.concatenate([v for v in vectors if len(v)]) if any(len(v) for v in vectors) else None
    if flat is None:
        return [np.zeros(0, np.int64) for _ in vectors]
    _, ids = index.search(np.ascontiguousarray(flat, dtype=np.float32), 1)
    out, start = [], 0
    for v in vectors:
        out.append(ids[start:start + len(v), 0])
        start += len(v)
    return out


def fit_centroids(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path
                  ) -> dict[str, Any]:
    """faiss k-means over a seeded sample of the training corpus's token vectors (§4.4)."""
    import faiss

    km = s["kmeans"]
    torch_for(s)
    tok, enc = token_encoder(cfg, s, inputs.get("encoder"))
    docs = list(store.iter_corpus(inputs["data"]))
    rng = np.random.default_rng(cfg["seed"])
    order = rng.permutation(len(docs))
    vecs, n = [], 0
    for start in range(0, len(order), 256):
        chunk = [docs[i] for i in order[start:start + 256]]
        for v in token_vectors(tok, enc, [f"{d.title} {d.text}" for d in chunk], int(s["p_max_len"]) + 2):
            vecs.append(v)
            n += len(v)
        if n >= km["sample_tokens"]:
            break
    x = np.ascontiguousarray(np.concatenate(vecs)[: km["sample_tokens"]], dtype=np.float32)
    k = min(int(km["clusters"]), len(x))
    t0 = time.perf_counter()
    kmeans = faiss.Kmeans(x.shape[1], k, niter=int(km["niter"]), seed=int(cfg["seed"]), verbose=False)
    kmeans.train(x)
    np.save(out / CENTROIDS, kmeans.centroids)
    return {"clusters": k, "tokens": len(x), "dim": int(x.shape[1]), "encoder": km["encoder"],
            "seconds": round(time.perf_counter() - t0, 3)}


def kmeans_codes(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path],
                 texts: Sequence[str], max_len: int) -> list[np.ndarray]:
    """Centroid ids of every token of ``texts`` (the centroids of ``inputs["model"]``)."""
    torch_for(s)
    tok, enc = token_encoder(cfg, s, inputs.get("encoder"))
    centroids = np.load(inputs["model"] / CENTROIDS)
    return kmeans_assign(centroids, token_vectors(tok, enc, texts, max_len, int(s["encode_batch_size"])))


def kmeans_index(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path
                 ) -> dict[str, Any]:
    """Every corpus token replaced by its nearest centroid id (``k<id>``, one per token, no positions)."""
    docs = list(store.iter_corpus(inputs["data"]))
    codes = kmeans_codes(cfg, s, inputs, [f"{d.title} {d.text}" for d in docs], int(s["p_max_len"]) + 2)
    arr = np.empty(len(codes), dtype=object)
    arr[:] = [c.astype(np.int32) for c in codes]
    np.save(out / CODES_FILE, arr, allow_pickle=True)
    ids = [d.id for d in docs]
    write_docids(out, ids)
    return build_lucene(s["index"], ids, [" ".join(f"k{c}" for c in row) for row in codes], out, s)


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
