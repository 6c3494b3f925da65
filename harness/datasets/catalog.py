"""The dataset registry (configs/datasets.yaml): one card per dataset the five papers use.

Each card names its canonical ids, record counts, licence, citation and, per split (and for the
corpus), the files: URL, sha256 or the published md5 (or ``checksum_source: unverified``), size
and the path in a data mirror. Dataset families read their files from here (`split_files`), so a
URL or checksum lives in one place; docs/datasets.md is rendered from it (`render_cards`):

    python -m harness datasets --cards > docs/datasets.md
    python -m harness datasets --list
    python -m harness datasets --check     # schema + cross-references + families
"""
from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from harness import REPO
from harness.io import read_yaml
from harness.settings import mirror_dirs, validate
from harness.datasets.download import RemoteFile, fetch
from harness.errors import ConfigError, DataError

CATALOG = REPO / "configs" / "datasets.yaml"
CORPUS = "corpus"
PAPER_TITLES = {
    "svdr": "SVDR", "bpr": "BPR", "densephrases": "DensePhrases", "qcr": "QCR", "lightretriever": "LightRetriever",
}


@dataclass(frozen=True)
class SplitFile:
    """One file of a split as a fetchable RemoteFile plus the reader format named in the card."""

    remote: RemoteFile
    format: str | None
    checksum_source: str


@lru_cache(maxsize=4)
def load_catalog(path: Path = CATALOG) -> dict[str, Any]:
    """Read, validate (schema + cross-references) and return the registry."""
    doc = read_yaml(Path(path))
    validate(doc, "datasets", source=str(path))
    check_catalog(doc, source=str(path))
    return doc


def check_catalog(doc: Mapping[str, Any], source: str = "configs/datasets.yaml") -> None:
    """What the schema cannot say: provenance keys exist; no checksum is claimed without a source."""
    sources = set(doc["sources"])
    cards = doc["datasets"]
    from harness.datasets.answers import ANSWER_RULES
    from harness.published import PAPERS

    for key, card in cards.items():
        where = f"{source}: datasets.{key}"
        unknown = [p for p in card.get("papers", []) if p not in PAPERS]
        if unknown:
            raise ConfigError(f"{where}.papers names unknown paper {unknown[0]!r}", fix=f"use one of: {', '.join(PAPERS)}")
        if card.get("answer_rule") is not None and card["answer_rule"] not in ANSWER_RULES:
            raise ConfigError(f"{where}.answer_rule: unknown answer rule {card['answer_rule']!r}",
                              fix=f"use one of: {', '.join(ANSWER_RULES.names())}")
        if card.get("corpus_ref") and card["corpus_ref"] not in cards:
            raise ConfigError(f"{where}.corpus_ref names unknown card {card['corpus_ref']!r}")
        parts = ([("corpus", card["corpus"])] if "corpus" in card else []) + \
            [(f"splits.{s}", sp) for s, sp in card.get("splits", {}).items()]
        for label, part in parts:
            if part["count_source"] not in sources:
                raise ConfigError(f"{where}.{label}.count_source {part['count_source']!r} is not a key of sources",
                                  fix=f"add it to sources or use one of: {', '.join(sorted(sources))}")
            for i, f in enumerate(part.get("files", []) + part.get("alternatives", [])):
                _check_file(f, f"{where}.{label}.files[{i}]", sources)


def _check_file(f: Mapping[str, Any], where: str, sources: set[str]) -> None:
    for field in ("checksum_source", "url_source"):
        if f.get(field) is not None and f[field] not in sources:
            raise ConfigError(f"{where}.{field} {f[field]!r} is not a key of sources")
    pinned = f["sha256"] or f["md5"] or f.get("revision")
    if not pinned and f["checksum_source"] != "unverified":
        raise ConfigError(f"{where}: no sha256, md5 or revision, so checksum_source must be 'unverified'")
    if pinned and f["checksum_source"] == "unverified":
        raise ConfigError(f"{where}: a checksum is given but checksum_source says 'unverified'",
                          fix="name where the checksum comes from (a key of sources)")


def card(key: str, doc: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The card of ``key``; an unknown key fails with the close matches."""
    cards = (doc or load_catalog())["datasets"]
    if key not in cards:
        close = difflib.get_close_matches(key, list(cards), n=3)
        raise ConfigError(f"unknown dataset card {key!r} (configs/datasets.yaml)"
                          + (f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""))
    return cards[key]


def split_entry(key: str, split: str, doc: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The split ``split`` of card ``key`` (``corpus`` gives the corpus entry)."""
    c = card(key, doc)
    if split == CORPUS:
        if "corpus" not in c:
            raise ConfigError(f"dataset card {key!r} has no corpus (configs/datasets.yaml)")
        return c["corpus"]
    splits = c.get("splits", {})
    if split not in splits:
        raise ConfigError(f"dataset card {key!r} has no split {split!r}; it has: {', '.join(splits) or 'none'}")
    return splits[split]


def _cache_name(key: str, split: str, f: Mapping[str, Any]) -> str:
    if f["mirror_path"]:
        return f["mirror_path"]
    base = PurePosixPath(urlsplit(f["url"]).path).name or "file"
    return f"{key}/{split}/{base}"


def to_remote(key: str, split: str, f: Mapping[str, Any]) -> RemoteFile:
    """A card's file entry as a RemoteFile (cache path = the mirror path, else <card>/<split>/<basename>)."""
    return RemoteFile(name=_cache_name(key, split, f), url=f["url"], sha256=f["sha256"], md5=f["md5"], size=f["size"],
                      mirror_path=f["mirror_path"])


def split_files(key: str, split: str, doc: Mapping[str, Any] | None = None) -> list[SplitFile]:
    """The files a loader reads for ``split`` of card ``key`` (in the card's order)."""
    entry = split_entry(key, split, doc)
    if not entry["files"]:
        raise ConfigError(f"dataset card {key!r} split {split!r} lists no file a loader could read",
                          fix="see its loader note in configs/datasets.yaml")
    return [SplitFile(to_remote(key, split, f), f.get("format"), f["checksum_source"]) for f in entry["files"]]


def fetch_split(cfg: Mapping[str, Any], key: str, split: str) -> list[tuple[Path, str | None]]:
    """Fetch (cache -> mirror -> URL, checksummed) every file of a split; (local path, format) pairs."""
    out = []
    for sf in split_files(key, split):
        path = fetch(sf.remote, cache_dir=Path(cfg["data"]["cache_dir"]), mirrors=mirror_dirs(cfg),
                     offline=cfg["data"].get("offline") or None)
        out.append((path, sf.format))
    return out


def source_record(key: str, split: str) -> list[dict[str, Any]]:
    """Provenance of a split's files for meta.json."""
    return [{"name": sf.remote.name, "url": sf.remote.url, "sha256": sf.remote.sha256, "md5": sf.remote.md5,
             "checksum_source": sf.checksum_source} for sf in split_files(key, split)]


def dataset_config_card(key: str, dcfg: Mapping[str, Any]) -> str:
    """The card a dataset config refers to: ``card`` when given, else the dataset key itself."""
    return str(dcfg.get("card") or key)


def known_issue_kinds(key: str, where: str | None = None) -> set[str]:
    """Kinds of malformation the card says the dataset contains (``where`` = a split, or any)."""
    return {i["kind"] for i in card(key).get("known_issues", []) if where is None or i.get("where") in (None, where)}


# ----------------------------------------------------------------------------------------- cards


def _fmt_int(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _fmt_size(n: int | None) -> str:
    if n is None:
        return "—"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def _checksum(f: Mapping[str, Any]) -> str:
    if f["sha256"]:
        return f"sha256 `{f['sha256']}`"
    if f["md5"]:
        return f"md5 `{f['md5']}`"
    if f.get("revision"):
        return f"revision `{f['revision']}`"
    return "unverified"


def _file_rows(label: str, files: list[Mapping[str, Any]], alt: bool) -> list[str]:
    rows = []
    for f in files:
        url = f"<{f['url']}>"
        if alt:
            url += " (alternative)"
        mirror = f"`{f['mirror_path']}`" if f["mirror_path"] else "—"
        note = f.get("note", "")
        rows.append(f"| {label} | {url} | {_fmt_size(f['size'])} | {_checksum(f)} | {f['checksum_source']} | {mirror} | {note} |")
    return rows


def _offline(c: Mapping[str, Any]) -> str:
    parts = ([("corpus", c["corpus"])] if "corpus" in c else []) + list(c.get("splits", {}).items())
    have = [name for name, p in parts if p["files"] and all(f["mirror_path"] for f in p["files"])]
    return ", ".join(have) if have else "—"


def _ids(c: Mapping[str, Any]) -> list[str]:
    ids = []
    if "corpus" in c:
        ids.append(c["corpus"]["id"])
    for sp in c.get("splits", {}).values():
        if sp["id"] not in ids:
            ids.append(sp["id"])
    return ids


def render_cards(doc: Mapping[str, Any] | None = None) -> str:
    """docs/datasets.md: a summary table and one card per dataset, grouped (deterministic output)."""
    doc = doc or load_catalog()
    cards = doc["datasets"]
    groups: dict[str, list[str]] = {}
    for key, c in cards.items():
        groups.setdefault(c["group"], []).append(key)
    out = [
        "# Dataset cards",
        "",
        "<!-- generated by `python -m harness datasets --cards > docs/datasets.md` from configs/datasets.yaml; do not edit -->",
        "",
        (f"{len(cards)} cards: every dataset the five papers use, plus the stand-ins of the `small` profile. "
        "Ids are the ir_datasets id where ir_datasets 0.6.3 covers the set (✓ in the tables), else a harness id. "
        "Checksums are only those that could be verified or cited (column *source*, explained at the end); "
        "*unverified* means none is known and the file is accepted on its format checks alone. "
        "*Offline* lists the parts held by the data mirror (`../shared/data`, set with `HARNESS_DATA_MIRROR`)."),
        "",
        "| card | dataset | papers | ids | offline | loader |",
        "|---|---|---|---|---|---|",
    ]
    for key, c in cards.items():
        papers = ", ".join(PAPER_TITLES[p] for p in c["papers"]) or "(small profile)"
        ids = "<br>".join(f"`{i}`" for i in _ids(c)[:4]) + (" …" if len(_ids(c)) > 4 else "")
        loader = c["loader"]["family"] or "—"
        if c["loader"]["status"] != "wired":
            loader += " (not wired)"
        out.append(f"| [{key}](#{key}) | {c['name']} | {papers} | {ids} | {_offline(c)} | {loader} |")
    for group, keys in groups.items():
        out += ["", f"## {group}"]
        for key in keys:
            out += [""] + _card_md(key, cards[key])
    out += ["", "## Sources of checksums and counts", ""]
    out += [f"- **{k}**: {v}" for k, v in doc["sources"].items()]
    return "\n".join(out) + "\n"


def _card_md(key: str, c: Mapping[str, Any]) -> list[str]:
    lines = [f"### {key}", "", f"**{c['name']}**", ""]
    papers = ", ".join(PAPER_TITLES[p] for p in c["papers"]) or "none (small-profile stand-in)"
    lines.append(f"- Papers: {papers}. Used for: {c['used_for']}.")
    lines.append(f"- Language: {c['language']}. Licence: {c['licence']}.")
    lines.append(f"- Citation: {c['citation']}")
    if c.get("homepage"):
        lines.append(f"- Homepage: <{c['homepage']}>")
    if c.get("corpus_ref"):
        lines.append(f"- Retrieved from: [{c['corpus_ref']}](#{c['corpus_ref']}).")
    if c.get("answer_rule"):
        lines.append(f"- Answer rule: `{c['answer_rule']}`.")
    ld = c["loader"]
    lines.append(f"- Loader: {'family `' + ld['family'] + '`' if ld['family'] else 'none'} ({ld['status']})"
                 + (f": {ld['note']}" if ld["note"] else "") + ".")
    lines += ["", "| part | id | ir_datasets | records | unit | judgments | count source |", "|---|---|---|---|---|---|---|"]
    if "corpus" in c:
        cp = c["corpus"]
        lines.append(f"| corpus | `{cp['id']}` | {'✓' if cp['ir_datasets'] else ''} | {_fmt_int(cp['documents'])} | documents | | {cp['count_source']} |")
    for name, sp in c.get("splits", {}).items():
        extra = f" (after the paper's decontamination: {sp['deduped']:,})" if "deduped" in sp else ""
        lines.append(f"| {name} | `{sp['id']}` | {'✓' if sp['ir_datasets'] else ''} | {_fmt_int(sp['records'])} | "
                     f"{sp['unit']}{extra} | {_fmt_int(sp.get('judgments'))} | {sp['count_source']} |")
    rows = []
    if "corpus" in c:
        rows += _file_rows("corpus", c["corpus"]["files"], False) + _file_rows("corpus", c["corpus"].get("alternatives", []), True)
    for name, sp in c.get("splits", {}).items():
        rows += _file_rows(name, sp["files"], False) + _file_rows(name, sp.get("alternatives", []), True)
    if rows:
        lines += ["", "| part | url | size | checksum | source | mirror path | note |", "|---|---|---|---|---|---|---|"] + rows
    notes = [sp["note"] for sp in c.get("splits", {}).values() if sp.get("note")]
    notes += [f"known issue ({i['kind']}{', ' + i['where'] if i.get('where') else ''}): {i['note']}" for i in c.get("known_issues", [])]
    notes += c.get("notes", [])
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return lines


def check_families(doc: Mapping[str, Any] | None = None) -> list[str]:
    """Problems: a wired card whose family is not registered (returned, not raised, for --check)."""
    from harness.datasets import FAMILIES

    problems = []
    for key, c in (doc or load_catalog())["datasets"].items():
        fam = c["loader"]["family"]
        if c["loader"]["status"] == "wired" and (fam is None or fam not in FAMILIES):
            problems.append(f"datasets.{key}.loader.family {fam!r} is not a registered family ({', '.join(FAMILIES.names())})")
    return problems


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness datasets", description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--cards", action="store_true", help="print docs/datasets.md (markdown dataset cards)")
    g.add_argument("--list", action="store_true", help="one line per card: key, ids, records")
    g.add_argument("--check", action="store_true", help="validate configs/datasets.yaml (schema, references, families)")
    ap.add_argument("--catalog", type=Path, default=CATALOG, help="registry file (default configs/datasets.yaml)")
    args = ap.parse_args(argv)
    doc = load_catalog(args.catalog)
    if args.cards:
        print(render_cards(doc), end="")
    elif args.check:
        problems = check_families(doc)
        if problems:
            raise DataError("; ".join(problems))
        print(f"{args.catalog}: {len(doc['datasets'])} cards, valid")
    else:
        for key, c in doc["datasets"].items():
            recs = {n: sp["records"] for n, sp in c.get("splits", {}).items()}
            docs = c["corpus"]["documents"] if "corpus" in c else None
            print(f"{key:38} {', '.join(_ids(c)[:2]):60} docs={_fmt_int(docs)} {recs}")
    return 0
