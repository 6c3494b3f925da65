"""SQuAD v1.1 dev as an open-domain QA set ("squad-open").

The corpus is the 2,067 dev paragraphs (title + text); questions are split by article into
train/dev/test with a seeded shuffle (config keys ``split_seed`` and ``split_articles``), so
no article's paragraphs serve both training and test questions. The article titles of every
split are written to meta.json. At `small` scale this stands in for NQ/TQA/WQ over the 21M
Wikipedia passages, which cannot be had offline.
"""
from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.settings import mirror_dirs
from harness.datasets import Doc, Query, store
from harness.datasets.download import RemoteFile, fetch
from harness.errors import ConfigError, DataError

SQUAD_DEV = RemoteFile(
    name="squad/dev-v1.1.json",
    url="https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json",
    sha256="95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9",
    size=4854279,
    mirror_path="squad/dev-v1.1.json",
)


def load_articles(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        articles = data["data"]
    except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a SQuAD v1.1 file ({exc}); delete it and re-run to fetch it again") from None
    return articles


def split_articles(n_articles: int, counts: Mapping[str, int], seed: int) -> dict[str, list[int]]:
    """Seeded shuffle of article indices into train/dev/test of the given sizes."""
    need = sum(counts.values())
    if need > n_articles:
        raise ConfigError(f"datasets.*.split_articles asks for {need} articles; SQuAD dev has {n_articles}")
    order = list(range(n_articles))
    random.Random(seed).shuffle(order)
    out, start = {}, 0
    for split in ("train", "dev", "test"):
        n = counts.get(split, 0)
        out[split] = sorted(order[start:start + n])
        start += n
    return out


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    path = fetch(SQUAD_DEV, cache_dir=Path(cfg["data"]["cache_dir"]), mirrors=mirror_dirs(cfg),
                 offline=cfg["data"].get("offline") or None)
    articles = load_articles(path)
    counts = dcfg.get("split_articles", {"train": 32, "dev": 4, "test": 12})
    splits = split_articles(len(articles), counts, dcfg.get("split_seed", 0))
    docs = []
    questions: dict[int, list[Query]] = {}
    for ai, art in enumerate(articles):
        title = art["title"].replace("_", " ")
        questions[ai] = []
        for pi, para in enumerate(art["paragraphs"]):
            pid = f"s{ai:02d}p{pi:03d}"
            docs.append(Doc(pid, title, para["context"]))
            for qa in para["qas"]:
                answers = list(dict.fromkeys(a["text"] for a in qa["answers"]))
                questions[ai].append(Query(qa["id"], qa["question"].strip(), answers, [pid]))
    n_docs = store.write_corpus(out, docs)
    rng = random.Random(dcfg.get("split_seed", 0))
    meta_counts = {}
    for split, idx in splits.items():
        qs = [q for ai in idx for q in questions[ai]]
        limit = dcfg.get(f"max_{split}_queries")
        if limit and len(qs) > limit:
            qs = sorted(rng.sample(qs, limit), key=lambda q: q.id)
        meta_counts[split] = store.write_queries(out, split, qs)
    return {
        "documents": n_docs,
        "queries": meta_counts,
        "split_seed": dcfg.get("split_seed", 0),
        "split_articles": {s: [articles[i]["title"] for i in idx] for s, idx in splits.items()},
        "source": {"file": SQUAD_DEV.name, "sha256": SQUAD_DEV.sha256, "path": str(path)},
    }
