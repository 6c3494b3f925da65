"""The two indexes: the binary token index T(D) (spec token-csr; the tokenizer only, independent of
θ) and the embedding index E_θ(D) (sparse top-k vectors, spec sparse-csr)."""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.artifacts import read_docids, write_docids
from harness.cost import startup_done
from harness.datasets import Doc, store
from harness.indexes.sparse_csr import SparseEmbeddingIndex
from harness.methods.base import Context
from harness.methods.vdr.model import VDRModel, passage_text
from harness.methods.vdr.settings import settings
from harness.models.backbones import load_tokenizer
from harness.models.runtime import encode_device, quiet_transformers
from harness.progress import chunks
from harness.timing import Untimed

TOKEN_INDEX_FILE = "index.tcsr"
EMB_INDEX_FILE = "embeddings.npz"


def token_ids(tokenizer, texts: Iterable[str], max_len: int, batch: int = 1024) -> Iterator[list[int]]:
    """Each text's token ids, tokenised ``batch`` texts at a time as they are read."""
    for chunk in chunks(texts, batch):
        yield from tokenizer(chunk, truncation=True, max_length=int(max_len))["input_ids"]


def build_token_index(tokenizer, docs: Iterable[Doc], max_len: int, skip: int):
    """T(D): the binary token index (``token-csr``) of the passages, ids >= skip only; the passages
    are tokenised as the index takes them (a corpus streamed from its file is never held)."""
    from harness.indexes.token_csr import BinaryTokenIndex

    ids = token_ids(tokenizer, (passage_text(d) for d in docs), max_len)
    return BinaryTokenIndex.from_token_ids(([t for t in row if t >= skip] for row in ids), vocab_size=len(tokenizer))


def load_token_index(index_dir: Path):
    from harness.indexes.token_csr import BinaryTokenIndex

    index = BinaryTokenIndex.load(Path(index_dir) / TOKEN_INDEX_FILE)
    return index, read_docids(index_dir, expect=index.n_docs)


def _tokenizer(ctx_cfg: Mapping[str, Any], s: Mapping[str, Any]):
    quiet_transformers()
    return load_tokenizer(ctx_cfg, s["backbone"])


def write_token_index(ctx: Context, data: Path, out: Path) -> dict[str, Any]:
    """T(D) of the corpus in ``data`` into ``out``, the corpus streamed from its file. ``build_seconds``
    excludes reading the corpus and writing the file."""
    s = settings(ctx.mcfg, method=ctx.method)
    tok = _tokenizer(ctx.cfg, s)
    startup_done()  # the rest is per document (python -m harness estimate)
    ids: list[str] = []
    docs = Untimed(store.iter_corpus(data, ids))
    t0 = time.perf_counter()
    index = build_token_index(tok, docs, s["p_max_len"], s["skip_vocab"])
    build_seconds = time.perf_counter() - t0 - docs.seconds
    index.save(out / TOKEN_INDEX_FILE)
    write_docids(out, ids)
    return {"spec": "token-csr", "documents": len(ids), "vocab_size": index.vocab_size, "nnz": index.nnz,
            "density": index.nnz / max(1, index.n_docs * (index.vocab_size - s["skip_vocab"])),
            "memory_bytes": index.nbytes, "disk_bytes": (out / TOKEN_INDEX_FILE).stat().st_size,
            "build_seconds": build_seconds, "max_length": s["p_max_len"], "skip_vocab": s["skip_vocab"],
            "tokenizer": s["backbone"]}


def emb_index(enc: VDRModel, docs: Iterable[Doc]) -> tuple[SparseEmbeddingIndex, float]:
    """E_θ(D) built in memory, the passages encoded as they are read (a corpus streamed from its file
    is never held), and the seconds of encoding + CSR assembly (reading the passages excluded)."""
    ids: list[str] = []

    def kept(items: Iterable[Doc]) -> Iterator[Doc]:
        for d in items:
            ids.append(d.id)
            yield d

    read = Untimed(docs)
    t0 = time.perf_counter()
    matrix = enc.encode_passages(kept(read))
    return SparseEmbeddingIndex(matrix, ids), time.perf_counter() - t0 - read.seconds


def write_emb_index(ctx: Context, data: Path, model: Path, out: Path) -> dict[str, Any]:
    """E_θ(D) of the corpus in ``data`` with the model in ``model``, into ``out``. ``build_seconds`` =
    encoding + CSR assembly (reading the corpus and writing the file excluded)."""
    enc = VDRModel.load(model, ctx.mcfg.get("torch_threads"), encode_device(ctx.mcfg))
    startup_done()
    index, build_seconds = emb_index(enc, store.iter_corpus(data))
    index.save(out)
    m = index.matrix
    return {"spec": "sparse-csr", "documents": len(index.docids), "vocab_size": enc.vocab, "nnz": int(m.nnz),
            "density": m.nnz / max(1, m.shape[0] * enc.dims), "memory_bytes": index.nbytes,
            "disk_bytes": (out / EMB_INDEX_FILE).stat().st_size, "build_seconds": build_seconds,
            "topk": enc.s["topk"], "activate_lexical": enc.s["activate_lexical"], "dtype": "float32"}
