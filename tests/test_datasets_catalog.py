"""The dataset registry (configs/datasets.yaml): schema, provenance rules, coverage, generated cards."""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from harness.datasets import FAMILIES, catalog
from harness.datasets.download import sha256_of
from harness.errors import ConfigError


@pytest.fixture(scope="module")
def doc():
    return catalog.load_catalog()


def _all_files(doc):
    for key, c in doc["datasets"].items():
        parts = ([("corpus", c["corpus"])] if "corpus" in c else []) + list(c.get("splits", {}).items())
        for name, part in parts:
            for f in part.get("files", []) + part.get("alternatives", []):
                yield key, name, f


def test_registry_is_valid_and_every_wired_family_is_registered(doc):
    assert catalog.check_families(doc) == []
    for key, c in doc["datasets"].items():
        if c["loader"]["family"]:
            assert c["loader"]["family"] in FAMILIES, key


def test_registry_covers_the_papers_datasets(doc):
    cards = doc["datasets"]
    assert len(cards) >= 60
    assert cards["dpr-w100"]["corpus"]["documents"] == 21_015_324
    for key in ("dpr-nq", "dpr-trivia", "dpr-webquestions", "dpr-curatedtrec", "dpr-squad"):
        assert {"train", "dev", "test"} <= set(cards[key]["splits"]), key
    assert cards["squad"]["splits"]["train"]["files"][0]["md5"] == "981b29407e0affa3b1b156f72073b945"
    assert {"train", "dev-small", "trec-dl-2019", "trec-dl-2020", "train-triples"} <= set(cards["msmarco-passage"]["splits"])
    beir = {k for k, c in cards.items() if c["group"] == "BEIR"}
    assert len(beir) == 15 and {"beir-cqadupstack", "beir-webis-touche2020"} <= beir
    assert len(cards["beir-cqadupstack"]["splits"]) == 12
    assert len([k for k, c in cards.items() if c["group"] == "C-MTEB Retrieval"]) == 8
    lr = [c for c in cards.values() if c["group"].startswith("LightRetriever training sets")]
    assert len(lr) == 23
    # Table 6's original and deduplicated sizes agree with the published duplicates column
    from harness.published import load_published

    pub = sum(r["value"] for r in load_published("lightretriever")["records"]
              if r["table"] == "6" and r["column"] == "Duplicates")
    assert sum(c["splits"]["train"]["records"] - c["splits"]["train"]["deduped"] for c in lr) == pub
    assert {"kilt-trex", "kilt-zsre", "kilt-wikipedia", "msmarco-silver-queries", "nq-open"} <= set(cards)
    assert cards["kilt-trex"]["splits"]["train"]["records"] == 2_284_168
    assert cards["kilt-zsre"]["splits"]["test"]["records"] == 4_966


def test_ids_are_ir_datasets_ids_where_claimed(doc):
    import ir_datasets

    for key, c in doc["datasets"].items():
        parts = ([c["corpus"]] if "corpus" in c else []) + list(c.get("splits", {}).values())
        for part in parts:
            if part["ir_datasets"] and "<" not in part["id"]:
                ir_datasets.registry[part["id"]]  # raises KeyError for an unknown id
            if not part["ir_datasets"]:
                assert part["id"] not in ir_datasets.registry, f"{key}: {part['id']} is an ir_datasets id"


def test_no_checksum_without_a_source(doc):
    for key, split, f in _all_files(doc):
        if f["sha256"] or f["md5"] or f.get("revision"):
            assert f["checksum_source"] != "unverified", (key, split)
        else:
            assert f["checksum_source"] == "unverified", (key, split)
        catalog.to_remote(key, split, f)  # well-formed hex digests and relative paths


def test_check_catalog_rejects_a_checksum_without_provenance(doc):
    bad = copy.deepcopy(doc)
    f = bad["datasets"]["dpr-nq"]["splits"]["test"]["alternatives"][0]
    f["md5"] = "0" * 32
    with pytest.raises(ConfigError, match="checksum_source says 'unverified'"):
        catalog.check_catalog(bad)
    bad = copy.deepcopy(doc)
    bad["datasets"]["vaswani"]["corpus"]["files"][0]["sha256"] = None
    with pytest.raises(ConfigError, match="must be 'unverified'"):
        catalog.check_catalog(bad)
    bad = copy.deepcopy(doc)
    bad["datasets"]["vaswani"]["corpus"]["count_source"] = "hearsay"
    with pytest.raises(ConfigError, match="not a key of sources"):
        catalog.check_catalog(bad)


def test_unknown_card_suggests_close_names():
    with pytest.raises(ConfigError, match="did you mean 'cranfield'"):
        catalog.card("cranfeild")


def test_mirror_files_match_their_registered_sha256(doc, shared_data):
    seen = set()
    for key, split, f in _all_files(doc):
        if not f["mirror_path"] or f["mirror_path"] in seen:
            continue
        seen.add(f["mirror_path"])
        path = shared_data / f["mirror_path"]
        assert path.is_file(), f"{key}.{split}: {path} missing from the mirror"
        assert path.stat().st_size == f["size"], f["mirror_path"]
        assert sha256_of(path) == f["sha256"], f["mirror_path"]
    assert len(seen) >= 50


def test_docs_cards_are_generated_from_the_registry(repo, doc):
    text = catalog.render_cards(doc)
    assert (repo / "docs" / "datasets.md").read_text(encoding="utf-8") == text, \
        "docs/datasets.md is stale: python -m harness datasets --cards > docs/datasets.md"
    assert f"{len(doc['datasets'])} cards" in text
    for key in doc["datasets"]:
        assert f"### {key}\n" in text


def test_cli_cards_and_check(repo):
    r = subprocess.run([sys.executable, "-m", "harness", "datasets", "--check"], cwd=repo, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "valid" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "harness", "datasets", "--cards"], cwd=repo, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout.startswith("# Dataset cards")


def test_check_catalog_names_an_unknown_paper_or_answer_rule(doc):
    """The schema leaves paper ids and answer rules to their registries; the catalog check names them."""
    key = next(k for k, c in doc["datasets"].items() if c.get("papers"))
    bad = copy.deepcopy(doc)
    bad["datasets"][key]["papers"] = ["bprr"]
    with pytest.raises(ConfigError, match=rf"datasets.{key}.papers names unknown paper 'bprr'"):
        catalog.check_catalog(bad)
    bad = copy.deepcopy(doc)
    bad["datasets"][key]["answer_rule"] = "exact"
    with pytest.raises(ConfigError, match=rf"datasets.{key}.answer_rule: unknown answer rule 'exact'"):
        catalog.check_catalog(bad)
