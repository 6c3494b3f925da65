"""Read and write prepared dataset folders (streaming: the corpus is never loaded whole)."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from harness.errors import DataError
from harness.io import iter_jsonl, write_jsonl


class Doc(NamedTuple):
    """A passage of a corpus."""

    id: str
    title: str
    text: str


class Query(NamedTuple):
    id: str
    text: str
    answers: list[str] | None = None
    gold: list[str] | None = None


CORPUS = "corpus.jsonl"
QRELS = "qrels-test.txt"


def queries_file(split: str) -> str:
    return f"queries-{split}.jsonl"


def write_corpus(folder: Path, docs: Iterable[Doc]) -> int:
    seen: set[str] = set()

    def checked() -> Iterator[dict]:
        for d in docs:
            if d.id in seen:
                raise DataError(f"duplicate document id {d.id!r} while writing {folder / CORPUS}")
            seen.add(d.id)
            yield {"id": d.id, "title": d.title, "text": d.text}

    return write_jsonl(folder / CORPUS, checked())


def write_queries(folder: Path, split: str, queries: Iterable[Query]) -> int:
    def rows() -> Iterator[dict]:
        for q in queries:
            rec = {"id": q.id, "text": q.text}
            if q.answers is not None:
                rec["answers"] = list(q.answers)
            if q.gold is not None:
                rec["gold"] = list(q.gold)
            yield rec

    return write_jsonl(folder / queries_file(split), rows())


def iter_corpus(folder: Path, ids: list[str] | None = None) -> Iterator[Doc]:
    """The corpus's documents in file order; ``ids``: a list each document's id is appended to as it is
    read (a job that streams its corpus into an encoder keeps the ids, row for row, and nothing else)."""
    path = Path(folder) / CORPUS
    for rec in iter_jsonl(path):
        try:
            doc = Doc(str(rec["id"]), rec.get("title") or "", rec["text"])
        except KeyError as exc:
            raise DataError(f"{path}: record {rec.get('id')!r} lacks field {exc}") from None
        if ids is not None:
            ids.append(doc.id)
        yield doc


def corpus_size(folder: Path) -> int:
    """Documents of a dataset folder's corpus: its non-blank lines, counted without parsing them (NQ's
    21M passages in seconds), the records :func:`iter_corpus` gives."""
    with open(Path(folder) / CORPUS, "rb") as fh:
        return sum(1 for line in fh if line.strip())


def corpus_by_id(folder: Path) -> dict[str, Doc]:
    """The whole corpus as ``{id: Doc}``, noted as held by this job (:func:`note_held`)."""
    docs = {d.id: d for d in iter_corpus(folder)}
    note_held(folder, docs.values(), container=docs)
    return docs


def corpus_list(folder: Path) -> list[Doc]:
    """The whole corpus as a list in file order, noted as held by this job (:func:`note_held`)."""
    docs = list(iter_corpus(folder))
    note_held(folder, docs, container=docs)
    return docs


def corpus_texts(folder: Path) -> dict[str, str]:
    """The whole corpus as ``{id: text}``, noted as held by this job (:func:`note_held`)."""
    texts = {d.id: d.text for d in iter_corpus(folder)}
    note_held(folder, texts.items(), container=texts)
    return texts


def corpus_lookup(folder: Path) -> CorpusLookup:
    """The corpus read by id on demand (:class:`CorpusLookup`): for a job that reads some of its
    passages by id (a trainer's gold passages, negatives and random draws; the negatives' answer
    checks), not all of them."""
    return CorpusLookup(folder)


def ids_of(docs: Mapping[str, Any]) -> Sequence[str]:
    """A corpus mapping's ids in order, to draw random passages from: a :class:`CorpusLookup`'s own
    (decoded as drawn), a dict's listed."""
    return docs.ids if isinstance(docs, CorpusLookup) else list(docs)


class _Ids(Sequence[str]):
    """The corpus's ids in file order over a numpy bytes array, decoded one at a time (``random.choice``
    draws from it as from the list of every id, and the same draws: NQ's 21M ids as Python strings
    are ~1.4 GB)."""

    def __init__(self, ids: Any) -> None:
        self._ids = ids

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [b.decode("utf-8") for b in self._ids[i]]
        return self._ids[i].decode("utf-8")


#: corpus lines a :class:`CorpusLookup` parses per numpy block while it scans the file
LOOKUP_BLOCK = 1 << 16


class CorpusLookup(Mapping[str, Doc]):
    """A dataset folder's corpus as a mapping ``{id: Doc}`` that reads a document's line when it is
    asked for: one pass over the file keeps each document's id and byte offset in numpy arrays (NQ's
    21M passages: ~0.7 GB, where :func:`corpus_by_id`'s Docs are ~24 GiB). Iteration and :attr:`ids`
    keep the file's order, as :func:`corpus_by_id`'s dict does (a trainer's random draws are the
    same); :meth:`values` and :meth:`items` stream the file in that order. Noted as held by this job
    at its arrays' bytes (:func:`harness.cost.corpus_held`: they grow with the corpus)."""

    def __init__(self, folder: Path) -> None:
        import numpy as np

        from harness.cost import corpus_held
        from harness.progress import chunks

        self.folder = Path(folder)
        self.path = self.folder / CORPUS
        ids, offsets = [], []
        for block in chunks(self._scan(), LOOKUP_BLOCK):
            ids.append(np.array([i for i, _ in block], dtype=bytes))
            offsets.append(np.array([o for _, o in block], dtype=np.int64))
        self._ids = np.concatenate(ids) if ids else np.zeros(0, "S1")
        self._offsets = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)
        self._order = np.argsort(self._ids, kind="stable")
        self._sorted = self._ids[self._order]
        self.ids: Sequence[str] = _Ids(self._ids)
        self._fh = open(self.path, "rb")
        corpus_held(self.folder.name, len(self._ids), self.nbytes)

    def _scan(self) -> Iterator[tuple[bytes, int]]:
        """(id as UTF-8, byte offset) of each record, in file order; a bad line names file:line."""
        pos = 0
        with open(self.path, "rb") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                        doc_id = str(rec["id"])
                    except json.JSONDecodeError as exc:
                        raise DataError(f"{self.path}:{lineno}: invalid JSON ({exc.msg})") from None
                    except (KeyError, TypeError):
                        raise DataError(f"{self.path}:{lineno}: a corpus record needs an \"id\"") from None
                    yield doc_id.encode("utf-8"), pos
                pos += len(line)

    @property
    def nbytes(self) -> int:
        return int(self._ids.nbytes + self._offsets.nbytes + self._order.nbytes + self._sorted.nbytes)

    def _row(self, doc_id: object) -> int:
        if not isinstance(doc_id, str):
            return -1
        key = doc_id.encode("utf-8")
        if len(key) > self._sorted.dtype.itemsize or not len(self._sorted):
            return -1   # longer than every id (numpy would compare it cut to their width)
        i = int(self._sorted.searchsorted(key))
        return int(self._order[i]) if i < len(self._sorted) and self._sorted[i] == key else -1

    def __getitem__(self, doc_id: str) -> Doc:
        row = self._row(doc_id)
        if row < 0:
            raise KeyError(doc_id)
        return self.doc_at(row)

    def doc_at(self, row: int) -> Doc:
        """The document at position ``row`` of the file (0-based, as :attr:`ids`)."""
        self._fh.seek(int(self._offsets[row]))
        rec = json.loads(self._fh.readline())
        try:
            return Doc(str(rec["id"]), rec.get("title") or "", rec["text"])
        except KeyError as exc:
            raise DataError(f"{self.path}: record {rec.get('id')!r} lacks field {exc}") from None

    def __contains__(self, doc_id: object) -> bool:
        return self._row(doc_id) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self._ids)

    def values(self) -> Iterator[Doc]:  # type: ignore[override]
        """The documents in file order, streamed (not looked up one by one)."""
        return iter_corpus(self.folder)

    def items(self) -> Iterator[tuple[str, Doc]]:  # type: ignore[override]
        return ((d.id, d) for d in iter_corpus(self.folder))

    @property
    def texts(self) -> Mapping[str, str]:
        """The same documents' texts by id, read as asked for (:func:`corpus_texts`'s dict, not held)."""
        return _Texts(self)

    def close(self) -> None:
        self._fh.close()

    def __del__(self) -> None:
        fh = getattr(self, "_fh", None)
        if fh is not None:
            fh.close()


class _Texts(Mapping[str, str]):
    def __init__(self, docs: CorpusLookup) -> None:
        self._docs = docs

    def __getitem__(self, doc_id: str) -> str:
        return self._docs[doc_id].text

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._docs

    def __iter__(self) -> Iterator[str]:
        return iter(self._docs)

    def __len__(self) -> int:
        return len(self._docs)


#: records whose sizes :func:`note_held` measures (the rest are taken to be like them)
HELD_SAMPLE = 2000


def note_held(folder: Path, records: Iterable[Any], *, container: Any) -> int:
    """Note in this job's cost (:func:`harness.cost.corpus_held`) that it holds ``folder``'s corpus
    whole: its records (Docs, or (id, text) pairs) and their bytes in Python objects, measured on the
    first :data:`HELD_SAMPLE` records and taken per record for the rest, plus the container's own.
    Such a job's memory grows with the corpus: NQ's 21M passages are ~22 GB in Python objects,
    which no slice shows; python -m harness estimate projects it. Returns the bytes."""
    import sys
    from itertools import islice

    from harness.cost import corpus_held

    n = len(container)
    sample = list(islice(iter(records), HELD_SAMPLE))
    if not sample:
        return 0
    # a Doc: the tuple and its strings; an (id, text) item: the strings alone (the empty title is shared)
    each = sum((sys.getsizeof(r) if isinstance(r, Doc) else 0) + sum(sys.getsizeof(x) for x in r if x)
               for r in sample) / len(sample)
    nbytes = int(each * n) + sys.getsizeof(container)
    corpus_held(Path(folder).name, n, nbytes)
    return nbytes


def read_queries(folder: Path, split: str) -> list[Query]:
    path = Path(folder) / queries_file(split)
    out = []
    for rec in iter_jsonl(path):
        out.append(Query(str(rec["id"]), rec["text"], rec.get("answers"), rec.get("gold")))
    return out


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """TREC qrels ``qid 0 docid rel``; malformed lines raise DataError with file:line."""
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4:
                raise DataError(f"{path}:{lineno}: expected 4 columns 'qid 0 docid rel', got {len(parts)}")
            try:
                rel = int(parts[3])
            except ValueError:
                raise DataError(f"{path}:{lineno}: relevance {parts[3]!r} is not an integer") from None
            qrels.setdefault(parts[0], {})[parts[2]] = rel
    return qrels


def write_qrels(path: Path, qrels: dict[str, dict[str, int]]) -> None:
    from harness.io import atomic_write_text

    lines = [f"{q} 0 {d} {r}" for q, docs in qrels.items() for d, r in docs.items()]
    atomic_write_text(path, "\n".join(lines) + "\n")
