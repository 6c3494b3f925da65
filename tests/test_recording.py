"""The recording view of the config (harness.recording): what a step reads, against hand-checked cases."""
from __future__ import annotations

import copy
import json
import pickle

from harness.recording import covered, plain, recording

CFG = {"seed": 13, "methods": {"dpr": {"lr": 2e-5, "epochs": 1, "index": "faiss:Flat", "nested": {"a": 1, "b": 2}},
                               "bm25": {"k1": 0.9}}, "evaluate": {"depth": 100}}


def test_leaf_reads_are_recorded_by_their_dotted_key():
    view, reads = recording(CFG)
    m = view["methods"]["dpr"]
    assert m["lr"] == 2e-5 and m.get("epochs") == 1 and m.get("missing", 7) == 7
    assert "index" in m and m["nested"]["a"] == 1
    assert view["seed"] == 13
    assert reads == {"methods.dpr.lr", "methods.dpr.epochs", "methods.dpr.missing", "methods.dpr.index",
                     "methods.dpr.nested.a", "seed"}


def test_copying_or_iterating_a_section_reads_all_of_it():
    for how in (lambda m: {**m}, dict, lambda m: list(m.items()), lambda m: [k for k in m], lambda m: json.dumps(m),
                copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m)), lambda m: m.copy()):
        view, reads = recording(CFG)
        out = how(view["methods"]["dpr"])
        assert reads == {"methods.dpr.lr", "methods.dpr.epochs", "methods.dpr.index", "methods.dpr.nested.a",
                         "methods.dpr.nested.b"}, how
        assert out  # the copy still has the values


def test_a_view_is_a_dict_with_the_same_values_and_plain_reads_record_nothing():
    view, reads = recording(CFG)
    assert isinstance(view, dict) and isinstance(view["methods"], dict)
    assert json.loads(json.dumps(plain(view))) == CFG and reads == set()
    assert plain(CFG) is CFG


def test_a_read_is_covered_by_its_own_key_or_one_above_it():
    hashed = {"methods.dpr.nested", "seed"}
    assert covered("methods.dpr.nested.a", hashed) and covered("seed", hashed)
    assert not covered("methods.dpr", hashed)  # a whole section read is not covered by one of its keys
    assert not covered("methods.dpr.nest", hashed)


def test_the_plan_names_reads_no_hash_covers():
    """dpr's index job hashes methods.dpr.index and, through the model, the training keys: a read of
    one of those is covered; evaluate.depth (hashed by the search job only) is not; runtime keys never are."""
    from harness import plan as hplan
    from harness.config import load_config

    cfg = load_config([])
    p = hplan.get(cfg)
    job = p.job("index", "dpr", "smoke")
    reads = {"methods.dpr.index", "methods.dpr.lr", "seed", "datasets.smoke.id", "methods.dpr.torch_threads",
             "evaluate.depth", "results_dir"}
    assert p.unhashed_reads(job, reads) == ["evaluate.depth"]
