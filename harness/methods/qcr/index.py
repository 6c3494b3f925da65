"""QCR's indexes (§3.4, §4.2): codes as whitespace-joined tokens (``0_c52 1_c113 ...``) in a
pre-tokenized Lucene index; the "w/ words" index (codes and analysed words in one document) and the
no-position ablation built from a code index's ``codes.npy``."""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
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
from harness.progress import chunks
from harness.methods.qcr.settings import CODES_FILE, KMEANS_OFFSETS, codebook_size, codes_k


def code_strings(codes: np.ndarray, ids: Sequence[str], *, k: int, size: int, positional: bool,
                 prefix: str = "c") -> list[str]:
    """Whitespace-joined code tokens per row (``0_c52 1_c113 ...`` or ``c52 c113 ...``); a row whose
    code count differs from ``k`` or holding an id outside ``[0, size)`` fails with its id."""
    return list(iter_code_strings(codes, ids, k=k, size=size, positional=positional, prefix=prefix))


def iter_code_strings(codes: np.ndarray, ids: Sequence[str], *, k: int, size: int, positional: bool,
                      prefix: str = "c", rows: int = 256) -> Iterator[str]:
    """:func:`code_strings` one row at a time, every row checked before the first is given: a
    corpus's strings (8.8M passages x K 250 on MS MARCO: about 20 GB of Python strings) are never
    held at once; the Lucene build writes each as it comes."""
    codes = np.asarray(codes)
    _check_codes(codes, ids, k=k, size=size)
    for a in range(0, len(codes), rows):
        block = codes[a:a + rows].tolist()
        if positional:
            yield from (" ".join(f"{i}_{prefix}{c}" for i, c in enumerate(row)) for row in block)
        else:
            yield from (" ".join(f"{prefix}{c}" for c in row) for row in block)


def _check_codes(codes: np.ndarray, ids: Sequence[str], *, k: int, size: int) -> None:
    if codes.ndim != 2 or codes.shape[0] != len(ids):
        raise DataError(f"codes of shape {codes.shape} for {len(ids)} texts")
    if k and codes.shape[1] != k:
        raise DataError(f"{ids[0] if ids else '?'}: {codes.shape[1]} codes per text, the model writes K = {k}",
                        fix="rebuild the index with the current model")
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= size):   # no [N, K] temporary unless one is bad
        bad = np.nonzero(((codes < 0) | (codes >= size)).any(axis=1))[0]
        raise DataError(f"{ids[bad[0]]}: code id {int(codes[bad[0]].max())} outside the codebook [0, {size})")


#: texts analysed at a time by :func:`iter_with_words`
WORDS_BLOCK = 4096


def with_words(code_texts: Iterable[str], texts: Sequence[str]) -> list[str]:
    """Codes and the Lucene-analysed words of each text in one pre-tokenized string ("w/ words")."""
    return list(iter_with_words(code_texts, texts))


def iter_with_words(code_texts: Iterable[str], texts: Iterable[str], block: int = WORDS_BLOCK) -> Iterator[str]:
    """:func:`with_words` a block of texts at a time, both iterables read as they go (a corpus's analysed
    words, MS MARCO's 8.8M passages, are never listed at once); as many code strings as texts, or it fails."""
    codes = iter(code_texts)
    for t in chunks(texts, block):
        c = list(islice(codes, len(t)))
        if len(c) != len(t):
            raise DataError(f"w/ words: {len(c)} code string(s) left for a block of {len(t)} text(s)")
        yield from (f"{ci} {' '.join(w)}".strip() for ci, w in zip(c, analyze_words(t)))
    if next(codes, None) is not None:
        raise DataError("w/ words: more code strings than texts")


def build_lucene(spec: str, ids: Sequence[str], texts: Iterable[str], out: Path, s: Mapping[str, Any]) -> dict[str, Any]:
    """The Lucene index of ``texts`` (an iterable: each is written to Anserini's input as it comes)."""
    t0 = time.perf_counter()
    build_index(spec, zip(ids, texts), out=out / LUCENE_DIR, k1=s["k1"], b=s["b"])
    return {"spec": spec, "documents": len(ids), "build_seconds": round(time.perf_counter() - t0, 4)}


def load_lucene(folder: Path, s: Mapping[str, Any]):
    return load_index(folder, k1=s["k1"], b=s["b"])


def load_codes(folder: Path, *, allow_pickle: bool = False) -> tuple[np.ndarray, list[str]]:
    """The corpus codes of a built code index (``codes.npy``) and its doc ids, row counts checked."""
    # memory-mapped: a search reads the rows it rescores (8.8M x 250 codes are 4.4 GB in uint16)
    codes = np.load(Path(folder) / CODES_FILE, allow_pickle=allow_pickle, mmap_mode=None if allow_pickle else "r")
    return codes, read_docids(folder, expect=len(codes))


def iter_kmeans_strings(flat: np.ndarray, offsets: np.ndarray) -> Iterator[str]:
    """Each text's centroid-id tokens (``k52 k113 ...``) from the flat codes and their row offsets."""
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        yield " ".join(f"k{c}" for c in flat[a:b].tolist())


def load_kmeans_codes(folder: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(flat centroid ids, row offsets [N + 1], doc ids) of a built k-means index, memory-mapped."""
    folder = Path(folder)
    if not (folder / KMEANS_OFFSETS).is_file():
        raise DataError(f"{folder}: no {KMEANS_OFFSETS} (a k-means index built before its codes were stored "
                        "flat with row offsets)", fix=f"delete {folder} and run the workflow again to rebuild it")
    offsets = np.load(folder / KMEANS_OFFSETS)
    flat = np.load(folder / CODES_FILE, mmap_mode="r")
    if offsets.ndim != 1 or not len(offsets) or offsets[0] != 0 or offsets[-1] != len(flat):
        raise DataError(f"{folder / KMEANS_OFFSETS}: offsets do not span {CODES_FILE}'s {len(flat)} codes",
                        fix=f"delete {folder} and run the workflow again to rebuild it")
    return flat, offsets, read_docids(folder, expect=len(offsets) - 1)


def code_index(s: Mapping[str, Any], model_dir: Path, data_dir: Path, out: Path) -> dict[str, Any]:
    """Encode the corpus into codes (``codes.npy``, doc ids) and index their strings. The corpus is read
    as it is encoded (MS MARCO's 8.8M passages are not listed; the codes are filled batch by batch)."""
    model = QCRModel.load(model_dir, encode_device(s))
    pyserini_env.start_jvm()  # the JVM the Lucene index is built in starts here, with the start-up
    startup_done()  # the rest is per document (python -m harness estimate)
    ids: list[str] = []
    texts = ((d.title, d.text) for d in store.iter_corpus(data_dir, ids))
    t0 = time.perf_counter()
    codes = model.encode(texts, int(s["p_max_len"]), int(s["encode_batch_size"]), n=store.corpus_size(data_dir))
    t_enc = time.perf_counter() - t0
    np.save(out / CODES_FILE, codes)
    write_docids(out, ids)
    ms = model.s
    strings = iter_code_strings(codes, ids, k=codes_k(ms), size=codebook_size(ms["levels"]), positional=s["positional"])
    info = build_lucene(s["index"], ids, strings, out, s)
    u = usage(codes.ravel(), codebook_size(ms["levels"]))
    return {**info, "encode_seconds": round(t_enc, 4), "K": int(codes.shape[1]), "positional": s["positional"],
            "usage": {k: v for k, v in u.items() if k != "counts"},
            "unique_code_fraction": unique_code_fraction(codes)}


def unique_code_fraction(codes: np.ndarray, rows: int = 1 << 16) -> float:
    """The mean over rows of (distinct codes in the row) / K, a block of rows at a time (a Python list
    of a corpus's codes would be ~80 GB at 8.8M passages x K 250); 0.0 for no rows."""
    if not len(codes):
        return 0.0
    out = np.empty(len(codes))
    for a in range(0, len(codes), rows):
        s = np.sort(codes[a:a + rows], axis=1)
        out[a:a + rows] = (1 + (np.diff(s, axis=1) != 0).sum(axis=1)) / codes.shape[1]
    return float(np.mean(out))


def source_strings(source: Path, positional: bool, kmeans: bool) -> tuple[list[str], Iterable[str]]:
    """Doc ids and code strings of a built code index (k-means: ``k<id>`` per token, no positions),
    the strings given one at a time."""
    if kmeans:
        flat, offsets, ids = load_kmeans_codes(source)
        return ids, iter_kmeans_strings(flat, offsets)
    codes, ids = load_codes(source)
    return ids, iter_code_strings(codes, ids, k=codes.shape[1], size=int(codes.max()) + 1 if codes.size else 1,
                                  positional=positional)


def aligned_texts(data_dir: Path, ids: Sequence[str], *, title: bool = True) -> Iterator[str]:
    """The texts (title, newline, text; ``title=False``: the text alone) of ``ids`` read in one pass
    over the corpus file, whose order a code index's rows keep (both are written from it in order); a
    record out of that order fails, naming it (the source index is older than the corpus)."""
    path = Path(data_dir) / store.CORPUS
    docs = store.iter_corpus(data_dir)
    for n, want in enumerate(ids, 1):
        d = next(docs, None)
        if d is None or d.id != want:
            raise DataError(f"{path}: record {n} is {d.id if d else 'missing (end of file)'!r}, the source "
                            f"index's row {n} is {want!r}: the index was built from another corpus",
                            fix="rebuild the source index (delete its folder and run the workflow again)")
        yield f"{d.title}\n{d.text}" if d.title and title else d.text
    extra = next(docs, None)
    if extra is not None:
        raise DataError(f"{path}: record {len(ids) + 1} ({extra.id!r}) and on are not in the source index "
                        f"({len(ids)} rows): the index was built from another corpus",
                        fix="rebuild the source index (delete its folder and run the workflow again)")


def words_index(s: Mapping[str, Any], source: Path, data_dir: Path, out: Path, *, kmeans: bool
                ) -> dict[str, Any]:
    """"w/ words": the source index's code strings plus the analysed words of each passage, both
    streamed to Lucene a block at a time (:func:`iter_with_words`)."""
    ids, strings = source_strings(source, False if kmeans else s["positional"], kmeans)  # k-means ids have no positions
    info = build_lucene(s["index"], ids, iter_with_words(strings, aligned_texts(data_dir, ids)), out, s)
    write_docids(out, ids)
    return {**info, "words": "lucene default analyser (pyserini), title + text"}


def nopos_index(s: Mapping[str, Any], source: Path, out: Path) -> dict[str, Any]:
    """The source index's codes without position prefixes (the §4.2 ablation)."""
    ids, strings = source_strings(source, False, False)
    write_docids(out, ids)
    return {**build_lucene(s["index"], ids, strings, out, s), "positional": False}
