"""The small profile's datasets from the real data mirror, and decontamination over them.

Every dataset of configs/profiles/small.yaml is prepared once (in-process, into a temporary
results folder); its counts must match the mirror's MANIFEST. Then the decontam stage runs over
the profile's `decontam` sets exactly as rule decontam does, and the report renders.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from harness.config import load_config
from harness.datasets import prepare, store
from harness.decontam import report as dreport
from harness.decontam import stage
from harness.errors import ConfigError, DataError

# dataset key -> {split: queries} as the mirror's files give them (MANIFEST.md)
EXPECTED = {
    "nq-qa": {"test": 3610, "dev": 8757},
    "tqa-qa": {"test": 11313, "dev": 8837},
    "wq-qa": {"test": 2032, "train": 3778},
    "wq-brmson": {"test": 2032, "train": 2834, "val": 755, "devtest": 189},
    "trec-qa": {"test": 694, "train": 1486},
    "trec-brmson": {"test": 430, "train": 430, "large-train": 1704, "large-test": 766},
    "squad-qa": {"test": 10570},
    "nq-open": {"test": 1769, "dev": 1800},
    "beir-arguana": {"test": 1406}, "beir-fiqa": {"test": 648}, "beir-nfcorpus": {"test": 323},
    "beir-nq": {"test": 3452}, "beir-scidocs": {"test": 1000}, "beir-trec-covid": {"test": 50},
    "msmarco-dev": {"test": 6980}, "trec-dl-2019": {"test": 43}, "trec-dl-2020": {"test": 54},
    "vaswani": {"test": 93}, "cranfield": {"test": 225}, "cisi": {"test": 76},
    "cmrc2018": {"test": 3219, "train": 1002}, "drcd": {"test": 3493, "train": 3524},
    "squad-open": {"train": 7513, "dev": 706, "test": 2351}, "squad-open-ir": {"train": 7513, "dev": 706, "test": 2351},
    "scifact": {"test": 300},
}
DOCS = {"vaswani": 11429, "cranfield": 1400, "cisi": 1460, "cmrc2018": 1104, "drcd": 2000, "squad-open": 2067, "squad-open-ir": 2067, "scifact": 5183}
JUDGMENTS = {"squad-open-ir": 2351, "beir-fiqa": 1706, "beir-trec-covid": 66334, "msmarco-dev": 7437, "trec-dl-2019": 9260, "trec-dl-2020": 11386,
             "vaswani": 2083, "cranfield": 1612, "cisi": 3114}


@pytest.fixture(scope="module")
def small(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("small")
    cfg = load_config(["configs/profiles/small.yaml"], overrides={
        "results_dir": str(root / "results"),
        "data": {"cache_dir": str(root / "cache"), "mirror": str(shared_data), "offline": True}})
    metas, seconds = {}, {}
    for key in EXPECTED:
        t0 = time.perf_counter()
        out = root / "results" / "small" / "data" / key
        out.mkdir(parents=True)
        metas[key] = prepare(key, cfg["datasets"][key], cfg, out)
        seconds[key] = time.perf_counter() - t0
    return cfg, root, metas, seconds


@pytest.fixture(autouse=True)
def _in_repo(repo, monkeypatch):
    monkeypatch.chdir(repo)  # config paths (configs/profiles/small.yaml) are repo-relative


def test_every_small_dataset_matches_the_manifest(small):
    cfg, root, metas, seconds = small
    assert set(EXPECTED) | {"smoke", "smoke-ir"} == set(cfg["datasets"]), "a small dataset is not covered by this test"
    for key, splits in EXPECTED.items():
        folder = root / "results" / "small" / "data" / key
        for split, n in splits.items():
            assert len(store.read_queries(folder, split)) == n, (key, split)
        assert metas[key]["documents"] == DOCS.get(key, 0), key
        if key in JUDGMENTS:
            assert sum(len(r) for r in store.read_qrels(folder / store.QRELS).values()) == JUDGMENTS[key], key
    assert sum(seconds.values()) < 45, seconds


def test_known_issues_are_counted_not_raised(small):
    _, _, metas, _ = small
    cran = metas["cranfield"]["issues"]
    assert cran["relevance-code"]["count"] == 225 and cran["query-numbering"]["count"] == 223
    assert metas["cisi"]["issues"]["unjudged-topics"]["count"] == 36
    assert metas["trec-dl-2020"]["issues"]["test"]["unjudged-topics"]["count"] == 146
    assert "issues" not in metas["vaswani"] and "issues" not in metas["nq-qa"]


def test_qa_lists_keep_answers_and_canonical_ids(small):
    _, root, metas, _ = small
    data = root / "results" / "small" / "data"
    trec = store.read_queries(data / "trec-qa", "test")
    assert trec[0].answers and "\\s" in trec[0].answers[0]  # regex answers kept verbatim
    tqa = store.read_queries(data / "tqa-qa", "test")
    assert all(q.answers for q in tqa)
    assert metas["nq-qa"]["canonical_ids"]["test"] == "dpr-w100/natural-questions/test"
    assert metas["wq-brmson"]["canonical_ids"]["train"] == "harness:webquestions/brmson-trainmodel"
    # CMRC / DRCD: each question's gold paragraph is in the corpus and the qrels point at it
    docs = {d.id for d in store.iter_corpus(data / "drcd")}
    qrels = store.read_qrels(data / "drcd" / store.QRELS)
    assert all(set(qrels[q.id]) <= docs for q in store.read_queries(data / "drcd", "test"))


def test_subset_of_a_real_corpus_is_seeded_and_recorded(small, tmp_path):
    cfg, *_ = small
    dcfg = {**cfg["datasets"]["drcd"], "splits": {"test": "test"},
            "subset": {"queries": {"test": 300}, "documents": 600, "hard_negatives": 2, "seed": 5}}
    m1 = prepare("drcd", dcfg, cfg, tmp_path / "a")
    m2 = prepare("drcd", dcfg, cfg, tmp_path / "b")
    assert m1["subset"]["doc_ids"] == m2["subset"]["doc_ids"] and m1["documents"] == 600
    docs = {d.id for d in store.iter_corpus(tmp_path / "a")}
    test = store.read_queries(tmp_path / "a", "test")
    assert len(test) == 300 and all(q.gold[0] in docs for q in test)
    assert m1["subset"]["gold"] >= 1 and m1["subset"]["hard_negatives"] >= 1 and m1["subset"]["missing_required"] == 0


def test_offline_file_not_in_mirror_names_url_and_mirror_setting(small, tmp_path):
    cfg, *_ = small
    dcfg = {"id": "harness:nq-open/train", "family": "qa-list", "card": "nq-open", "splits": {"train": "train"}}
    with pytest.raises(DataError) as exc:
        prepare("nq-open", dcfg, cfg, tmp_path / "x")
    assert "NQ-open.train.jsonl" in str(exc.value) and "https://" in str(exc.value) and "HARNESS_DATA_MIRROR" in str(exc.value)


def test_unknown_card_split_is_a_config_error(small, tmp_path):
    cfg, *_ = small
    with pytest.raises(ConfigError, match="card 'dpr-nq' has no split 'tset'"):
        prepare("nq-qa", {**cfg["datasets"]["nq-qa"], "splits": {"test": "tset"}}, cfg, tmp_path / "x")


def test_decontam_over_the_small_profile(small):
    cfg, root, _, _ = small
    train, test = dreport.plan(cfg)
    assert {s.name for s in train} >= {"squad-open.train", "wq-qa.train", "wq-brmson.train", "trec-qa.train", "trec-brmson.train"}
    # the test side is LightRetriever's own evaluation sets (BEIR, MS MARCO dev / TREC DL, the C-MTEB stand-ins),
    # not DPR's QA test lists: a training set is stripped only of what LightRetriever is evaluated on
    assert len(test) >= 12 and {"scifact.test", "msmarco-dev.test", "cmrc2018.test", "drcd.test"} <= {s.name for s in test}
    assert not {s.name for s in test} & {"squad-qa.test", "nq-qa.test", "squad-open.test"}
    out = root / "results" / "small" / "decontam"
    meta = stage.run([(s.name, s.path(cfg)) for s in train], [(s.name, s.path(cfg)) for s in test], out,
                     k=cfg["decontam"]["k"], table7_per_set=5)
    counts = {n: (v["original"], v["duplicates"]) for n, v in meta["train"].items()}
    assert counts["squad-open.train"] == (7513, 1)   # "What is PPP?" ~ MS MARCO dev "what is ppp"
    assert counts["wq-qa.train"] == (3778, 0)
    assert counts["trec-qa.train"] == (1486, 0)
    assert counts["cmrc2018.train"] == (1002, 0)
    assert counts["drcd.train"] == (3524, 0)
    by_test = dreport.duplicates_by_test_set(out / "duplicates.jsonl")
    assert by_test == {("squad-open.train", "msmarco-dev.test"): 1}
    md = root / "results" / "tables" / "lightretriever" / "6-measured.md"
    paths = dreport.render(cfg, out, md)
    text = md.read_text(encoding="utf-8")
    assert "Quora Duplicates Triples | 101,762 | 97,011 | 4,751" in text  # the published table beside ours
    assert "| squad-open.train | `harness:squad-open (train)` | 7,513 | 7,512 | 1 |" in text
    assert "not LightRetriever's 23 sets" in text
    t7 = paths[2].read_text(encoding="utf-8")
    assert "What is PPP?" in t7 and "what is ppp" in t7


def test_decontam_config_errors(small):
    cfg, *_ = small
    bad = {**cfg, "decontam": {**cfg["decontam"], "train": ["nope:train"]}}
    with pytest.raises(ConfigError, match=r"decontam.train\[0\]: unknown dataset 'nope'"):
        dreport.plan(bad)
    bad = {**cfg, "decontam": {"train": ["wq-qa:test"], "test": ["wq-qa"]}}
    with pytest.raises(ConfigError, match="both a training and a test set"):
        dreport.plan(bad)
    from harness import plan as hplan

    job = hplan.get(cfg).job("decontam", "decontam")  # an ordinary plan job: its inputs, the query sets' datasets
    assert {"data_squad-open", "data_beir-fiqa"} <= set(job.inputs) and job.keys == ("decontam",)
    assert hplan.output_ref(job) == hplan.Ref("decontam", "decontam", None)


def test_snakemake_dry_run_of_the_decontam_target(repo, tmp_path):
    r = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "--configfile", "configs/profiles/small.yaml", "-n",
                        "decontam_tables", "lightretriever_table6", "--config", f"results_dir={tmp_path}"],
                       cwd=repo, capture_output=True, text=True, timeout=300, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "rule decontam:" in out and "rule decontam_report:" in out
    assert f"{tmp_path}/tables/lightretriever/6.md" in out and f"{tmp_path}/tables/lightretriever/6-measured.md" in out


@pytest.mark.slow
def test_snakemake_runs_decontam_on_small(repo, tmp_path, shared_data):
    env = {**__import__("os").environ, "HARNESS_DATA_MIRROR": str(shared_data)}
    r = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "--cores", "2", "--configfile",
                        "configs/profiles/small.yaml", "--config", f"results_dir={tmp_path}", "--", "decontam_tables"],
                       cwd=repo, capture_output=True, text=True, timeout=1200, env=env, check=False)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    meta = json.loads((tmp_path / "small" / "decontam" / "meta.json").read_text())
    assert meta["train"]["squad-open.train"]["duplicates"] == 1
    assert (tmp_path / "tables" / "lightretriever" / "7-measured.csv").exists()
