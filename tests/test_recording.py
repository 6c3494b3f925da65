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
    # a key the config leaves out (its schema default is used) is not a stale input
    assert p.unhashed_reads(job, {"methods.dpr.no_such_setting"}) == []


def test_finding_a_section_is_not_a_read_of_it():
    from harness.methods.base import Context

    view, reads = recording(CFG)
    assert Context(view, "dpr").mcfg["lr"] == 2e-5
    assert reads == {"methods.dpr.lr"}


def test_merged_layers_record_only_what_is_read_afterwards():
    from harness.recording import merged

    view, reads = recording(CFG)
    s = merged({"lr": 1.0, "warmup": 0.1, "nested": {"a": 0, "c": 3}}, view["methods"]["dpr"], depth=1)
    assert reads == set()
    assert s["warmup"] == 0.1 and s["lr"] == 2e-5 and s["nested"]["c"] == 3 and s["nested"]["a"] == 1
    assert reads == {"methods.dpr.warmup", "methods.dpr.lr", "methods.dpr.nested.c", "methods.dpr.nested.a"}
    over = merged(s, {"lr": 5.0})
    assert over["lr"] == 5.0 and "methods.dpr.lr" in reads
    assert merged({"a": 1}, None, {"b": 2}) == {"a": 1, "b": 2}
    # the path is the first recording layer's (a variant's own settings read as the section's keys)
    v = merged(view["methods"]["bm25"], view["methods"]["bm25"].get("nothing"), {"k1": 1.2})
    assert v["k1"] == 1.2 and "methods.bm25.k1" in reads
    # depth: one level merged key by key, the next replaced
    d = merged({"a": {"x": {"p": 1, "q": 2}, "y": 1}}, {"a": {"x": {"p": 5}}}, depth=1)
    assert d == {"a": {"x": {"p": 5}, "y": 1}}
    base = {"l": [1, 2]}
    copy_ = merged(base)
    copy_["l"].append(3)
    assert base == {"l": [1, 2]}  # deep copies: the defaults are never mutated through a result
