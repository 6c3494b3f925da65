"""The `smoke` fixture: a small Wikipedia-style QA collection committed in the package.

Written by scripts/make_smoke_fixture.py (deterministic); questions carry answer strings and
gold passage ids, so the set serves both QA top-k accuracy and qrels-based measures.
The records are checked as the other loaders check theirs: a bad line raises `DataError`
naming ``file:line`` and the fix (the fixture is generated, so the fix is to regenerate it).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, store
from harness.datasets.readers import IdGuard, Issues, iter_jsonl
from harness.errors import DataError

# The fixture folder; tests point it at a copy (monkeypatch this attribute).
FIXTURE = Path(__file__).resolve().parent / "smoke"
REPO = Path(__file__).resolve().parents[2]
CORPUS_FILE = "corpus.jsonl"
QUESTIONS_FILE = "questions.jsonl"
SPLITS = ("train", "test")
CORPUS_FIELDS = ("id", "title", "text")
QUESTION_FIELDS = ("id", "question", "answers", "gold", "split")
FIX = "regenerate the fixture with `python scripts/make_smoke_fixture.py` (or repair the line)"


def fixture_files(folder: Path | None = None) -> list[Path]:
    """The files `prepare` reads (what Snakemake must track as inputs of the data rule)."""
    folder = FIXTURE if folder is None else folder
    return [folder / CORPUS_FILE, folder / QUESTIONS_FILE]


def input_files(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[Path]:
    """Family hook of `harness.datasets.input_files`: the committed fixture files."""
    return fixture_files()


def _fields(rec: Mapping[str, Any], names: tuple[str, ...], where: str, what: str) -> None:
    missing = [n for n in names if n not in rec]
    if missing:
        raise DataError(f"{where}: {what} record lacks field {', '.join(map(repr, missing))} "
                        f"(it needs {', '.join(names)})", fix=FIX)


def _string(rec: Mapping[str, Any], name: str, where: str) -> str:
    value = rec[name]
    if not isinstance(value, str):
        raise DataError(f"{where}: field {name!r} must be a string, got {type(value).__name__}", fix=FIX)
    return value


def _strings(rec: Mapping[str, Any], name: str, where: str) -> list[str]:
    value = rec[name]
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        raise DataError(f"{where}: field {name!r} must be a non-empty list of strings, got {value!r}", fix=FIX)
    return value


def read_corpus(path: Path) -> list[Doc]:
    """The fixture's passages; a malformed line, a missing field or a repeated id raises DataError."""
    issues = Issues()  # the fixture tolerates no malformation
    guard = IdGuard("document", issues)
    docs = []
    for lineno, rec in iter_jsonl(path, issues):
        where = f"{path}:{lineno}"
        _fields(rec, CORPUS_FIELDS, where, "corpus")
        doc = Doc(*(_string(rec, f, where) for f in CORPUS_FIELDS))
        guard.fresh(doc.id, where)
        docs.append(doc)
    return docs


def read_questions(path: Path, doc_ids: set[str], corpus: Path) -> dict[str, list[Query]]:
    """The fixture's questions by split; checks fields, split names, unique ids and gold ids."""
    issues = Issues()
    guard = IdGuard("question", issues)
    splits: dict[str, list[Query]] = {s: [] for s in SPLITS}
    for lineno, rec in iter_jsonl(path, issues):
        where = f"{path}:{lineno}"
        _fields(rec, QUESTION_FIELDS, where, "question")
        id_, text, split = (_string(rec, f, where) for f in ("id", "question", "split"))
        answers, gold = _strings(rec, "answers", where), _strings(rec, "gold", where)
        if split not in splits:
            raise DataError(f"{where}: unknown split {split!r} of question {id_!r}; a split is one of: {', '.join(SPLITS)}",
                            fix=FIX)
        absent = [g for g in gold if g not in doc_ids]
        if absent:
            raise DataError(f"{where}: gold id {absent[0]!r} of question {id_!r} is not a document of {corpus}", fix=FIX)
        guard.fresh(id_, where)
        splits[split].append(Query(id_, text, answers, gold))
    return splits


def _source(folder: Path) -> str:
    return str(folder.relative_to(REPO)) if folder.is_relative_to(REPO) else str(folder)


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    corpus_path, questions_path = fixture_files()
    docs = read_corpus(corpus_path)
    splits = read_questions(questions_path, {d.id for d in docs}, corpus_path)
    n_docs = store.write_corpus(out, docs)
    counts = {s: store.write_queries(out, s, qs) for s, qs in splits.items()}
    qrels = {q.id: {g: 1 for g in q.gold} for q in splits["test"]}
    store.write_qrels(out / store.QRELS, qrels)
    return {"documents": n_docs, "queries": counts, "source": _source(FIXTURE)}
