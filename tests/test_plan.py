"""Contract tests of the plan (harness/plan.py) over every registered method and every profile.

- every job's inputs resolve to a producing job, every system is written by one search job per
  dataset, a job's hash is stable and moves with each key it reads;
- every enabled method declares jobs; the matrices name only systems the plan produces (or that
  the table marks not run / pending); ``snakemake -n reproduce_all`` reaches every one of them;
- stale artifacts are refused: hashes cover the inputs' settings transitively (BM25 -> negatives ->
  models; backbone definitions -> models; the smoke fixture -> everything) and check_input names
  the key that differs;
- a bad config fails before any job, naming the key and the closest match;
- a failing rule's one-line harness error reaches the console;
- the toy method (the package tests/plugins/toy_method/) runs end to end without touching workflow/.
"""
from __future__ import annotations

import copy
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness import plan as hp
from harness.config import REPO, load_config, load_schema
from harness.errors import ConfigError
from harness.methods import METHODS, STEPS

PLUGINS = REPO / "tests" / "plugins"
TOY_OVERLAY = PLUGINS / "toy.yaml"
PROFILES: dict[str, list[Path]] = {
    "smoke": [],
    "small": [REPO / "configs" / "profiles" / "small.yaml"],
    "paper": [REPO / "configs" / "profiles" / "paper.yaml"],
    "scale": [REPO / "configs" / "profiles" / "scale.yaml"],   # synthetic payloads at 21M passages
    "toy": [TOY_OVERLAY],  # smoke + the toy plugin method
}
#: input kinds that some job of the plan must produce
PRODUCED = ("negatives", "decontam", "model", "index", "run", "metrics", "system")  # every kind but data


# --------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(scope="module")
def toy_registered():
    """The toy plugin in this process's method registry (as HARNESS_PLUGINS=toy_method would put
    it), taken out again afterwards so that other test modules see the package's methods only."""
    added = "toy" not in METHODS
    sys.path.insert(0, str(PLUGINS))
    try:
        importlib.import_module("toy_method")  # registers "toy" at import
        load_schema.cache_clear()
        yield
    finally:
        sys.path.remove(str(PLUGINS))
        if added:
            METHODS._items.pop("toy", None)
            for mod in [m for m in sys.modules if m == "toy_method" or m.startswith("toy_method.")]:
                sys.modules.pop(mod)
        load_schema.cache_clear()


@pytest.fixture(params=list(PROFILES))
def profile(request) -> str:
    if request.param == "toy":
        request.getfixturevalue("toy_registered")
    return request.param


def config(profile: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return load_config(PROFILES[profile], overrides)


def fresh_plan(cfg: dict[str, Any]) -> hp.Plan:
    """A plan built anew (harness.plan.get caches one per config content)."""
    return hp._cached.__wrapped__(json.dumps(cfg, sort_keys=True, default=str))


def section(cfg: dict[str, Any], job: hp.Job) -> dict[str, Any]:
    return cfg["methods"].get(job.method) or cfg.get(job.method) or {}


def all_concrete(p: hp.Plan) -> list[hp.Job]:
    return [j for stage in hp.STAGES for j in p.concrete(stage)]


def set_key(cfg: dict[str, Any], dotted: str, value: Any) -> None:
    node = cfg
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def changed(value: Any) -> Any:
    """Another value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-changed"
    if isinstance(value, list):
        return [*value, value[-1]] if value else ["changed"]
    if isinstance(value, dict):
        return {**value, "__changed__": 1}
    return "changed"  # None: an optional key set


def schema_has(dotted: str) -> bool:
    """Whether the config schema allows the dotted key (a job's keys must name real settings)."""
    from harness.config import _child_schema

    root = load_schema("config")
    node: Any = (root, (root,))
    for part in dotted.split("."):
        node = _child_schema(node[0], part, node[1])
        if node is None:
            return False
    return True


def run(cmd: list[str], env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)


def smk(*args: str, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "snakemake", *args], env=env, timeout=timeout)


def job_stats(text: str) -> Counter[str]:
    """The first "Job stats" table of snakemake's output: rule -> count."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Job stats:")
    counts: Counter[str] = Counter()
    for line in lines[start + 3:]:
        m = re.fullmatch(r"\s*(\S+)\s+(\d+)\s*", line)
        if not m:
            break
        if m.group(1) != "total":
            counts[m.group(1)] = int(m.group(2))
    return counts


def plugin_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["HARNESS_PLUGINS"] = "toy_method"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


# --------------------------------------------------------------------------------------------
# every registered method: module contract


@pytest.mark.parametrize("name", sorted({*METHODS, "toy"}))
def test_method_module_contract(name, toy_registered):
    """declare, search_job and a SCHEMA fragment (additionalProperties: false, an x-index-spec index)."""
    from harness.methods import method_module, schema_fragment

    module = method_module(name)
    assert callable(module.declare) and callable(module.search_job), name
    frag = schema_fragment(name)
    assert frag["additionalProperties"] is False, f"{module.SCHEMA}: additionalProperties must be false"
    assert "enabled" in frag["properties"] and "datasets" in frag["properties"]
    specs = [k for k, v in frag["properties"].items() if isinstance(v, dict) and v.get("x-index-spec")]
    assert "index" in specs, f"methods.{name}.index must say x-index-spec: true"


# --------------------------------------------------------------------------------------------
# every profile: the plan


def test_every_input_resolves_to_a_producing_job(profile):
    cfg = config(profile)
    p = hp.get(cfg)
    for job in all_concrete(p):
        paths = p.inputs(job)  # raises if nothing produces an input
        assert set(paths) == set(job.inputs)
        for role, ref in job.inputs.items():
            assert ref.kind in hp.KINDS, (job.id, role, ref)
            if ref.kind in PRODUCED:
                prod = p.producer(ref)
                assert prod is not None, (job.id, role, ref)
                assert p.job(*prod).stage == prod[0]
        # the step a job names exists
        assert callable(getattr(importlib.import_module(job.module), job.step)), (job.module, job.step)


def test_every_system_is_written_by_one_search_job_per_dataset(profile):
    p = hp.get(config(profile))
    systems = p.systems()  # raises on a system written twice
    writers = Counter((s, j.dataset) for j in p.concrete("search") if j.params.get("split", "test") == "test"
                      and "learning_twin_of" not in j.params for s in j.systems)  # a learning twin is no producer
    assert writers and max(writers.values()) == 1, [k for k, n in writers.items() if n > 1]
    assert set(systems) == set(writers)
    for (system, _), job in systems.items():
        assert system in job.systems


def test_job_hashes_are_stable_and_move_with_each_key(profile):
    cfg = config(profile)
    a, b = fresh_plan(cfg), fresh_plan(copy.deepcopy(cfg))
    jobs = all_concrete(a)
    assert [a.hash(j) for j in jobs] == [b.hash(j) for j in jobs]
    keys = sorted({k for j in jobs for k in j.keys})
    unknown = [k for k in keys if not schema_has(k)]
    assert not unknown, f"jobs read config keys the schema does not know: {unknown}"
    for key in keys:
        other = copy.deepcopy(cfg)
        set_key(other, key, changed(hp.lookup_key(cfg, key)))
        moved = hp.Plan(other, a.jobs.values())  # the same jobs, one key changed
        for j in jobs:
            if key in j.keys:
                assert moved.hash(j) != a.hash(j), f"{j.stage} {j.id} on {j.dataset}: hash ignores {key}"


def test_every_enabled_method_declares_jobs(profile):
    cfg = config(profile)
    p = hp.get(cfg)
    declared = Counter(j.method for j in p.jobs.values())
    for name, mcfg in cfg["methods"].items():
        if mcfg.get("enabled", True):
            assert name in METHODS
            assert declared[name] >= 1, f"methods.{name} is enabled in {profile} but declares no job"
    for name in STEPS:
        if cfg.get(name) and cfg[name].get("enabled", True):
            assert declared[name] >= 1


def test_matrices_name_only_systems_the_plan_produces(profile):
    """A wired cell (row -> system, column's dataset label substituted) is measured, i.e. some job of
    the plan writes the system; in smoke every wired, substituted cell must be measured, elsewhere a
    cell may be not run only because the method is off or not run on that dataset."""
    from harness.measured import split_system
    from harness.tables import matrix as hmatrix
    from harness.published import PAPERS

    cfg = config(profile)
    bad = []
    for paper in PAPERS:
        doc = hmatrix.load_matrix(paper)
        for tid, tmatrix in doc["tables"].items():
            for row, system in (tmatrix.get("systems") or {}).items():
                method, _ = split_system(system)
                if method not in METHODS and method not in STEPS:
                    bad.append(f"{paper} table {tid} row {row!r}: system {system!r} names no method")
        for t in hmatrix.published(paper)["tables"]:
            _, cells = hmatrix.resolve_table(cfg, paper, t["id"])
            for c in cells:
                if c.system is None or c.dataset is None or c.kind == "measured":
                    continue
                legit = (profile != "smoke" and ("enabled is false" in c.reason or "is not run on" in c.reason
                                                 or "has no methods." in c.reason))
                if not legit:
                    bad.append(f"{paper} table {t['id']} {c.row!r} / {c.column!r}: "
                               f"{c.system} on {c.dataset}: {c.reason}")
    assert not bad, "\n".join(bad[:30])


@pytest.mark.parametrize("prof", ["smoke", "small", "paper", "toy"])
def test_dry_run_reaches_every_system(prof, tmp_path, request):
    """`snakemake -n reproduce_all`: every kind of rule, one evaluate per test-split search job, one
    measure per measure job, and every model of the plan (the workflow's dry run of each profile)."""
    env = None
    if prof == "toy":
        request.getfixturevalue("toy_registered")
        env = plugin_env()
    p = hp.get(config(prof))
    args = ["-n", "--nolock", "reproduce_all"]
    if PROFILES[prof]:
        args += ["--configfile", *map(str, PROFILES[prof])]
    r = smk(*args, "--config", f"results_dir={tmp_path}", env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    rules = ["table", "train", "index", "search", "measure", "evaluate", "claims", "report"]
    if (REPO / "configs" / "expected" / f"{cfg_profile(prof)}.yaml").exists():
        rules.append("regression")
    assert not [rule for rule in rules if not stats[rule]], stats
    tests = [j for j in p.concrete("search") if j.params.get("split", "test") == "test"]
    assert stats["evaluate"] == len(tests), (stats, len(tests))
    assert stats["measure"] == len(p.concrete("measure"))
    assert stats["train"] == len(p.concrete("train")), "a declared model that nothing uses"
    assert stats["search"] == len(p.concrete("search"))
    out = r.stdout + r.stderr
    for (system, dataset), job in p.systems().items():
        assert f"{tmp_path}/{cfg_profile(prof)}/eval/{dataset}/{job.id}" in out, system


def cfg_profile(prof: str) -> str:
    return "smoke" if prof == "toy" else prof


# --------------------------------------------------------------------------------------------
# stale artifacts


def test_bm25_k1_changes_negatives_and_every_model_trained_on_them():
    from harness.negatives import negatives_job

    cfg = config("smoke")
    other = config("smoke", {"methods.bm25.k1": cfg["methods"]["bm25"]["k1"] + 0.3})
    a, b = fresh_plan(cfg), fresh_plan(other)
    td = cfg["methods"]["dpr"]["train_dataset"]
    assert a.hash(negatives_job(cfg, td)) != b.hash(negatives_job(other, td))
    on_negatives = [j for j in a.concrete("train") if any(r.kind == "negatives" for r in j.inputs.values())]
    assert {"dpr", "svdr", "bpr"} <= {j.id for j in on_negatives}
    for j in on_negatives:
        assert a.hash(j) != b.hash(b.job("train", j.id)), f"model {j.id} ignores methods.bm25.k1"
        searches = [s for s in a.concrete("search") if hp.Ref("model", j.id) in s.inputs.values()]
        for s in searches:
            assert a.hash(s) != b.hash(b.job("search", s.id, s.dataset))
    # k1 is a search-time setting: the Lucene index itself is not rebuilt
    bm25_index = a.job("index", "bm25", td)
    assert a.hash(bm25_index) == b.hash(b.job("index", "bm25", td))


def test_backbone_definition_changes_every_model():
    cfg = config("smoke")
    other = config("smoke", {"backbones.splade-tiny.source": "package:someone-else"})
    a, b = fresh_plan(cfg), fresh_plan(other)
    models = a.concrete("train")
    assert models
    for j in models:
        assert section(cfg, j).get("backbone") == "splade-tiny"
        assert a.hash(j) != b.hash(b.job("train", j.id)), f"model {j.id} ignores backbones.splade-tiny"


@pytest.mark.parametrize("prof", ["small", "paper"])
def test_backbone_definition_changes_the_models_of_every_profile(prof):
    cfg = config(prof)
    a = fresh_plan(cfg)
    for j in a.concrete("train"):
        # the model's own backbone: a variant's where it names one (the paper's QCR-uns.: Contriever)
        variant = (section(cfg, j).get("variants") or {}).get(j.params.get("variant")) or {}
        bb = variant.get("backbone") or section(cfg, j).get("backbone")
        if bb is None:
            continue
        other = copy.deepcopy(cfg)
        other["backbones"][bb]["source"] += "-changed"
        assert a.hash(j) != fresh_plan(other).hash(j), f"{prof}: model {j.id} ignores backbones.{bb}"


def test_reader_hash_covers_its_own_backbone():
    """The reader's backbone may differ from its retriever's: its definition must still reach the hash."""
    cfg = config("smoke", {"reader.backbone": "minilm-l6"})
    other = config("smoke", {"reader.backbone": "minilm-l6", "backbones.minilm-l6.source": "package:other"})
    a, b = fresh_plan(cfg), fresh_plan(other)
    assert a.hash(a.job("train", "reader")) != b.hash(b.job("train", "reader")), \
        "model reader ignores backbones.<reader.backbone>"


def _fake_artifact(p: hp.Plan, job: hp.Job) -> Path:
    """What harness.stages.run_stage leaves: the folder and its meta.json."""
    from harness.meta import write_meta

    out = hp.output(p.cfg, job)
    out.mkdir(parents=True)
    (out / "weights.bin").write_bytes(b"\0" * 16)
    write_meta(out, "model", spec=job.id, config_hash=p.hash(job), seconds=0.0,
               extra={"job": job.id, "method": job.method, "config_values": p.values(job),
                      "input_hashes": p.input_hashes(job)})
    return out


def test_check_input_refuses_a_model_built_under_another_config(tmp_path):
    old_cfg = config("smoke", {"results_dir": str(tmp_path), "methods.dpr.lr": 1.0e-3})
    new_cfg = config("smoke", {"results_dir": str(tmp_path)})
    old, new = fresh_plan(old_cfg), fresh_plan(new_cfg)
    folder = _fake_artifact(old, old.job("train", "dpr"))
    ref = hp.Ref("model", "dpr")
    assert hp.check_input(old, "model", ref) == folder
    with pytest.raises(ConfigError) as exc:
        hp.check_input(new, "model", ref)
    msg = str(exc.value)
    assert old.ref_hash(ref) in msg and new.ref_hash(ref) in msg
    assert "methods.dpr.lr" in msg and str(folder) in msg


def test_check_input_names_a_changed_input(tmp_path):
    old_cfg = config("smoke", {"results_dir": str(tmp_path), "methods.bm25.k1": 1.5})
    new_cfg = config("smoke", {"results_dir": str(tmp_path)})
    old, new = fresh_plan(old_cfg), fresh_plan(new_cfg)
    _fake_artifact(old, old.job("train", "dpr"))
    with pytest.raises(ConfigError, match=r"its input negatives"):
        hp.check_input(new, "model", hp.Ref("model", "dpr"))


def test_check_input_refuses_a_decontamination_built_under_another_setting(tmp_path):
    """The decontamination is a plan job like any other: a folder built with k 2 is refused under k 8,
    naming the key (it was consumed unchecked before)."""
    old, new = (fresh_plan(config("smoke", {"results_dir": str(tmp_path), "decontam.k": k})) for k in (2, 8))
    folder = _fake_artifact(old, old.job("decontam", "decontam"))
    assert hp.check_input(old, "decontam", hp.Ref("decontam")) == folder
    with pytest.raises(ConfigError, match=r"config key decontam changed"):
        hp.check_input(new, "decontam", hp.Ref("decontam"))


def test_check_input_refuses_data_prepared_under_another_setting(tmp_path):
    """A dataset folder's meta.json carries its plan hash (python -m harness data); one prepared with
    another datasets.<key> setting is refused, naming the key, not read by a search job."""
    from harness.meta import write_meta

    old, new = (fresh_plan(config("smoke", {"results_dir": str(tmp_path), "datasets.smoke.max_test_queries": n}))
                for n in (10, 20))
    ref = hp.Ref("data", dataset="smoke")
    folder = hp.path(old.cfg, ref)
    folder.mkdir(parents=True)
    write_meta(folder, "dataset", spec="harness:smoke", config_hash=old.ref_hash(ref), seconds=0.0)
    assert hp.check_input(old, "data", ref) == folder
    with pytest.raises(ConfigError, match=r"config key datasets.smoke .*changed"):
        hp.check_input(new, "data", ref)


def test_check_input_refuses_an_artifact_without_meta(tmp_path):
    from harness.errors import DataError

    p = fresh_plan(config("smoke", {"results_dir": str(tmp_path)}))
    (tmp_path / "smoke" / "models" / "dpr").mkdir(parents=True)
    with pytest.raises(DataError, match="no meta.json"):
        hp.check_input(p, "model", hp.Ref("model", "dpr"))
    with pytest.raises(DataError, match="does not exist"):
        hp.check_input(p, "model", hp.Ref("model", "svdr"))


def test_smoke_fixture_is_a_data_input_and_its_edit_moves_every_hash(tmp_path, monkeypatch):
    from harness import workflow as hwf
    from harness.datasets import smoke

    cfg = config("smoke")
    files = hwf.data_inputs(cfg, SimpleNamespace(dataset="smoke"))
    assert sorted(files) == ["harness/datasets/smoke/corpus.jsonl", "harness/datasets/smoke/questions.jsonl"]
    assert all((REPO / f).is_file() for f in files)

    before = fresh_plan(cfg)
    jobs = all_concrete(before)
    copy_dir = tmp_path / "fixture"
    shutil.copytree(smoke.FIXTURE, copy_dir)
    monkeypatch.setattr(smoke, "FIXTURE", copy_dir)
    copied = [str(copy_dir / f.rsplit("/", 1)[1]) for f in files]
    assert hwf.data_inputs(cfg, SimpleNamespace(dataset="smoke")) == copied
    same = fresh_plan(cfg)
    assert [same.hash(j) for j in jobs] == [before.hash(j) for j in jobs], "an identical copy changed a hash"

    corpus = copy_dir / "corpus.jsonl"
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    rec = json.loads(lines[0])
    rec["text"] += " An edited sentence."
    lines[0] = json.dumps(rec) + "\n"
    corpus.write_text("".join(lines), encoding="utf-8")
    after = fresh_plan(cfg)
    data = hp.Ref("data", dataset="smoke")
    assert after.ref_hash(data) != before.ref_hash(data)
    assert hwf.data_hash(cfg, SimpleNamespace(dataset="smoke")) == hp.get(cfg).ref_hash(data)
    downstream = [j for j in jobs if reads_data(before, j)]
    assert len(downstream) > len(jobs) // 2
    unchanged = [f"{j.stage} {j.id} {j.dataset}" for j in downstream if after.hash(j) == before.hash(j)]
    assert not unchanged, f"jobs whose hash ignores the fixture: {unchanged}"


def reads_data(p: hp.Plan, job: hp.Job) -> bool:
    """Whether a job reads a dataset, directly or through its inputs (a synthetic payload does not)."""
    for ref in job.inputs.values():
        if ref.kind in ("data", "negatives", "decontam"):
            return True
        prod = p.producer(ref)
        if prod is not None and reads_data(p, p.job(*prod)):
            return True
    return False


# --------------------------------------------------------------------------------------------
# config validation, before any job


BAD_CONFIGS = [
    pytest.param({"methods": {"bpx": {"enabled": True}}}, ["'bpx'", "'bpr'"], id="unknown-method"),
    pytest.param({"methods.bpx.enabled": True}, ["methods.bpx", "methods.bpr"], id="unknown-method-dotted"),
    pytest.param({"methods": {"dpr": {"k1": 1.0}}}, ["'k1'", "methods.dpr", "methods.bm25"],
                 id="other-methods-key"),
    pytest.param({"methods.dpr.k1": 1.0}, ["methods.dpr.k1", "methods.bm25"], id="other-methods-key-dotted"),
    pytest.param({"methods.dpr.index": "faiss:Flatt"}, ["methods.dpr.index", "'faiss:Flat'"],
                 id="faiss-spec"),
    pytest.param({"methods.bm25.index": "lucene:bm52"}, ["methods.bm25.index", "'lucene:bm25'"],
                 id="lucene-spec"),
    pytest.param({"reader.systems": ["dpr", "dpr.hsnw"]}, ["reader", "'dpr.hsnw'", "'dpr.hnsw'"],
                 id="reader-system"),
]


@pytest.mark.parametrize("overrides,words", BAD_CONFIGS)
def test_bad_config_fails_with_key_and_closest_match(overrides, words):
    with pytest.raises(ConfigError) as exc:
        hp.get(load_config([], overrides))
    msg = str(exc.value)
    for w in words:
        assert w in msg, f"{w!r} not in: {msg}"


def test_bad_index_spec_fails_snakemake_dry_run_before_any_job(tmp_path):
    results = tmp_path / "results"
    r = smk("-n", "--nolock", "reproduce_all", "--config", f"results_dir={results}",
            "methods={dpr: {index: 'faiss:Flatt'}}")  # snakemake --config takes no dotted key
    assert r.returncode != 0
    assert "methods.dpr.index" in r.stderr and "'faiss:Flat'" in r.stderr, r.stderr[-2000:]
    assert not results.exists()


# --------------------------------------------------------------------------------------------
# a failing rule's error reaches the console


def test_failing_rule_error_reaches_the_console(tmp_path):
    results, cache = tmp_path / "results", tmp_path / "cache"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_DATA_MIRROR"}
    target = results / "small" / "data" / "scifact"
    r = smk("--cores", "1", "--nolock", str(target), "--configfile", "configs/profiles/small.yaml",
            "--config", f"results_dir={results}", f"data={{offline: true, cache_dir: '{cache}'}}",
            env=env, timeout=300)
    assert r.returncode != 0
    console = r.stdout + r.stderr
    log = (results / "small" / "logs" / "data" / "scifact.log").read_text(encoding="utf-8")
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert errors, log[-2000:]
    assert errors[-1] in console, console[-3000:]
    assert "offline" in errors[-1].lower() or "mirror" in errors[-1].lower()
    assert not target.exists()


# --------------------------------------------------------------------------------------------
# the toy plugin method


def test_toy_overlay_without_the_plugin_fails_validation():
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_PLUGINS"}
    r = run([sys.executable, "-m", "harness", "plan", "--config", str(TOY_OVERLAY)], env=env)
    assert r.returncode != 0
    assert "unknown key 'toy'" in r.stderr, r.stderr


def test_unimportable_plugin_names_the_module():
    env = {**os.environ, "HARNESS_PLUGINS": "no_such_plugin"}
    r = run([sys.executable, "-m", "harness", "plan"], env=env)
    assert r.returncode != 0
    assert "no_such_plugin" in r.stderr and "HARNESS_PLUGINS" in r.stderr


def test_toy_plan_lists_its_jobs():
    r = run([sys.executable, "-m", "harness", "plan", "--config", str(TOY_OVERLAY)], env=plugin_env())
    assert r.returncode == 0, r.stderr
    listed = {tuple(line.split()[:3]) for line in r.stdout.splitlines()}
    assert {("train", "toy", "*"), ("index", "toy", "*"), ("search", "toy", "smoke"),
            ("search", "toy.rrf", "smoke")} <= listed


def test_toy_method_end_to_end(tmp_path, toy_registered):
    """The toy's model, index, run and fused run through the generic rules, workflow/ untouched."""
    R = tmp_path / "smoke"
    t0 = time.perf_counter()
    targets = [str(R / "eval" / "smoke" / s) for s in ("toy", "toy.rrf")]
    r = smk("--cores", "2", "--nolock", *targets, "--configfile", str(TOY_OVERLAY),
            "--config", f"results_dir={tmp_path}", env=plugin_env(), timeout=900)
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    print(f"toy end to end: {seconds:.0f} s")

    evals = {s: json.loads((R / "eval" / "smoke" / s / f"{s}.json").read_text()) for s in ("toy", "toy.rrf")}
    for system, res in evals.items():
        m = res["measures"]
        assert res["system"] == system
        for key in ("Success@1", "Success@20", "nDCG@10"):
            assert 0.0 <= m[key] <= 1.0, (system, key, m)
    assert evals["toy"]["measures"]["Success@20"] > 20 / 122, "no better than random"

    p = fresh_plan(config("toy", {"results_dir": str(tmp_path)}))
    for folder, job in ((R / "models" / "toy", p.job("train", "toy")),
                        (R / "indexes" / "toy" / "smoke", p.job("index", "toy", "smoke")),
                        (R / "runs" / "smoke" / "toy", p.job("search", "toy", "smoke"))):
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["config_hash"] == p.hash(job), folder
        assert meta["job"] == job.id
    assert json.loads((R / "indexes" / "toy" / "smoke" / "meta.json").read_text())["spec"] == "faiss:Flat"
    assert (R / "models" / "toy" / "idf.json").is_file()
    assert (R / "runs" / "smoke" / "toy.rrf" / "toy.rrf.trec").is_file()

    st = run(["git", "--no-optional-locks", "status", "--porcelain", "workflow/", "Snakefile"])
    assert st.returncode == 0 and st.stdout == "", st.stdout


def test_a_pinned_config_finds_its_plan_without_serialising(monkeypatch):
    """Snakemake's config is pinned (harness.workflow): every lookup of its plan, from any module,
    is by identity; another config, even an equal one, is still found by content."""
    cfg = config("smoke")
    plan = hp.pin(cfg)
    assert hp.pin(cfg) is plan and hp.get(cfg) is plan

    calls = []
    real = hp.json.dumps
    monkeypatch.setattr(hp.json, "dumps", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert hp.get(cfg) is plan and not calls
    assert hp.get(copy.deepcopy(cfg)) is plan and calls == [1]   # an equal config: found by content


def test_threads_booked_follow_what_each_job_runs_capped_by_the_scheduler():
    """Cores booked per job (harness.workflow.resources): a method's torch_threads, or BM25's Java
    threads for BM25's own jobs and the negatives mined with it, capped by scheduler.max_threads_per_job
    (default 1: two jobs share a 2-core machine; the negatives job booked 2 apart from that cap and held
    the ci run's QCR training alone on one core for 1.7 minutes, nothing else being ready)."""
    from harness import workflow as hwf

    def threads(cfg, stage, **wc):
        return hwf.resources(cfg, stage, SimpleNamespace(**wc), "threads")

    small = load_config(["configs/profiles/small.yaml"])
    assert threads(small, "negatives", dataset="squad-open") == 1
    assert threads(small, "train", job="dpr") == 1
    paper = load_config(["configs/profiles/paper.yaml"])
    assert paper["scheduler"]["max_threads_per_job"] is None
    assert threads(paper, "negatives", dataset="nq") == paper["methods"]["bm25"]["threads"] == 16
    assert threads(paper, "search", job="bm25", dataset="nq") == 16
    assert threads(paper, "train", job="dpr") == paper["methods"]["dpr"]["torch_threads"]
    assert threads(paper, "evaluate", job="dpr", dataset="nq") == 1


def test_unhashed_reads_are_found_in_index_jobs_made_concrete_for_a_dataset(tmp_path):
    """An index job per dataset is a template the plan makes concrete for each dataset that reads it
    (Plan.closure); the check of settings read but not hashed (unhashed_in_results, the smoke DAG's
    test) must reach it: it looked at Plan.concrete only, and SVDR's token index had read its
    tokenizer's definition (backbones.<name>) unhashed in every profile. It now hashes it."""
    from harness import plan as hplan
    from harness.config import load_config

    cfg = load_config([])
    cfg["results_dir"] = str(tmp_path)
    p = hplan.get(cfg)
    key = ("index", "svdr.token", "smoke")
    assert key in p.closure() and key not in {(j.stage, j.id, j.dataset) for j in p.concrete("index")}
    job = p.closure()[key]
    assert "backbones.splade-tiny" in p.hashed_keys(job)  # the tokenizer's definition changes T(D)
    folder = hplan.output(cfg, job)
    folder.mkdir(parents=True)
    reads = ["backbones.splade-tiny.source", "methods.svdr.p_max_len", "methods.dpr.lr"]
    (folder / "meta.json").write_text(json.dumps({"settings_read": reads}), encoding="utf-8")
    assert hplan.unhashed_in_results(cfg) == {str(folder): ["methods.dpr.lr"]}


def test_a_variants_runtime_fields_move_no_hash_as_the_sections_own_do_not():
    """``grad_cache_chunk`` in a variant's entry or in ``variant_overrides`` (the paper profile's LightRetriever LLMs set
    their own sub-batches) is how its model is trained, not which: the model's hash and its searches' stay; a
    model field in the same entry moves them (a machine with less memory reran light-both in sub-batches
    of 2, and the ledger refused it as measured under other settings)."""
    key = "methods.lightretriever.variants.llama-8b"
    a = fresh_plan(config("paper"))
    b = fresh_plan(config("paper", {f"{key}.grad_cache_chunk": 2,
                                    "methods.lightretriever.variant_overrides.grad_cache_chunk": 2}))
    c = fresh_plan(config("paper", {f"{key}.kl": False}))
    model = a.job("train", "lightretriever.llama-8b")
    assert key in model.keys and "methods.lightretriever.variant_overrides" in model.keys
    search = next(j for j in a.concrete("search") if j.id == "lightretriever.llama-8b")   # reads the model
    for j in (model, search):
        assert b.hash(b.job(j.stage, j.id, j.dataset)) == a.hash(j)
        assert c.hash(c.job(j.stage, j.id, j.dataset)) != a.hash(j)
    assert b.values(model)[key] == a.values(model)[key] == {"backbone": "llama31-8b"}
