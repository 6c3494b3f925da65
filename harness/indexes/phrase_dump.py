"""The phrase dump of DensePhrases: every kept token vector of every passage, on disk.

What the paper says (Lee et al. 2021, §5 "Indexing" and App. E): the phrase dump H stacks the
token representations of all the paragraphs of the corpus, H = [h_1, ..., h_|W(D)|] (d = 768;
a filter layer drops ~75% of the tokens, 770M vectors are kept for Wikipedia); a phrase is a pair
of rows (i, j) of H and Eq. 10 searches start and end rows separately. The index is built over H,
and the authors keep H (int8) to re-score span candidates exactly and for query-side fine-tuning.

What the authors' code stores (first public release): HDF5 groups per document, the vectors as
int8 with ``x -> round((x + 2) * 20)`` clipped to [-128, 127] and decoded ``q / 20 - 2``, plus
word-to-character offsets. Here the same content is stored in numpy files that are memory-mapped
when read (no HDF5 dependency); the int8 codec is the authors', ``float16`` and ``float32`` are
stored as they are.

Layout of a dump folder (written by :class:`DumpWriter`, read by :class:`PhraseDump`):

- ``vectors-00000.npy`` ... : the encoded token vectors [rows, d], one file per shard of at most
  ``shard_tokens`` rows (a passage never straddles two shards); int8, float16 or float32.
- ``doc_rows.npy`` [N] int32: the passage (row of ``docids.txt``) of each token row. Rows of one
  passage are contiguous and in text order, so ``doc_rows`` is non-decreasing (Eq. 10's span
  constraint relies on it).
- ``offsets.npy`` [N, 2] int32: each token's character span [start, end) in its passage's text.
- ``positions.npy`` [N] int32: each token's position among the passage's tokens *before* the
  filter (strictly increasing within a passage; ``0..n-1`` when the caller gives none). The span
  search limits phrase length on these positions, as the authors' code does with its
  filtered-to-original map (``f2o_start``).
- ``docids.txt``: one passage id per line; line r is doc row r.
- ``dump.json`` (written last: a folder without it is not a dump): dim, codec, shard files and row
  counts, passage and token counts, and a content hash (blake2b over every byte written), so a
  rewritten dump changes ``dump.json`` and indexes built over the old one refuse to load.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import numpy as np

from harness.errors import DataError
from harness.meta import folder_bytes

DUMP_JSON = "dump.json"
DOCIDS = "docids.txt"
DOC_ROWS = "doc_rows.npy"
OFFSETS = "offsets.npy"
POSITIONS = "positions.npy"
FORMAT = "harness-phrase-dump"
VERSION = 1
CODECS = ("float16", "float32", "int8")
#: the authors' int8 codec: q = clip(round((x - OFFSET) * SCALE), -128, 127); x = q / SCALE + OFFSET
INT8_OFFSET = -2.0
INT8_SCALE = 20.0
DEFAULT_SHARD_TOKENS = 1 << 19
_DTYPES = {"float16": np.dtype("<f2"), "float32": np.dtype("<f4"), "int8": np.dtype("i1")}
_META_TMP = {"doc_rows": (DOC_ROWS, np.dtype("<i4"), ()), "offsets": (OFFSETS, np.dtype("<i4"), (2,)),
             "positions": (POSITIONS, np.dtype("<i4"), ())}


def encode(x: np.ndarray, codec: str) -> np.ndarray:
    """Token vectors (float) -> the stored dtype of ``codec``; int8 is the authors' codec
    (representable range [-8.4, 4.35], error <= 1/40 inside it)."""
    _check_codec(codec)
    x = np.asarray(x, dtype=np.float32)
    if codec == "int8":
        return np.clip(np.rint((x - INT8_OFFSET) * INT8_SCALE), -128, 127).astype(np.int8)
    return x.astype(_DTYPES[codec])


def decode(q: np.ndarray, codec: str) -> np.ndarray:
    """Stored vectors -> float32 (``q / 20 - 2`` for int8)."""
    _check_codec(codec)
    if codec == "int8":
        out = np.asarray(q).astype(np.float32)
        out *= np.float32(1.0 / INT8_SCALE)
        out += np.float32(INT8_OFFSET)
        return out
    q = np.asarray(q)
    if codec == "float16" and q.ndim == 2 and q.size >= 1 << 15:
        return _fp16_to_f32(q)
    return q.astype(np.float32)


_FP16_SQ: dict[int, Any] = {}


def _fp16_to_f32(q: np.ndarray) -> np.ndarray:
    """float16 [n, d] -> float32 with faiss's SIMD fp16 decoder (exact; ~2x numpy's astype here)."""
    import faiss

    d = q.shape[1]
    sq = _FP16_SQ.get(d)
    if sq is None:
        sq = _FP16_SQ[d] = faiss.ScalarQuantizer(d, faiss.ScalarQuantizer.QT_fp16)
    return sq.decode(np.ascontiguousarray(q, dtype="<f2").view(np.uint8))


def _check_codec(codec: str) -> None:
    if codec not in CODECS:
        raise DataError(f"phrase dump codec {codec!r} is unknown", fix=f"use one of {', '.join(CODECS)}")


def _shard_name(i: int) -> str:
    return f"vectors-{i:05d}.npy"


def _write_npy_from_raw(raw: Path, out: Path, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """Prepend a .npy header to a raw little-endian file (streamed copy, bounded memory)."""
    with open(out, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                  "fortran_order": False, "shape": shape})
        with open(raw, "rb") as src:
            shutil.copyfileobj(src, fh, 16 << 20)
    raw.unlink()


class DumpWriter:
    """Writes a phrase dump passage by passage (see the module doc for the layout).

    ``add`` appends one passage's kept token vectors [n, d] (float32, in text order) with their
    character offsets [n, 2] and, optionally, their positions among the passage's tokens before
    filtering [n] (default 0..n-1). ``close`` finalises the folder and returns its counts. Use as
    a context manager to close on success; after an exception the folder has no ``dump.json``.
    """

    def __init__(self, folder: Path | str, dim: int, codec: str = "float16",
                 shard_tokens: int = DEFAULT_SHARD_TOKENS) -> None:
        _check_codec(codec)
        if int(dim) < 1:
            raise DataError(f"phrase dump {folder}: dim must be >= 1, got {dim}")
        if int(shard_tokens) < 1:
            raise DataError(f"phrase dump {folder}: shard_tokens must be >= 1, got {shard_tokens}")
        self.folder = Path(folder)
        if (self.folder / DUMP_JSON).exists():
            raise DataError(f"{self.folder / DUMP_JSON} exists: the folder already holds a phrase dump",
                            fix="write the dump to a new folder, or delete the old one first")
        if self.folder.is_dir() and any(self.folder.iterdir()):
            raise DataError(f"phrase dump folder {self.folder} is not empty",
                            fix="write the dump to a new (or empty) folder")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.dim = int(dim)
        self.codec = codec
        self.shard_tokens = int(shard_tokens)
        self._docids: list[str] = []
        self._seen: set[str] = set()
        self._buffer: list[np.ndarray] = []
        self._buffered = 0
        self._shards: list[dict[str, Any]] = []
        self._tokens = 0
        self._hash = hashlib.blake2b(digest_size=16)
        self._hash.update(json.dumps([FORMAT, VERSION, self.dim, codec]).encode())
        self._meta = {key: open(self.folder / (name + ".tmp"), "wb")  # noqa: SIM115 (closed in close/__exit__)
                      for key, (name, _, _) in _META_TMP.items()}
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self.close()
        else:
            for fh in self._meta.values():
                fh.close()
            self._closed = True

    def add(self, docid: str, vectors: np.ndarray, char_offsets: np.ndarray,
            positions: np.ndarray | None = None) -> None:
        """Append one passage: ``vectors`` [n, d], ``char_offsets`` [n, 2] ([start, end) in the
        passage text), ``positions`` [n] (token index before filtering; default 0..n-1). A passage
        with n = 0 is recorded (its id gets a doc row) with no token rows."""
        if self._closed:
            raise DataError(f"phrase dump {self.folder}: add() after close()")
        docid = str(docid)
        where = f"phrase dump {self.folder}, passage {docid!r}"
        if not docid or any(c in docid for c in "\n\r"):
            raise DataError(f"{where}: passage ids must be non-empty and on one line",
                            fix="give every passage a one-line id")
        if docid in self._seen:
            raise DataError(f"{where}: added twice (the tokens of a passage must be contiguous)",
                            fix="add each passage once, all its kept tokens together")
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise DataError(f"{where}: vectors have shape {vectors.shape}, the dump's dim is {self.dim}",
                            fix=f"pass float32 token vectors of shape [n, {self.dim}] (or open the writer "
                                f"with the encoder's dim)")
        n = vectors.shape[0]
        offsets = np.asarray(char_offsets)
        if offsets.shape != (n, 2):
            raise DataError(f"{where}: char_offsets have shape {offsets.shape}, expected ({n}, 2) for {n} vectors",
                            fix="pass one [start, end) character span per token vector")
        if n and not np.issubdtype(offsets.dtype, np.integer):
            raise DataError(f"{where}: char_offsets must be integers, got {offsets.dtype}")
        if n and (offsets.min() < 0 or np.any(offsets[:, 1] < offsets[:, 0]) or offsets.max() > np.iinfo(np.int32).max):
            raise DataError(f"{where}: char_offsets must satisfy 0 <= start <= end < 2**31",
                            fix="pass [start, end) character spans of the tokens in the passage text")
        if positions is None:
            pos = np.arange(n, dtype=np.int32)
        else:
            pos = np.asarray(positions)
            if pos.shape != (n,) or (n and not np.issubdtype(pos.dtype, np.integer)):
                raise DataError(f"{where}: positions have shape {pos.shape} ({pos.dtype}), expected integers ({n},)")
            if n and (pos.min() < 0 or np.any(np.diff(pos) <= 0) or pos.max() > np.iinfo(np.int32).max):
                raise DataError(f"{where}: positions must be >= 0 and strictly increasing (text order)",
                                fix="pass each kept token's index among the passage's tokens, in text order")
            pos = pos.astype(np.int32)
        if n and not np.all(np.isfinite(vectors)):
            raise DataError(f"{where}: vectors contain NaN or inf", fix="check the encoder's output (fp16 overflow?)")
        if self._buffered and self._buffered + n > self.shard_tokens:
            self._flush()
        doc_row = len(self._docids)
        self._docids.append(docid)
        self._seen.add(docid)
        self._hash.update(docid.encode() + b"\n")
        if not n:
            return
        codes = np.ascontiguousarray(encode(vectors, self.codec))
        offs = np.ascontiguousarray(offsets, dtype=np.int32)
        rows = np.full(n, doc_row, dtype=np.int32)
        for arr in (codes, offs, pos):
            self._hash.update(arr.tobytes())
        self._meta["doc_rows"].write(rows.tobytes())
        self._meta["offsets"].write(offs.tobytes())
        self._meta["positions"].write(pos.tobytes())
        self._buffer.append(codes)
        self._buffered += n
        self._tokens += n

    def _flush(self) -> None:
        if not self._buffered:
            return
        name = _shard_name(len(self._shards))
        np.save(self.folder / name, np.concatenate(self._buffer, axis=0))
        self._shards.append({"file": name, "rows": self._buffered})
        self._buffer, self._buffered = [], 0

    def close(self) -> dict[str, Any]:
        """Finish the dump: write the last shard, the metadata arrays, ``docids.txt`` and, last,
        ``dump.json``. Returns passages, tokens, bytes (on disk), codec, shards, dim, folder."""
        if self._closed:
            raise DataError(f"phrase dump {self.folder}: close() called twice")
        self._closed = True
        for fh in self._meta.values():
            fh.close()
        if not self._tokens:
            raise DataError(f"phrase dump {self.folder}: no token vectors were added",
                            fix="add passages with at least one kept token before close() (check the filter "
                                "threshold)")
        self._flush()
        for name, dtype, tail in _META_TMP.values():
            _write_npy_from_raw(self.folder / (name + ".tmp"), self.folder / name, dtype, (self._tokens, *tail))
        (self.folder / DOCIDS).write_text("".join(d + "\n" for d in self._docids), encoding="utf-8")
        info = {
            "format": FORMAT, "version": VERSION, "dim": self.dim, "codec": self.codec,
            "passages": len(self._docids), "tokens": self._tokens, "shards": self._shards,
            "files": {"doc_rows": DOC_ROWS, "offsets": OFFSETS, "positions": POSITIONS, "docids": DOCIDS},
            "content_hash": self._hash.hexdigest(),
        }
        if self.codec == "int8":
            info["int8"] = {"offset": INT8_OFFSET, "scale": INT8_SCALE}
        tmp = self.folder / (DUMP_JSON + ".tmp")
        tmp.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.folder / DUMP_JSON)
        return {"passages": len(self._docids), "tokens": self._tokens, "bytes": folder_bytes(self.folder),
                "codec": self.codec, "shards": len(self._shards), "dim": self.dim, "folder": str(self.folder)}


class PhraseDump:
    """A phrase dump opened for reading; arrays are memory-mapped (see the module doc).

    ``vectors(rows)`` / ``range_vectors(start, stop)`` / ``all_vectors()`` decode to float32;
    ``doc_rows``, ``offsets``, ``positions`` are the memory-mapped metadata; ``docids[doc_row]``
    is a passage's id.
    """

    def __init__(self, folder: Path, info: dict[str, Any], shards: list[np.ndarray], doc_rows: np.ndarray,
                 offsets: np.ndarray, positions: np.ndarray, docids: list[str], json_sha256: str) -> None:
        self.folder = folder
        self.info = info
        self.dim = int(info["dim"])
        self.codec = str(info["codec"])
        self.shards = shards
        self.doc_rows = doc_rows
        self.offsets = offsets
        self.positions = positions
        self.docids = docids
        self.json_sha256 = json_sha256
        self.content_hash = str(info["content_hash"])
        sizes = np.array([len(s) for s in shards], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(sizes)])

    @property
    def ntotal(self) -> int:
        return int(self._starts[-1])

    @property
    def passages(self) -> int:
        return len(self.docids)

    @property
    def nbytes_on_disk(self) -> int:
        return folder_bytes(self.folder)

    @classmethod
    def open(cls, folder: Path | str) -> PhraseDump:
        """Open the dump in ``folder``; DataError when it is missing, incomplete or inconsistent."""
        folder = Path(folder)
        path = folder / DUMP_JSON
        rebuild = "write the dump again (DumpWriter ... close())"
        if not folder.is_dir():
            raise DataError(f"phrase dump folder {folder} does not exist", fix=rebuild)
        if not path.is_file():
            raise DataError(f"{path} does not exist: {folder} holds no finished phrase dump", fix=rebuild)
        raw = path.read_bytes()
        try:
            info = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})", fix=rebuild) from None
        if not isinstance(info, dict) or info.get("format") != FORMAT or info.get("version") != VERSION:
            raise DataError(f"{path} is not a version-{VERSION} {FORMAT} file", fix=rebuild)
        try:
            dim, codec, tokens = int(info["dim"]), str(info["codec"]), int(info["tokens"])
            passages, shard_info, _ = int(info["passages"]), list(info["shards"]), str(info["content_hash"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{path}: missing or malformed field ({exc})", fix=rebuild) from None
        if codec not in CODECS:
            raise DataError(f"{path}: codec {codec!r} is unknown (known: {', '.join(CODECS)})", fix=rebuild)

        def load(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
            f = folder / name
            if not f.is_file():
                raise DataError(f"{f} is missing (listed in {path})", fix=rebuild)
            try:
                arr = np.load(f, mmap_mode="r")
            except (ValueError, OSError) as exc:
                raise DataError(f"{f}: not a readable .npy file ({exc})", fix=rebuild) from None
            if arr.dtype != dtype or arr.shape != shape:
                raise DataError(f"{f} holds {arr.dtype} {arr.shape} but {path} says {dtype} {shape}",
                                fix=rebuild)
            return arr

        shards = []
        for s in shard_info:
            try:
                name, rows = str(s["file"]), int(s["rows"])
            except (KeyError, TypeError, ValueError):
                raise DataError(f"{path}: malformed shard entry {s!r}", fix=rebuild) from None
            shards.append(load(name, _DTYPES[codec], (rows, dim)))
        if sum(len(s) for s in shards) != tokens:
            raise DataError(f"{path}: the shards hold {sum(len(s) for s in shards):,} rows but tokens = {tokens:,}",
                            fix=rebuild)
        doc_rows = load(DOC_ROWS, np.dtype("<i4"), (tokens,))
        offsets = load(OFFSETS, np.dtype("<i4"), (tokens, 2))
        positions = load(POSITIONS, np.dtype("<i4"), (tokens,))
        ids_path = folder / DOCIDS
        if not ids_path.is_file():
            raise DataError(f"{ids_path} is missing (listed in {path})", fix=rebuild)
        docids = ids_path.read_text(encoding="utf-8").split("\n")[:-1]
        if len(docids) != passages:
            raise DataError(f"{ids_path} has {len(docids):,} lines but {path} says {passages:,} passages",
                            fix=rebuild)
        if tokens and (int(doc_rows[0]) < 0 or int(doc_rows[-1]) >= passages):
            raise DataError(f"{folder / DOC_ROWS}: doc rows outside 0..{passages - 1}", fix=rebuild)
        return cls(folder, info, shards, doc_rows, offsets, positions, docids, hashlib.sha256(raw).hexdigest())

    def __repr__(self) -> str:
        return (f"PhraseDump({str(self.folder)!r}, {self.ntotal:,} tokens x {self.dim} {self.codec}, "
                f"{self.passages:,} passages)")

    # --- vectors ----------------------------------------------------------------------------------

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """Decoded float32 vectors of ``rows`` (any order, repeats allowed) [len(rows), d]."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.ntotal):
            raise IndexError(f"{self}: rows must lie in 0..{self.ntotal - 1}, got {rows.min()}..{rows.max()}")
        if len(self.shards) == 1:
            return decode(self.shards[0][rows], self.codec)
        out = np.empty((rows.size, self.dim), dtype=np.float32)
        which = np.searchsorted(self._starts, rows, side="right") - 1
        for s in np.unique(which):
            sel = np.nonzero(which == s)[0]
            out[sel] = decode(self.shards[s][rows[sel] - self._starts[s]], self.codec)
        return out

    def dot(self, rows: np.ndarray, queries: np.ndarray, block: int = 2048) -> np.ndarray:
        """``vectors(rows) @ queries.T`` ([len(rows), m] float32 for ``queries`` [m, d]), computed in
        blocks of ``block`` rows so the decoded floats stay in cache (int8: on the raw codes, then
        ``(q . v) / 20 - 2 sum(v)``)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        Q = np.ascontiguousarray(np.asarray(queries, dtype=np.float32).T)  # [d, m]
        if Q.shape[0] != self.dim:
            raise ValueError(f"{self}: queries have {Q.shape[0]} dims, the dump {self.dim}")
        out = np.empty((rows.size, Q.shape[1]), dtype=np.float32)
        if rows.size and (rows.min() < 0 or rows.max() >= self.ntotal):
            raise IndexError(f"{self}: rows must lie in 0..{self.ntotal - 1}, got {rows.min()}..{rows.max()}")
        int8 = self.codec == "int8"
        Qs = Q * np.float32(1.0 / INT8_SCALE) if int8 else Q
        shift = np.float32(INT8_OFFSET) * Q.sum(axis=0) if int8 else None
        one = len(self.shards) == 1
        for s in range(0, rows.size, block):
            r = rows[s:s + block]
            if int8:
                raw = self.shards[0][r] if one else self._gather_raw(r)
                np.matmul(raw.astype(np.float32), Qs, out=out[s:s + r.size])
                out[s:s + r.size] += shift
            else:
                np.matmul(self.vectors(r), Q, out=out[s:s + r.size])
        return out

    def _gather_raw(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((rows.size, self.dim), dtype=_DTYPES[self.codec])
        which = np.searchsorted(self._starts, rows, side="right") - 1
        for s in np.unique(which):
            sel = np.nonzero(which == s)[0]
            out[sel] = self.shards[s][rows[sel] - self._starts[s]]
        return out

    def range_vectors(self, start: int, stop: int) -> np.ndarray:
        """Decoded float32 vectors of the rows ``start..stop-1`` (contiguous reads)."""
        start, stop = max(0, int(start)), min(self.ntotal, int(stop))
        parts = []
        for s, shard in enumerate(self.shards):
            lo, hi = max(start, self._starts[s]), min(stop, self._starts[s + 1])
            if lo < hi:
                parts.append(decode(shard[lo - self._starts[s]:hi - self._starts[s]], self.codec))
        if not parts:
            return np.empty((0, self.dim), dtype=np.float32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def iter_chunks(self, chunk_rows: int = 1 << 16) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, decoded float32 vectors) for consecutive chunks of at most ``chunk_rows`` rows."""
        for start in range(0, self.ntotal, chunk_rows):
            yield start, self.range_vectors(start, start + chunk_rows)

    def all_vectors(self) -> np.ndarray:
        """Every token vector, decoded to float32 [N, d] (N x d x 4 bytes of memory)."""
        return self.range_vectors(0, self.ntotal)

    # --- passages ---------------------------------------------------------------------------------

    def passage_rows(self, doc_row: int) -> tuple[int, int]:
        """The token rows [start, stop) of passage ``doc_row`` (empty for a passage with no kept token)."""
        lo = int(np.searchsorted(self.doc_rows, doc_row, side="left"))
        hi = int(np.searchsorted(self.doc_rows, doc_row, side="right"))
        return lo, hi

    def verify(self) -> None:
        """Re-hash every stored byte and compare with ``dump.json``'s content hash (reads the whole
        dump); DataError when a file was changed after the dump was written."""
        h = hashlib.blake2b(digest_size=16)
        h.update(json.dumps([FORMAT, VERSION, self.dim, self.codec]).encode())
        bounds = np.searchsorted(self.doc_rows, np.arange(self.passages + 1), side="left")
        for doc_row, docid in enumerate(self.docids):
            h.update(docid.encode() + b"\n")
            lo, hi = int(bounds[doc_row]), int(bounds[doc_row + 1])
            if hi > lo:
                for arr in (self._raw_range(lo, hi), np.ascontiguousarray(self.offsets[lo:hi]),
                            np.ascontiguousarray(self.positions[lo:hi])):
                    h.update(arr.tobytes())
        row = int(bounds[-1])
        if row != self.ntotal or h.hexdigest() != self.content_hash:
            raise DataError(f"{self.folder}: the stored vectors/metadata do not match {DUMP_JSON}'s content hash",
                            fix="the dump was modified after it was written: write it again")

    def _raw_range(self, start: int, stop: int) -> np.ndarray:
        parts = []
        for s, shard in enumerate(self.shards):
            lo, hi = max(start, self._starts[s]), min(stop, self._starts[s + 1])
            if lo < hi:
                parts.append(np.asarray(shard[lo - self._starts[s]:hi - self._starts[s]]))
        return np.ascontiguousarray(np.concatenate(parts) if len(parts) > 1 else parts[0])
