"""Read and write prepared dataset folders (streaming: the corpus is never loaded whole)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
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
