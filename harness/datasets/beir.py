"""BEIR test sets (queries, qrels, corpus) in the layout of Anserini's copies.

Files are resolved cache -> mirror -> official URL. The queries and qrels are Anserini's
``topics.beir-v1.0.0-<name>.test.tsv.gz`` and ``qrels.beir-v1.0.0-<name>.test.txt`` (TSV/TREC, not
BEIR's queries.jsonl / qrels/<split>.tsv, so the harness reads them). A corpus in BEIR's
corpus.jsonl layout is read from the mirror (``beir/<name>/corpus.jsonl.gz``), checksummed by
:func:`harness.datasets.download.fetch`, then loaded by BEIR's own
``beir.datasets.data_loader.GenericDataLoader`` (:func:`_corpus_from_jsonl_gz`); without one,
ir_datasets downloads the official BEIR zip (needs internet) and streams its corpus.
"""
from __future__ import annotations

import gzip
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, store
from harness.datasets.download import RemoteFile, Unavailable, fetch
from harness.errors import DataError
from harness.settings import mirror_dirs

ANSERINI_TOOLS = "https://raw.githubusercontent.com/castorini/anserini-tools/5b819c1a45c8a0a3ec9426f476694f44a29dfaf3"

# name -> (topics sha256, qrels sha256, corpus.jsonl.gz sha256 of the mirror's copy or None)
CHECKSUMS = {
    "scifact": ("a624d39fa2a41da44b0148ac2b1c2cb9856ece2c4afbb6ac9360e8e524d66b4f",
                "8b7315286f8dc823956025a1fc9c9ff0bfe142d7b409458ccd758cfa0713ccba",
                "4e2b75022066f42476db5efe0d5841967b4152798b79d50cbf7d6a84031862f0"),
    "nfcorpus": ("3b2d068344ae4e711656203c0937cbb4c2eb91759c0d0973525af7545500a345",
                 "9d822ee3fc9e3b395d7fe25a13d81686f54b2a056992574daa825e792800c959", None),
    "arguana": ("bdca544b55cf0c0bba3a021075d3f1788a101bd852ef84a1567e82783fc2181b",
                "687d4efbee424d462825f554fb9d0eb491e178c789a7e4960fbd889f984eeae3", None),
    "fiqa": ("35a21f6e7c509e945c110a4e5224cd9e86038662c353edc1e890c8a02f5ef685",
             "424164b5418f5e537fd19b97383c7301166e5738cbfa8e249bc9c10f6b6cd926", None),
    "scidocs": ("f354945ce8b0e08513a90bda322dc2363853746ba805a7c40528e840bf3571a4",
                "648e2e4c15fc795114bc47664a65e73be59ba600db6a30ead85f8b5fcb4d8c98", None),
    "trec-covid": ("5c0823de359690f6582736be6b50e55afc17602bdf3f3aa7a29e173d5163552b",
                   "0d94dcea5bc3b44a64a1f9b1430f7672fae39fad1c980d581b92890ab0448713", None),
    "nq": ("9a278c94c9c7d6410672544fa5d1c89fd7816b074854e0179c9b8bd61b977bb7",
           "935d4b66229ef34e69b5935235abebdbffc3d9754fc45cb6eaf0c63d7692f0fe", None),
}


def remote_files(name: str) -> dict[str, RemoteFile]:
    if name not in CHECKSUMS:
        from harness.registry import Registry

        reg: Registry[None] = Registry("BEIR dataset")
        for n in CHECKSUMS:
            reg.add(n, None)
        reg.get(name)
    t_sha, q_sha, c_sha = CHECKSUMS[name]
    topics = f"topics.beir-v1.0.0-{name}.test.tsv.gz"
    qrels = f"qrels.beir-v1.0.0-{name}.test.txt"
    files = {
        "topics": RemoteFile(f"beir/{name}/{topics}", f"{ANSERINI_TOOLS}/topics/{topics}", sha256=t_sha),
        "qrels": RemoteFile(f"beir/{name}/{qrels}", f"{ANSERINI_TOOLS}/qrels/{qrels}", sha256=q_sha),
    }
    if c_sha:
        files["corpus"] = RemoteFile(
            f"beir/{name}/corpus.jsonl.gz",
            f"https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip",
            sha256=c_sha,
        )
    return files


def read_topics(path: Path) -> list[Query]:
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2:
                raise DataError(f"{path}:{lineno}: expected 'qid<TAB>text', got {len(parts)} columns")
            out.append(Query(parts[0], parts[1]))
    return out


def _corpus_from_jsonl_gz(path: Path) -> Iterator[Doc]:
    """The documents of a BEIR ``corpus.jsonl.gz`` (already checksummed), read by BEIR's
    ``GenericDataLoader.load_corpus``, in file order, as ``Doc(str(_id), title or "", text)``.

    GenericDataLoader reads only an uncompressed ``*.jsonl``, so the file is decompressed into a
    temporary folder first (blank lines left out: BEIR's loader would fail on them; the harness's
    reader skipped them). Its dict keeps one entry per ``_id`` (a repeated id silently overwrites
    the first): a repeat is a DataError here, as the harness's reader made it, and so is a record
    without ``_id`` or ``text`` (BEIR's loader would store None)."""
    import json
    import tempfile

    from beir.datasets.data_loader import GenericDataLoader

    with tempfile.TemporaryDirectory(prefix="beir-corpus-") as tmp:
        plain = Path(tmp) / "corpus.jsonl"
        lines = 0
        with gzip.open(path, "rt", encoding="utf-8") as src, open(plain, "w", encoding="utf-8") as dst:
            for line in src:
                if line.strip():
                    dst.write(line if line.endswith("\n") else line + "\n")
                    lines += 1
        try:
            corpus = GenericDataLoader(corpus_file=str(plain)).load_corpus()
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: invalid JSON in a corpus record ({exc})") from None
    if len(corpus) != lines:
        raise DataError(f"{path}: {lines - len(corpus)} documents repeat an earlier document's _id",
                        fix="ids must be unique within a file; the file may be damaged or concatenated twice")
    for did, rec in corpus.items():
        if did is None or rec.get("text") is None:
            raise DataError(f"{path}: a BEIR document needs '_id' and 'text' (document {did!r})")
        yield Doc(str(did), rec.get("title") or "", rec["text"])


def _corpus_from_ir_datasets(name: str) -> Iterator[Doc]:
    from harness.datasets import irds

    for d in irds.load(f"beir/{name}").docs_iter():
        yield Doc(d.doc_id, getattr(d, "title", "") or "", d.text)


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    name = dcfg.get("name", key)
    files = remote_files(name)
    kw = dict(cache_dir=Path(cfg["data"]["cache_dir"]), mirrors=mirror_dirs(cfg), offline=cfg["data"].get("offline") or None)
    topics = fetch(files["topics"], **kw)
    qrels_path = fetch(files["qrels"], **kw)
    docs = None
    if "corpus" in files:  # our mirror's converted copy, when a cache or mirror holds it
        try:
            docs = _corpus_from_jsonl_gz(fetch(files["corpus"], **{**kw, "offline": True}))
        except Unavailable:  # absent only: a damaged copy is an error the user must see (download.py)
            if kw["offline"]:
                raise
    if docs is None:  # the official BEIR zip, downloaded and checksummed by ir_datasets
        docs = _corpus_from_ir_datasets(name)
    n_docs = store.write_corpus(out, docs)
    qrels = store.read_qrels(qrels_path)
    queries = [q for q in read_topics(topics) if q.id in qrels]
    limit = dcfg.get("max_test_queries")
    if limit:
        queries = queries[:limit]
        keep = {q.id for q in queries}
        qrels = {q: r for q, r in qrels.items() if q in keep}
    doc_ids = {d.id for d in store.iter_corpus(out)}
    unknown = sorted({d for r in qrels.values() for d in r if d not in doc_ids})
    if unknown:
        raise DataError(f"{qrels_path}: {len(unknown)} judged documents are not in the corpus (e.g. {unknown[:3]})")
    store.write_queries(out, "test", queries)
    store.write_qrels(out / store.QRELS, qrels)
    return {
        "documents": n_docs,
        "queries": {"test": len(queries)},
        "judgments": sum(len(r) for r in qrels.values()),
        "source": {k: f.name for k, f in files.items()},
        "note": "corpus.jsonl.gz of the mirror is a conversion of allenai/scifact, not the BEIR file (MANIFEST.md)"
        if name == "scifact" else "",
    }
