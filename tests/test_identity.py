"""Job identity: what a setting's change re-runs. Each case here was a bug (a setting hashed by the
wrong job, or missing from the list that decides whether a variant reuses a model)."""
from __future__ import annotations

import copy

from harness import plan as hp
from harness.config import load_config


def fresh(cfg):
    hp._cached.cache_clear()
    return hp.get(cfg)


def moved(cfg, change, method=None, directly=False, base=None):
    """(stage, id) of the concrete jobs (of ``method``, or all) whose hash moves when ``change(cfg)`` is
    applied; ``directly``: only those whose inputs' hashes do not move (the jobs that hash the
    changed setting themselves). ``base``: ``cfg``'s plan, built by the caller (once for many changes)."""
    a = base or fresh(cfg)
    other = copy.deepcopy(cfg)
    change(other)
    b = fresh(other)
    out = set()
    for stage in hp.STAGES:
        for j in a.concrete(stage):
            if method is not None and j.method != method:
                continue
            jb = b.jobs.get((stage, j.id, j.dataset)) or (b.jobs.get((stage, j.id, None)) and b.job(stage, j.id, j.dataset))
            if jb and a.hash(j) != b.hash(jb) and not (directly and a.input_hashes(j) != b.input_hashes(jb)):
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
        c["methods"]["bpr"]["variants"] = {"same": {}, "other": {key: value}}
        c["methods"]["bpr"]["variant_overrides"] = {}
        assert bpr_model_id(c, "same") == "bpr"
        assert bpr_model_id(c, "other") == "bpr.other", key
        c["methods"]["svdr"]["variants"] = {"same": {}, "other": {key: value}}
        c["methods"]["svdr"]["variant_overrides"] = {}
        assert vdr_model_id(c, "svdr", "same") == "svdr"
        assert vdr_model_id(c, "svdr", "other") != "svdr", key


def test_every_schema_field_that_changes_a_model_is_compared_for_variant_reuse():
    """TRAIN_KEYS is derived from the schema (the fields whose x-affects lists model), not listed."""
    import importlib
    from pathlib import Path

    from harness.io import read_yaml

    bpr, qcr, vdr = (importlib.import_module(f"harness.methods.{m}.settings") for m in ("bpr", "qcr", "vdr"))
    for mod in (bpr, qcr, vdr):
        props = read_yaml(Path(mod.__file__).parent / mod.SCHEMA)["properties"]
        assert set(mod.TRAIN_KEYS) == {k for k, p in props.items() if "model" in p["x-affects"]}
        assert {"precision", "grad_accum", "grad_clip", "backbone"} <= set(mod.TRAIN_KEYS) or mod is qcr
        assert not {"index", "datasets", "device", "torch_threads"} & set(mod.TRAIN_KEYS)


# --------------------------------------------------------------------------------------------
# x-affects: each field of a section's schema says which artifacts it changes; jobs' keys are derived

PROFILES = {"smoke": [], "small": ["configs/profiles/small.yaml"], "paper": ["configs/profiles/paper.yaml"],
            "scale": ["configs/profiles/scale.yaml"]}
#: the stage whose jobs write an artifact named in x-affects (model.qs -> train, index.hash -> index)
STAGE_OF = {"model": "train", "index": "index", "search": "search", "measure": "measure"}
#: a stage no method section describes, judged as the stage whose settings its step uses: the
#: negatives job mines with a BM25 search (harness.negatives.mine calls bm25.search)
ACTS_AS = {"negatives": "search"}
ORDER = ("train", "index", "search", "measure")


def _sections():
    from harness.methods import METHODS, STEPS

    return [*METHODS, *STEPS]


def test_every_field_of_every_section_says_what_it_changes():
    """Each property has x-affects; each name it lists is an artifact its schema describes (or
    runtime), and each artifact described is changed by some field."""
    from harness.methods.base import ARTIFACTS, RUNTIME, _affects, _fragment

    for name in _sections():
        table = _affects(name)
        frag = _fragment(name)
        assert set(frag["properties"]) <= set(table), name
        described = set(frag.get(ARTIFACTS) or {})
        used = {t for tags in table.values() for t in tags} - {RUNTIME}
        assert used == described, f"{name}: described but changed by no field: {sorted(described - used)}"
        for field, tags in table.items():
            assert RUNTIME not in tags or tags == (RUNTIME,), f"{name}.{field}: runtime stands alone"
            assert all(t.split(".")[0] in STAGE_OF for t in tags if t != RUNTIME), (name, field, tags)


def test_a_field_without_x_affects_or_naming_an_unknown_artifact_fails():
    import pytest

    from harness.errors import ConfigError
    from harness.methods.base import schema_affects

    ok = {"x-artifacts": {"model": "m"}, "properties": {"lr": {"x-affects": ["model"]}, "device": {"x-affects": ["runtime"]}}}
    assert schema_affects(ok) == {"lr": ("model",), "device": ("runtime",)}
    with pytest.raises(ConfigError, match="lr does not say"):
        schema_affects({"x-artifacts": {"model": "m"}, "properties": {"lr": {"type": "number"}}})
    with pytest.raises(ConfigError, match="modle"):
        schema_affects({"x-artifacts": {"model": "m"}, "properties": {"lr": {"x-affects": ["modle"]}}})


def test_affects_narrows_map_fields_and_refuses_an_artifact_no_field_lists():
    import pytest

    from harness.errors import ConfigError
    from harness.methods.base import affects

    assert affects("bpr", "index.baseline", at={"dpr_baselines": "hnsw"}) == (
        "methods.bpr.baseline_train_size", "methods.bpr.dpr_baselines.hnsw")
    assert affects("lightretriever", "search", at={"instructions": "nq"})[:2] == (
        "methods.lightretriever.encode_precision", "methods.lightretriever.impact_scale")
    assert "methods.lightretriever.instructions.nq" in affects("lightretriever", "search", at={"instructions": "nq"})
    assert affects("reader", "measure.em") == ("reader.max_test_questions", "reader.systems", "reader.top_k")
    with pytest.raises(ConfigError, match="index.hsh"):
        affects("bpr", "index.hsh")


def test_each_job_hashes_only_fields_that_list_an_artifact_of_its_stage():
    """A job's own section keys are fields whose x-affects names an artifact of the job's stage: a
    search setting hashed by an index job (the nprobe bug) or a runtime setting hashed by a model
    (reader.device was) fails here."""
    from harness.methods import METHODS
    from harness.methods.base import _affects

    for profile, files in PROFILES.items():
        p = fresh(load_config(files))
        for job in p.jobs.values():
            prefix = f"methods.{job.method}." if job.method in METHODS else f"{job.method}."
            for key in job.keys:
                if not key.startswith(prefix):
                    continue
                field = key[len(prefix):].split(".")[0]
                nested = ".".join(key[len(prefix):].split(".")[:2])
                tags = _affects(job.method).get(nested) or _affects(job.method)[field]
                stages = {STAGE_OF[t.split(".")[0]] for t in tags if t != "runtime"}
                assert ACTS_AS.get(job.stage, job.stage) in stages, f"{profile}: {job.stage} job {job.id} hashes {key}, whose x-affects is {list(tags)}"


def _changed(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 1
    if isinstance(v, float):
        return v * 1.5 + 0.01
    return None


def test_a_field_moves_only_the_artifacts_it_lists():
    """For every scalar field the smoke config sets, the jobs whose hash moves by the change itself
    (not through an input) are jobs of the stages its x-affects names (nprobe moves searches, not
    the phrase index; precision moves models), and a field that lists no artifact moves none."""
    from harness.errors import ConfigError
    from harness.methods.base import _affects

    cfg = load_config([])
    base = fresh(cfg)
    checked = 0
    for name, sec in cfg["methods"].items():
        if not sec.get("enabled", True):
            continue
        table = _affects(name)
        for field, value in sec.items():
            new = _changed(value)
            if new is None or field not in table:
                continue
            try:
                got = moved(cfg, lambda c: c["methods"][name].__setitem__(field, new), name, directly=True, base=base)
            except (ConfigError, ValueError, KeyError):
                continue  # the changed value is not a legal setting of this field
            stages = {STAGE_OF[t.split(".")[0]] for t in table[field] if t != "runtime"}
            wrong = sorted((st, j) for st, j in got if ACTS_AS.get(st, st) not in stages)
            assert not wrong, f"methods.{name}.{field} (x-affects {list(table[field])}) moves {wrong}"
            checked += 1
    assert checked >= 40


def test_every_method_spells_its_variants_alike_and_an_old_spelling_names_the_new_one():
    """variants / variant_overrides / variant_datasets in every method with variants; BPR's
    train_variants and SVDR's ablations fail validation with the new key in the message."""
    import pytest

    from harness.errors import ConfigError
    from harness.methods.base import _fragment

    for name in ("bpr", "svdr", "qcr", "lightretriever", "densephrases"):
        props = _fragment(name)["properties"]
        assert {"variants", "variant_overrides"} <= set(props), name
        assert not {"train_variants", "ablations", "ablation_overrides", "train_variant_overrides"} & set(props)
    for name, old, new in (("bpr", "train_variants", "variants"), ("bpr", "train_variant_overrides", "variant_overrides"),
                           ("svdr", "ablations", "variants"), ("svdr", "ablation_datasets", "variant_datasets")):
        with pytest.raises(ConfigError, match=f"'{old}' \\(renamed: write '{new}'"):
            load_config([], overrides={"methods": {name: {old: {} if "datasets" not in old else []}}})


def test_qcr_uns_model_moves_with_its_own_backbone_and_its_query_generator():
    """QCR-uns. on generated queries (paper; rehearsal: the generator is a key of config backbones)
    read its variant backbone's definition and the generator without hashing them: a new generator
    would have left the model stale. The generator's settings join every QCR model's hash (the
    schema's rule for a field that affects the model); the generator's and Contriever's definitions
    only the model that reads them."""
    cfg = load_config(["configs/profiles/paper.yaml", "configs/profiles/rehearsal.yaml"])
    base = fresh(cfg)
    trains = {"qcr", "qcr.uns"}

    def train_moved(change):
        return {jid for stage, jid in moved(cfg, change, "qcr", directly=True, base=base) if stage == "train"} & trains

    assert "qcr.uns" in train_moved(lambda c: c["methods"]["qcr"]["generator"].__setitem__("max_new_tokens", 8))
    assert train_moved(lambda c: c["backbones"]["gemma-2-2b"].__setitem__("source", "config:qwen25-1b5")) == {"qcr.uns"}
    assert train_moved(lambda c: c["backbones"]["contriever"].__setitem__("tokenizer", "wordpiece-cased")) == {"qcr.uns"}
    assert base.unhashed_reads(base.job("train", "qcr.uns", None),
                               ["backbones.contriever.source", "backbones.gemma-2-2b.source",
                                "methods.qcr.generator.model"]) == []


def test_every_variant_job_hashes_its_own_variant_entry_or_reads_a_model_that_does():
    """A variant job reads ``methods.<m>.variants.<v>`` (variant_context). BPR's ``ref`` variant is BPR's
    own model, so no input's hash covered its entry, and its run job hashed only the shared search
    settings: the paper rehearsal's ``search bpr.ref on nq`` warned "read settings its hash does not
    cover: methods.bpr.variants.ref". Every variant job of the paper profile (and its rehearsal) now
    covers its entry, and a change to the ref entry moves that run and nothing of another variant."""
    from harness.recording import covered

    for files in (["configs/profiles/paper.yaml"], ["configs/profiles/paper.yaml", "configs/profiles/rehearsal.yaml"]):
        cfg = load_config(files)
        p = fresh(cfg)
        bad = [(j.stage, j.id, j.dataset) for j in p.closure().values()
               if (v := j.params.get("variant")) and v in (cfg["methods"].get(j.method, {}).get("variants") or {})
               and not covered(f"methods.{j.method}.variants.{v}", p.hashed_keys(j))]
        assert bad == [], (files, bad)
        assert p.unhashed_reads(p.job("search", "bpr.ref", "nq"), ["methods.bpr.variants.ref"]) == []
    ref_moved = moved(cfg, lambda c: c["methods"]["bpr"]["variants"]["ref"].__setitem__("n_candidates", 7), "bpr",
                      directly=True)
    assert ("search", "bpr.ref") in ref_moved and not any(j.startswith("bpr.") and j != "bpr.ref" for _, j in ref_moved)
