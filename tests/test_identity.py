"""Job identity: what a setting's change re-runs. Each case here was a bug (a setting hashed by the
wrong job, or missing from the list that decides whether a variant reuses a model)."""
from __future__ import annotations

import copy

from harness import plan as hp
from harness.config import load_config


def fresh(cfg):
    hp._cached.cache_clear()
    return hp.get(cfg)


def moved(cfg, change):
    """(stage, id) of the concrete jobs whose hash moves when ``change(cfg)`` is applied."""
    a = fresh(cfg)
    other = copy.deepcopy(cfg)
    change(other)
    b = fresh(other)
    out = set()
    for stage in hp.STAGES:
        for j in a.concrete(stage):
            if j.dataset is None or (stage, j.id, j.dataset) in b.jobs or b.jobs.get((stage, j.id, None)):
                if a.hash(j) != b.hash(b.job(stage, j.id, j.dataset)):
                    out.add((stage, j.id))
    return out


def test_densephrases_nprobe_moves_the_search_not_the_phrase_index():
    cfg = load_config([])
    a = fresh(cfg)
    index_job = a.job("index", "densephrases", "smoke")
    assert "methods.densephrases.nprobe" not in index_job.keys
    changed = moved(cfg, lambda c: c["methods"]["densephrases"].__setitem__("nprobe", 7))
    assert ("search", "densephrases") in changed and ("measure", "densephrases.speed") in changed
    assert not any(stage == "index" for stage, _ in changed), changed
    assert not any(stage == "train" and jid != "densephrases.qs" for stage, jid in changed), changed


def test_a_variant_that_differs_only_in_precision_trains_its_own_model():
    """BPR train variants and SVDR ablations reuse the main model when their training settings equal
    it; grad_accum, grad_clip and precision were missing from that comparison."""
    from harness.methods.bpr.settings import model_id as bpr_model_id
    from harness.methods.vdr.jobs import model_id as vdr_model_id

    cfg = load_config([])
    for key, value in (("precision", "bf16"), ("grad_accum", 2), ("grad_clip", 0.5)):
        c = copy.deepcopy(cfg)
        c["methods"]["bpr"]["train_variants"] = {"same": {}, "other": {key: value}}
        c["methods"]["bpr"]["train_variant_overrides"] = {}
        assert bpr_model_id(c, "same") == "bpr"
        assert bpr_model_id(c, "other") == "bpr.other", key
        c["methods"]["svdr"]["ablations"] = {"same": {}, "other": {key: value}}
        c["methods"]["svdr"]["ablation_overrides"] = {}
        assert vdr_model_id(c, "svdr", "same") == "svdr"
        assert vdr_model_id(c, "svdr", "other") != "svdr", key


def test_every_schema_field_that_changes_a_model_is_compared_for_variant_reuse():
    """TRAIN_KEYS is derived from the schema (harness.methods.base.model_fields), not listed."""
    import importlib
    from pathlib import Path

    from harness.io import read_yaml
    from harness.methods.base import NOT_TRAINING

    bpr, qcr, vdr = (importlib.import_module(f"harness.methods.{m}.settings") for m in ("bpr", "qcr", "vdr"))
    for mod in (bpr, qcr, vdr):
        props = read_yaml(Path(mod.__file__).parent / mod.SCHEMA)["properties"]
        assert set(mod.TRAIN_KEYS) == set(props) - set(NOT_TRAINING) - set(mod.NOT_MODEL)
        assert {"precision", "grad_accum", "grad_clip", "backbone"} <= set(mod.TRAIN_KEYS) or mod is qcr
