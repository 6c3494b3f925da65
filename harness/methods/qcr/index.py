"""QCR's indexes (§3.4, §4.2): codes as whitespace-joined tokens (``0_c52 1_c113 ...``) in a
pre-tokenized Lucene index; the "w/ words" index (codes and analysed words in one document) and the
no-position ablation built from a code index's ``codes.npy``."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import read_docids, write_docids
from harness.cost import startup_done
from harness.datasets import store
from harness.errors import DataError
from harness.indexes import build_index, load_index, pyserini_env
from harness.indexes.lucene import LUCENE_DIR, analyze_words
from harness.methods.qcr.codebook import usage
from harness.methods.qcr.model import QCRModel
from harness.models.runtime import encode_device
from harness.methods.qcr.settings import CODES_FILE, codebook_size, codes_k


def code_strings(codes: np.ndarray, ids: Sequence[str], *, k: int, size: int, positional: bool,
                 prefix: str = "c") -> list[str]:
    """Whitespace-joined code tokens per row (``0_c52 1_c113 ...`` or ``c52 c113 ...``); a row whose
    code count differs from ``k`` or holding an id outside ``[0, size)`` fails with its id."""
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[0] != len(ids):
        raise DataError(f"codes of shape {codes.shape} for {len(ids)} texts")
    if k and codes.shape[1] != k:
        raise DataError(f"{ids[0] if ids else '?'}: {codes.shape[1]} codes per text, the model writes K = {k}",
                        fix="rebuild the index with the current model")
    bad = np.nonzero((codes < 0) | (codes >= size))[0]
    if len(bad):
        raise DataError(f"{ids[bad[0]]}: code id {int(codes[bad[0]].max())} outside the codebook [0, {size})")
    if positional:
        return [" ".join(f"{i}_{prefix}{c}" for i, c in enumerate(row)) for row in codes.tolist()]
    return [" ".join(f"{prefix}{c}" for c in row) for row in codes.tolist()]


def with_words(code_texts: Sequence[str], texts: Sequence[str]) -> list[str]:
    """Codes and the Lucene-analysed words of each text in one pre-tokenized string ("w/ words")."""
    return [f"{c} {' '.join(w)}".strip() for c, w in zip(code_texts, analyze_words(list(texts)))]


def build_lucene(spec: str, ids: Sequence[str], texts: Sequence[str], out: Path, s: Mapping[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    build_index(spec, list(zip(ids, texts)), out=out / LUCENE_DIR, k1=s["k1"], b=s["b"])
    return {"spec": spec, "documents": len(ids), "build_seconds": round(time.perf_counter() - t0, 4)}


def load_lucene(folder: Path, s: Mapping[str, Any]):
    return load_index(folder, k1=s["k1"], b=s["b"])


def load_codes(folder: Path, *, allow_pickle: bool = False) -> tuple[np.ndarray, list[str]]:
    """The corpus codes of a built code index (``codes.npy``) and its doc ids, row counts checked."""
    codes = np.load(Path(folder) / CODES_FILE, allow_pickle=allow_pickle)
    return codes, read_docids(folder, expect=len(codes))


def code_index(s: Mapping[str, Any], model_dir: Path, data_dir: Path, out: Path) -> dict[str, Any]:
    """Encode the corpus into codes (``codes.npy``, doc ids) and index their strings."""
    model = QCRModel.load(model_dir, encode_device(s))
    pyserini_env.start_jvm()  # the JVM the Lucene index is built in starts here, with the start-up
    startup_done()  # the rest is per document (python -m harness estimate)
    docs = list(store.iter_corpus(data_dir))
    texts = [(d.title, d.text) for d in docs]
    t0 = time.perf_counter()
    codes = model.encode(texts, int(s["p_max_len"]), int(s["encode_batch_size"]))
    t_enc = time.perf_counter() - t0
    np.save(out / CODES_FILE, codes)
    write_docids(out, [d.id for d in docs])
    ms = model.s
    ids = [d.id for d in docs]
    strings = code_strings(codes, ids, k=codes_k(ms), size=codebook_size(ms["levels"]), positional=s["positional"])
    info = build_lucene(s["index"], ids, strings, out, s)
    u = usage(codes.ravel(), codebook_size(ms["levels"]))
    return {**info, "encode_seconds": round(t_enc, 4), "K": int(codes.shape[1]), "positional": s["positional"],
            "usage": {k: v for k, v in u.items() if k != "counts"},
            "unique_code_fraction": float(np.mean([len(set(r)) / len(r) for r in codes.tolist()])) if len(codes) else 0.0}


def source_strings(source: Path, positional: bool, kmeans: bool) -> tuple[list[str], list[str]]:
    """Doc ids and code strings of a built code index (k-means: ``k<id>`` per token, no positions)."""
    codes, ids = load_codes(source, allow_pickle=kmeans)
    if kmeans:
        return ids, [" ".join(f"k{c}" for c in row) for row in codes]
    return ids, code_strings(codes, ids, k=codes.shape[1], size=int(codes.max()) + 1 if codes.size else 1,
                             positional=positional)


def words_index(s: Mapping[str, Any], source: Path, data_dir: Path, out: Path, *, kmeans: bool
                ) -> dict[str, Any]:
    """"w/ words": the source index's code strings plus the analysed words of each passage."""
    ids, strings = source_strings(source, False if kmeans else s["positional"], kmeans)  # k-means ids have no positions
    docs = {d.id: d for d in store.iter_corpus(data_dir)}
    texts = [f"{docs[i].title}\n{docs[i].text}" if docs[i].title else docs[i].text for i in ids]
    info = build_lucene(s["index"], ids, with_words(strings, texts), out, s)
    write_docids(out, ids)
    return {**info, "words": "lucene default analyser (pyserini), title + text"}


def nopos_index(s: Mapping[str, Any], source: Path, out: Path) -> dict[str, Any]:
    """The source index's codes without position prefixes (the §4.2 ablation)."""
    ids, strings = source_strings(source, False, False)
    write_docids(out, ids)
    return {**build_lucene(s["index"], ids, strings, out, s), "positional": False}
