"""Datasets: the smoke fixture, squad-open (real SQuAD dev via the mirror), BEIR SciFact, errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.config import load_config
from harness.datasets import prepare, store
from harness.errors import ConfigError, DataError
from harness.datasets.answers import has_answer


def _cfg(tmp_path, mirror=None, **over):
    data = {"cache_dir": str(tmp_path / "cache"), "mirror": str(mirror) if mirror else None, "offline": True}
    return load_config([], overrides={"results_dir": str(tmp_path / "results"), "data": data, **over})


def test_smoke_fixture_is_what_the_generator_writes(repo):
    r = subprocess.run([sys.executable, str(repo / "scripts" / "make_smoke_fixture.py"), "--check"])
    assert r.returncode == 0


def test_smoke_fixture_answers_are_in_gold_passages(tmp_path):
    cfg = _cfg(tmp_path)
    prepare("smoke", cfg["datasets"]["smoke"], cfg, tmp_path / "smoke")
    docs = {d.id: d for d in store.iter_corpus(tmp_path / "smoke")}
    train = store.read_queries(tmp_path / "smoke", "train")
    test = store.read_queries(tmp_path / "smoke", "test")
    assert (len(docs), len(train), len(test)) == (122, 187, 63)
    for q in train + test:
        assert any(has_answer(q.answers, docs[g].text) for g in q.gold), q
    # split by entity (title): no test passage title appears among training gold titles
    assert not {docs[g].title for q in test for g in q.gold} & {docs[g].title for q in train for g in q.gold}
    qrels = store.read_qrels(tmp_path / "smoke" / store.QRELS)
    assert set(qrels) == {q.id for q in test}


def test_squad_open_from_mirror(tmp_path, shared_data):
    cfg = _cfg(tmp_path, mirror=shared_data, datasets={"squad-open": {
        "id": "harness:squad-open", "family": "squad-open", "split_seed": 2024,
        "split_articles": {"train": 32, "dev": 4, "test": 12}}})
    meta = prepare("squad-open", cfg["datasets"]["squad-open"], cfg, tmp_path / "sq")
    assert meta["documents"] == 2067
    assert sum(meta["queries"].values()) == 10570
    titles = meta["split_articles"]
    assert not set(titles["train"]) & set(titles["test"])
    assert len(titles["test"]) == 12
    docs = {d.id: d for d in store.iter_corpus(tmp_path / "sq")}
    test = store.read_queries(tmp_path / "sq", "test")
    # SQuAD answers are spans of their paragraph
    assert sum(has_answer(q.answers, docs[q.gold[0]].text) for q in test) / len(test) > 0.97
    # deterministic
    again = prepare("squad-open", cfg["datasets"]["squad-open"], cfg, tmp_path / "sq2")
    assert again["split_articles"] == meta["split_articles"]


def test_beir_scifact_from_mirror(tmp_path, shared_data):
    cfg = _cfg(tmp_path, mirror=shared_data, datasets={"scifact": {"id": "beir/scifact/test", "family": "beir", "name": "scifact"}})
    meta = prepare("scifact", cfg["datasets"]["scifact"], cfg, tmp_path / "sf")
    assert meta["documents"] == 5183 and meta["queries"] == {"test": 300} and meta["judgments"] == 339


def test_corrupted_mirror_file_is_a_clear_error(tmp_path, shared_data, monkeypatch):
    monkeypatch.delenv("HARNESS_DATA_MIRROR", raising=False)   # the test's mirror, not the shell's
    bad = tmp_path / "mirror" / "squad"
    bad.mkdir(parents=True)
    (bad / "dev-v1.1.json").write_bytes((shared_data / "squad" / "dev-v1.1.json").read_bytes()[:1000])
    cfg = _cfg(tmp_path, mirror=tmp_path / "mirror", datasets={"squad-open": {"id": "harness:squad-open", "family": "squad-open"}})
    with pytest.raises(DataError, match="dev-v1.1.json"):
        prepare("squad-open", cfg["datasets"]["squad-open"], cfg, tmp_path / "sq")


def test_damaged_mirror_corpus_is_an_error_not_a_fallback(tmp_path, shared_data, monkeypatch):
    """A truncated BEIR corpus in a mirror stops with its checksum, never falls back to the official
    zip through ir_datasets (a fallback is for an absent file only)."""
    import shutil

    from harness.datasets import beir

    monkeypatch.delenv("HARNESS_DATA_MIRROR", raising=False)
    monkeypatch.setattr(beir, "_corpus_from_ir_datasets", lambda name: pytest.fail("fell back to ir_datasets"))
    mirror = tmp_path / "mirror"
    for f in beir.remote_files("scifact").values():
        (mirror / f.in_mirror).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_data / f.in_mirror, mirror / f.in_mirror)
    corpus = mirror / beir.remote_files("scifact")["corpus"].in_mirror
    corpus.write_bytes(corpus.read_bytes()[:5000])
    cfg = _cfg(tmp_path, mirror=mirror, datasets={"scifact": {"id": "beir/scifact/test", "family": "beir", "name": "scifact"}})
    cfg["data"]["offline"] = False
    with pytest.raises(DataError, match=r"mirror file .*corpus.jsonl.gz is corrupted") as exc:
        prepare("scifact", cfg["datasets"]["scifact"], cfg, tmp_path / "sf")
    assert not isinstance(exc.value, beir.Unavailable) and "sha256" in str(exc.value)


def test_offline_without_mirror_names_file_url_and_setting(tmp_path, monkeypatch):
    monkeypatch.delenv("HARNESS_DATA_MIRROR", raising=False)
    cfg = _cfg(tmp_path, datasets={"squad-open": {"id": "harness:squad-open", "family": "squad-open"}})
    with pytest.raises(DataError) as exc:
        prepare("squad-open", cfg["datasets"]["squad-open"], cfg, tmp_path / "sq")
    msg = str(exc.value)
    assert "squad/dev-v1.1.json" in msg and "https://" in msg and "HARNESS_DATA_MIRROR" in msg


def test_unknown_family_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown dataset family 'squad-opne'.*squad-open"):
        _cfg(tmp_path, datasets={"x": {"id": "harness:x", "family": "squad-opne"}})


def test_malformed_qrels_line(tmp_path):
    p = tmp_path / "qrels.txt"
    p.write_text("q1 0 d1 1\nq2 0 d2\n")
    with pytest.raises(DataError, match=r"qrels.txt:2"):
        store.read_qrels(p)


def test_cli_error_is_one_line_and_nonzero(tmp_path):
    r = subprocess.run([sys.executable, "-m", "harness", "data", "--dataset", "nope", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("error: unknown dataset 'nope'")
    assert "Traceback" not in r.stderr and not (tmp_path / "x").exists()


def test_truncated_corpus_line_names_file_and_line(tmp_path):
    d = tmp_path / "ds"
    d.mkdir()
    (d / store.CORPUS).write_text(json.dumps({"id": "a", "title": "", "text": "x"}) + "\n{\"id\": \"b\", \"te\n")
    with pytest.raises(DataError, match=r"corpus.jsonl:2"):
        list(store.iter_corpus(d))


@pytest.mark.parametrize("exc, kind, words", [
    (ImportError("This dataset requires ijson. Run 'pip install ijson'"), "DependencyError", "requires ijson"),
    (ConnectionError("Failed to establish a new connection"), "DataError", "IR_DATASETS_HOME"),
    (OSError("[Errno -3] Temporary failure in name resolution"), "DataError", "its cache"),
])
def test_an_ir_datasets_failure_is_one_line_naming_the_id_the_cache_and_the_fix(monkeypatch, exc, kind, words):
    import ir_datasets

    from harness.datasets import irds
    from harness.errors import HarnessError

    class Fake:
        def has_qrels(self):
            return False

        def queries_iter(self):
            yield from ()
            raise exc

    monkeypatch.setattr(ir_datasets, "load", lambda name: Fake())
    ds = irds.load("dpr-w100/natural-questions/train")
    assert ds.has_qrels() is False
    with pytest.raises(HarnessError) as got:
        list(ds.queries_iter())
    assert type(got.value).__name__ == kind
    msg = str(got.value)
    assert "dpr-w100/natural-questions/train" in msg and words in msg and "\n" not in msg.split("fix")[0]


def test_a_hub_backbone_that_cannot_be_had_is_one_line(monkeypatch, tmp_path):
    """Offline with an empty HF cache: the backbone, the model id, the cache and the fix, no traceback."""
    from harness.errors import DependencyError
    from harness.models import backbones

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    cfg = {"backbones": {"remote": {"source": "hub:nobody-has/this-model-xyz"}}}
    with pytest.raises(DependencyError) as got:
        backbones.load_tokenizer(cfg, "remote")
    msg = str(got.value)
    assert "backbone 'remote'" in msg and "nobody-has/this-model-xyz" in msg and str(tmp_path / "hf") in msg
    assert "huggingface-cli download" in msg


def _read_through_irds(tmp_path, repo, code: str, *args: str):
    """Run ``code`` in a fresh process (ir_datasets fixes its home when first imported) over the
    fabricated cache ``tmp_path/irds``, with every socket refused (so a loader that wants a download
    fails instead of fetching one): its last line of output, parsed as JSON."""
    import os

    offline = ("import socket\n"
               "def _refused(*a, **k):\n    raise OSError('network refused in this test')\n"
               "socket.socket.connect = _refused\nsocket.create_connection = _refused\n")
    env = {**os.environ, "IR_DATASETS_HOME": str(tmp_path / "irds")}
    r = subprocess.run([sys.executable, "-c", offline + code, *args], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_beir_family_reads_a_fabricated_ir_datasets_cache(tmp_path, repo):
    """Every BEIR corpus the profiles read through ir_datasets (small's, and the paper profile's when
    no mirror holds it), from a tiny fabricated cache: the source zip at the path ir_datasets's
    downloads.json gives it, offline. A missing extra or a changed loader fails here, not on a cluster."""
    import zipfile
    from pathlib import Path

    import ir_datasets

    profiles = (["configs/profiles/small.yaml"], ["configs/profiles/paper.yaml"])
    names = sorted({d.get("name", k) for over in profiles
                    for k, d in load_config([repo / o for o in over])["datasets"].items() if d.get("family") == "beir"})
    assert "scifact" in names and len(names) >= 5
    downloads = json.loads((Path(ir_datasets.__file__).parent / "etc" / "downloads.json").read_text())["beir"]
    meta = {"url": "u", "pubmed_id": "1", "authors": ["a"], "year": 2000, "cited_by": [], "references": [],
            "tags": [], "stance": ""}
    docs = [{"_id": "d1", "title": "T1", "text": "a passage about cells", "metadata": meta},
            {"_id": "d2", "title": "", "text": "another passage", "metadata": meta}]
    for name in names:
        target = tmp_path / "irds" / "beir" / downloads[name]["cache_path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(target, "w") as z:
            z.writestr(f"{name}/corpus.jsonl", "".join(json.dumps(d) + "\n" for d in docs))
            z.writestr(f"{name}/queries.jsonl", json.dumps({"_id": "q1", "text": "cells?", "metadata": {}}) + "\n")
            z.writestr(f"{name}/qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    code = ("import json, sys\nfrom harness.datasets.beir import _corpus_from_ir_datasets\n"
            "print(json.dumps({n: [[d.id, d.title, d.text] for d in _corpus_from_ir_datasets(n)] "
            "for n in sys.argv[1:]}))")
    got = _read_through_irds(tmp_path, repo, code, *names)
    for name in names:
        assert [d[0] for d in got[name]] == ["d1", "d2"] and got[name][0][2] == "a passage about cells", name


def test_the_dpr_w100_family_reads_a_fabricated_ir_datasets_cache(tmp_path, repo):
    """The paper profile's first data job's loaders: DPR's 21M-passage TSV and NQ's training file (a
    JSON list streamed with ijson, the extra the paper profile needs), fabricated tiny at the paths
    ir_datasets's downloads.json gives them, read offline through harness.datasets.dpr_wiki."""
    import gzip

    home = tmp_path / "irds" / "dpr-w100"
    home.mkdir(parents=True)
    with gzip.open(home / "docs.tsv.gz", "wt", encoding="utf-8") as f:
        f.write("id\ttext\ttitle\n1\tAaron is a prophet\tAaron\n2\tAn unrelated passage\tOther\n")
    ctx = {"title": "Aaron", "text": "Aaron is a prophet", "score": 1000, "title_score": 1, "passage_id": "1"}
    neg = {"title": "Other", "text": "An unrelated passage", "score": 10, "title_score": 0, "passage_id": "2"}
    with gzip.open(home / "nq-train.json.gz", "wt", encoding="utf-8") as f:
        json.dump([{"dataset": "nq_train_psgs_w100", "question": "who is aaron", "answers": ["a prophet"],
                    "positive_ctxs": [ctx], "negative_ctxs": [], "hard_negative_ctxs": [neg]}], f)
    code = ("import json\nfrom harness.datasets.dpr_wiki import corpus_docs, irds_split\n"
            "qs, negs = irds_split('dpr-w100/natural-questions/train')\n"
            "print(json.dumps([[[d.id, d.title, d.text] for d in corpus_docs()], "
            "[[q.text, q.answers, q.gold] for q in qs], negs]))")
    docs, queries, negatives = _read_through_irds(tmp_path, repo, code)
    assert docs == [["1", "Aaron", "Aaron is a prophet"], ["2", "Other", "An unrelated passage"]]
    assert queries == [["who is aaron", ["a prophet"], ["1"]]] and list(negatives.values()) == [["2"]]


def test_the_msmarco_passage_family_reads_a_fabricated_ir_datasets_cache(tmp_path, repo):
    """The paper profile's MS MARCO passage collection (LightRetriever, QCR) through ir_datasets, from a
    fabricated collectionandqueries.tar.gz at the path its downloads.json gives, offline."""
    import io
    import tarfile

    home = tmp_path / "irds" / "msmarco-passage"
    home.mkdir(parents=True)
    with tarfile.open(home / "collectionandqueries.tar.gz", "w:gz") as tar:
        for name, text in (("collection.tsv", "0\tThe presence of communication\n1\tManhattan project\n"),
                           ("queries.train.tsv", "5\twhat is x\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    code = ("import json\nfrom harness.datasets.msmarco import irds_docs\n"
            "print(json.dumps([[d.id, d.text] for d in irds_docs()]))")
    assert _read_through_irds(tmp_path, repo, code) == [["0", "The presence of communication"],
                                                        ["1", "Manhattan project"]]


def test_every_paper_dataset_prepares_or_fails_in_one_line_offline(tmp_path, repo, monkeypatch, shared_data):
    """Each dataset of the paper profile, prepared with the mirror and the network refused (sockets
    raise): it is prepared, or it stops with one harness error of one line naming what to fetch —
    never a traceback of requests or ir_datasets."""
    import socket

    from harness.errors import HarnessError

    def refused(*a, **k):
        raise OSError("[Errno 101] Network is unreachable (network refused in this test)")

    monkeypatch.setattr(socket, "create_connection", refused)
    monkeypatch.setattr(socket.socket, "connect", refused)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(repo)
    cfg = load_config([repo / "configs" / "profiles" / "paper.yaml"], overrides={
        "results_dir": str(tmp_path / "results"),
        "data": {"cache_dir": str(tmp_path / "cache"), "mirror": str(shared_data), "offline": False}})
    outcomes = {}
    for key, dcfg in cfg["datasets"].items():
        out = tmp_path / "results" / "paper" / "data" / key
        out.mkdir(parents=True)
        try:
            prepare(key, dcfg, cfg, out)
            outcomes[key] = "prepared"
        except HarnessError as exc:
            msg = str(exc)
            assert "\n" not in msg and "fix" in msg, (key, msg)
            outcomes[key] = type(exc).__name__
    # smoke from the package, SciFact from the mirror; the rest need ir_datasets' downloads (DPR's
    # Wikipedia, MS MARCO's collection, BEIR's corpora)
    assert outcomes["smoke"] == outcomes["scifact"] == "prepared" and outcomes["nq"] == "DataError"
    assert set(outcomes) == set(cfg["datasets"])
