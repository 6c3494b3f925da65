"""BPR's indexes: the binary passage codes (sign of the passage embeddings) in a faiss binary index
(linear scan or hash lookup), and the DPR baselines (HNSW, LSH, PQ) over DPR's Flat vectors."""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import DOCIDS, write_docids
from harness.cost import startup_done
from harness.datasets import store
from harness.errors import ConfigError, DataError
from harness.methods import dpr
from harness.methods.base import Context
from harness.methods.bpr.settings import DEFAULTS
from harness.models.runtime import encode_device
from harness.recording import merged

CODES_FILE = "codes.npy"
DOCIDS_FILE = DOCIDS  # the shared doc-id file (harness.artifacts)


def _binary_spec(spec: str) -> str:
    backend, _, factory = spec.partition(":")
    if backend != "faiss-binary" or not factory:
        raise ConfigError(f"BPR index spec {spec!r} must read faiss-binary:<spec> (BFlat, BHash768, ...)")
    return factory


def build_index(ctx: Context, out: Path, model_dir: Path) -> dict[str, Any]:
    """Encode the corpus with the passage encoder, binarize (sign), build ``methods.bpr.index``.

    Writes the faiss binary index and ``docids.txt``; the rerank's ±1 passage vectors are the codes
    the linear scan (BFlat) holds (:func:`read_codes`), so the folder is the size of BPR Table 1's
    index; an index that does not keep them in row order (a hash spec) gets them beside it in
    ``codes.npy``."""
    from harness.indexes.faiss_binary import BinaryFaissIndex, binarize

    spec = merged(DEFAULTS, ctx.mcfg)["index"]
    factory = _binary_spec(spec)
    model = dpr.BiEncoder.load(ctx, model_dir, encode_device(ctx.mcfg))
    startup_done()  # the rest is per document (python -m harness estimate)
    ids: list[str] = []
    # the corpus read as it is encoded (NQ's 21M passages: ~24.5 GiB held otherwise)
    pairs = ((d.title, d.text) for d in store.iter_corpus(ctx.data_dir(), ids))
    t0 = time.perf_counter()
    # each batch's vectors binarised as they come: the codes are 2.0 GiB at 21M passages, the float
    # vectors they come from 60 GiB (held twice while their batches were joined)
    blocks = [binarize(v) for v in model.iter_passage_vectors(pairs, store.corpus_size(ctx.data_dir()))]
    codes = np.concatenate(blocks) if blocks else binarize(np.zeros((0, model.p.config.hidden_size), np.float32))
    del blocks
    t_enc = time.perf_counter() - t0
    t1 = time.perf_counter()
    index = BinaryFaissIndex.build(factory, codes)
    build_seconds = time.perf_counter() - t1
    index_file = index.save(out)
    if index.stored_codes() is None:
        np.save(out / CODES_FILE, codes)
    write_docids(out, ids)
    return {"spec": spec, "documents": len(ids), "dim": 8 * int(codes.shape[1]),   # 1 bit a dimension
            "code_bytes": int(codes.shape[1]),
            "encode_seconds": t_enc, "build_seconds": build_seconds, "index_file_bytes": index_file.stat().st_size,
            "bits_set_fraction": float(np.unpackbits(codes).mean())}


def read_codes(folder: Path) -> np.ndarray:
    """The codes (uint8 [n, d/8], row i = docids line i) of the built BPR index in ``folder``:
    ``codes.npy`` where the folder has one, else a copy of the codes its linear scan holds."""
    import faiss

    from harness.indexes.faiss_binary import INDEX_FILE, BinaryFaissIndex, binary_factory_string

    path = Path(folder) / CODES_FILE
    if path.is_file():
        return np.load(path)
    raw = faiss.read_index_binary(str(Path(folder) / INDEX_FILE))
    index = BinaryFaissIndex(raw, binary_factory_string(raw))
    codes = index.stored_codes()
    if codes is None:
        raise DataError(f"{folder}: a faiss-binary:{index.spec} index without {CODES_FILE}: the rerank has no codes",
                        fix=f"rebuild it (python -m harness index --job bpr ...; delete {folder} first)")
    return np.array(codes)  # a copy: the view dies with the index


def build_binary_index(spec: str, source: Path, out: Path, *, nflip: int = 0) -> dict[str, Any]:
    """Another binary index (e.g. the hash lookup) over the codes of the built BPR index ``source``
    (the rerank reads its codes from ``source``)."""
    from harness.indexes.faiss_binary import BinaryFaissIndex

    codes = read_codes(source)
    t0 = time.perf_counter()
    index = BinaryFaissIndex.build(_binary_spec(spec), codes, nflip=nflip)
    seconds = time.perf_counter() - t0
    index_file = index.save(out)
    shutil.copyfile(Path(source) / DOCIDS_FILE, out / DOCIDS_FILE)
    return {"spec": spec, "nflip": nflip, "documents": int(codes.shape[0]), "build_seconds": seconds,
            "index_file_bytes": index_file.stat().st_size, "source": str(source)}


def build_dpr_baseline(spec: str, dpr_index: Path, out: Path, *, train_size: int | None = None,
                       seed: int = 0) -> dict[str, Any]:
    """A DPR baseline index (HNSW, LSH, PQ) over the vectors of DPR's Flat index (no re-encoding)."""
    import faiss

    from harness.indexes.faiss_dense import INDEX_FILE, DenseFaissIndex

    flat = faiss.read_index(str(Path(dpr_index) / INDEX_FILE))
    if not isinstance(flat, faiss.IndexFlat):
        raise ConfigError(f"{dpr_index}: the DPR baselines read the passage vectors back from DPR's index, "
                          f"which must be faiss:Flat (methods.dpr.index)")
    # the Flat's own vectors, not a copy (reconstruct_n would hold a second 60 GiB of the 21M passages)
    vecs = faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d).reshape(flat.ntotal, flat.d)
    factory = spec.partition(":")[2]
    t0 = time.perf_counter()
    index = DenseFaissIndex.build(factory, vecs, train_size=train_size, seed=seed)
    seconds = time.perf_counter() - t0
    index_file = index.save(out)
    shutil.copyfile(Path(dpr_index) / DOCIDS_FILE, out / DOCIDS_FILE)
    return {"spec": spec, "documents": int(vecs.shape[0]), "dim": int(vecs.shape[1]), "build_seconds": seconds,
            "index_file_bytes": index_file.stat().st_size, "fixed_bytes": index.fixed_bytes, "source": str(dpr_index)}
