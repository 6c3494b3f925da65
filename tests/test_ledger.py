"""The cost ledger (harness/ledger.py): a rehearsal's measured jobs and failures written per machine,
read back into the estimate on a checkout without results, one record per job chosen by a stated
rule, each row naming its source and whether its settings are still today's rehearsal's."""
from __future__ import annotations

import json

import pytest

from harness import cost, estimate, ledger
from harness.config import load_config
from harness.errors import DataError

CPU = {"machine": "x86_64", "cpus": 2, "system": "Linux", "cpu": "AMD EPYC", "simd": "AVX2", "mem_gb": 23.5}
GPU = {**CPU, "cpus": 16, "gpu": "NVIDIA H200"}


def _results(root, *, failed: bool = True):
    """A rehearsal's results folder: DPR trained and searched on NQ (its index's meta says 500
    documents), BPR's train job failed with its one-line cause."""
    cost.allow_fallbacks(False)
    metas = {
        "models/dpr": {"kind": "model", "job": "dpr", "hardware": CPU, "created": "2026-12-01T10:00:00+0000",
                       "git_commit": "abc1234def", "cost": cost.record("train", {"steps": 2}, 30.0),
                       "inputs": {"data": "results/rehearsal/data/nq"}},
        "indexes/dpr/nq": {"kind": "index", "job": "dpr", "dataset": "nq", "documents": 500, "hardware": CPU,
                           "cost": cost.record("index", {"documents": 500}, 10.0)},
        "runs/nq/dpr": {"kind": "run", "job": "dpr", "dataset": "nq", "hardware": CPU,
                        "inputs": {"index": "results/rehearsal/indexes/dpr/nq"},
                        "cost": cost.record("search", {"queries": 32}, 3.2)},
    }
    for folder, meta in metas.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "meta.json").write_text(json.dumps(meta))
    logs = root / "logs" / "train"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "bpr.log").write_text("error: train bpr: out of memory at this shape (it held 19.5 GiB)\n" if failed
                                  else "train bpr: done in 12.0s\n")


def test_record_writes_one_file_per_machine_and_a_rerun_replaces_its_lines(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.meta.hardware", lambda: CPU)
    _results(tmp_path / "r")
    written = ledger.record(tmp_path / "r", tmp_path / "costs")
    path = tmp_path / "costs" / "amd-epyc-avx2-2-cores-23.5gb.jsonl"
    assert written == {str(path): {"jobs": 3, "failures": 1}}
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r.get("log") or r["kind"] for r in lines] == ["index", "run", "logs/train/bpr.log", "model"]  # by log
    run = next(r for r in lines if r.get("kind") == "run")
    assert run["documents_searched"] == 500 and "inputs" not in run  # looked up now: the index is not committed
    assert set(run) <= set(ledger.KEPT) | {"documents_searched"}
    assert lines[2]["failure"].startswith("error: train bpr: out of memory")
    # BPR trained since: its measured line replaces the failure; the other lines stay
    cost.allow_fallbacks(False)
    (tmp_path / "r2" / "models" / "bpr").mkdir(parents=True)
    (tmp_path / "r2" / "models" / "bpr" / "meta.json").write_text(json.dumps(
        {"kind": "model", "job": "bpr", "hardware": CPU, "cost": cost.record("train", {"steps": 2}, 40.0)}))
    assert ledger.record(tmp_path / "r2", tmp_path / "costs") == {str(path): {"jobs": 4, "failures": 0}}
    # and failed again (a rerun killed, or out of memory): the failure is kept beside the cost measured before
    (tmp_path / "r4" / "logs" / "train").mkdir(parents=True)
    (tmp_path / "r4" / "logs" / "train" / "bpr.log").write_text("error: train bpr: out of memory (it held 21.0 GiB)\n")
    assert ledger.record(tmp_path / "r4", tmp_path / "costs") == {str(path): {"jobs": 4, "failures": 1}}
    records = ledger.read(tmp_path / "costs")
    assert [r["cost"]["seconds"] for r in ledger.measurements(records) if r["job"] == "bpr"] == [40.0]
    (log, cause), = ledger.failures(records)
    assert log.startswith("logs/train/bpr.log") and cause.startswith("error: train bpr: out of memory (it held 21.0")
    assert ledger.record(tmp_path / "r2", tmp_path / "costs") == {str(path): {"jobs": 4, "failures": 0}}
    # a GPU node's jobs go to its own file
    (tmp_path / "r3" / "models" / "dpr").mkdir(parents=True)
    (tmp_path / "r3" / "models" / "dpr" / "meta.json").write_text(json.dumps(
        {"kind": "model", "job": "dpr", "hardware": GPU, "cost": {**cost.record("train", {"steps": 2}, 2.0),
                                                                   "gpu_peak_bytes": 44 * 2**30}}))
    assert list(ledger.record(tmp_path / "r3", tmp_path / "costs")) == [str(tmp_path / "costs" / "nvidia-h200.jsonl")]


def test_the_estimate_projects_from_the_ledger_alone_as_from_the_results_it_was_recorded_from(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.meta.hardware", lambda: CPU)
    _results(tmp_path / "r")
    ledger.record(tmp_path / "r", tmp_path / "costs")
    paper = load_config(["configs/profiles/paper.yaml"])
    measured = lambda rows: [r for r in rows if not r.get("measured_on_dataset") and not r.get("borrowed_from")]  # noqa: E731
    # (not the rows priced from a measure of another dataset or of the job a variant varies)
    here = {(r["stage"], r["job"]): r for r in measured(estimate.estimate(paper, tmp_path / "r"))}
    records = ledger.read(tmp_path / "costs")
    there = {(r["stage"], r["job"]): r for r in measured(estimate.estimate(paper, tmp_path / "nowhere", records))}
    assert set(here) == set(there) == {("train", "dpr"), ("index", "dpr"), ("search", "dpr")}
    for key, row in here.items():
        assert there[key]["seconds"] == pytest.approx(row["seconds"]) and there[key]["how"] == row["how"]
        assert row["source"].endswith("(this machine)")
        assert there[key]["source"].startswith(str(tmp_path / "costs" / "amd-epyc-avx2-2-cores-23.5gb.jsonl"))
    assert "(commit abc1234, 2026-12-01)" in there[("train", "dpr")]["source"]
    assert there[("search", "dpr")]["bound"] == "lower"  # its index's 500 documents came with the line
    assert ledger.failures(records) == [("logs/train/bpr.log on amd-epyc-avx2-2-cores-23.5gb",
                                         "error: train bpr: out of memory at this shape (it held 19.5 GiB)")]
    # the same failure in this machine's results folder is listed once (there), another cause is kept
    assert ledger.failures(records, besides=estimate.failures(tmp_path / "r")) == []
    assert len(ledger.failures(records, besides=[("logs/train/bpr.log", "error: another cause")])) == 1
    # measured later on another machine (a fix's rerun elsewhere): the failure stays, saying so; an earlier
    # measurement says nothing
    bpr = {"kind": "model", "job": "bpr", "cost": {"seconds": 1.0}, "hardware": GPU, "git_commit": "def5678"}
    (_, cause), = ledger.failures([*records, {**bpr, "created": "2099-01-02T00:00:00+0000"}])
    assert cause == ("error: train bpr: out of memory at this shape (it held 19.5 GiB)"
                     " (measured since: on nvidia-h200, 2099-01-02, commit def5678)")
    assert ledger.failures([*records, {**bpr, "created": "2000-01-02T00:00:00+0000"}]) == ledger.failures(records)
    # both: one row per job (this machine's, where equal)
    both = estimate.estimate(paper, tmp_path / "r", records)
    assert len(measured(both)) == 3 and all(r["source"].endswith("(this machine)") for r in both)
    # DPR's index and search measured on NQ project its index and search on the profile's other datasets
    other = [r for r in both if r.get("measured_on_dataset")]
    assert {r["stage"] for r in other} == {"index", "search"} and "nq" not in {r["dataset"] for r in other}
    assert all(r["measured_on_dataset"] == "nq" and "measured on nq: another corpus" in r["how"] for r in other)


def test_pick_prefers_a_gpu_measurement_for_a_gpu_job_then_todays_settings_then_the_newest():
    cpu_new = {"hardware": CPU, "cost": {}, "created": "2026-12-02", "config_hash": "h1"}
    gpu_old = {"hardware": GPU, "cost": {"gpu_peak_bytes": 1}, "created": "2026-11-01", "config_hash": "h0"}
    cpu_old = {"hardware": CPU, "cost": {}, "created": "2026-11-02", "config_hash": "h0"}
    assert ledger.pick([cpu_new, gpu_old], gpu_job=True, current_hash="h1") is gpu_old
    assert ledger.pick([cpu_new, gpu_old], gpu_job=False, current_hash=None) is cpu_new
    assert ledger.pick([cpu_new, cpu_old], gpu_job=False, current_hash="h0") is cpu_old
    assert ledger.pick([cpu_old, dict(cpu_old)], gpu_job=False, current_hash=None) is cpu_old  # a tie: the first
    # then the reference machine (the one that measured the most jobs) before the newest: a total adds up
    # one machine's figures where it can (the rehearsal's AMD EPYC took ~1.7x the Intel Xeon's time a unit)
    xeon = {**CPU, "cpu": "Intel(R) Xeon(R) Processor", "simd": "AVX-512"}
    xeon_old = {"hardware": xeon, "cost": {}, "created": "2026-11-01", "config_hash": "h1", "kind": "model", "job": "dpr"}
    epyc_new = {**cpu_new, "kind": "model", "job": "dpr"}
    ref = ledger.machine(xeon_old)
    assert ref == "Intel(R) Xeon(R) Processor (AVX-512, 2 cores)" and ledger.machine({}) == "cpu"
    assert ledger.pick([epyc_new, xeon_old], gpu_job=False, current_hash="h1", prefer=ref) is xeon_old
    assert ledger.pick([epyc_new, xeon_old], gpu_job=False, current_hash="h1") is epyc_new
    assert ledger.pick([epyc_new, {**xeon_old, "config_hash": "h0"}], gpu_job=False, current_hash="h1",
                       prefer=ref) is epyc_new   # today's settings first
    more = [xeon_old, {**xeon_old, "job": "bpr"}, epyc_new, {**epyc_new, "created": "2026-12-03"}]  # 2 jobs vs 1
    assert ledger.reference_machine(more) == ref and ledger.reference_machine([]) is None


def test_a_job_measured_with_other_settings_than_todays_rehearsal_is_said_stale(tmp_path):
    cost.allow_fallbacks(False)
    key = ("index", "bm25", "nq")
    now = estimate._rehearsal_hashes([key]).get(key)
    if now is None:
        pytest.skip("the rehearsal's BM25 index cannot be hashed here")
    paper = load_config(["configs/profiles/paper.yaml"])
    line = {"kind": "index", "job": "bm25", "dataset": "nq", "hardware": CPU, "documents": 500,
            "cost": cost.record("index", {"documents": 500}, 1.0), "_source": "x"}
    nq = lambda rows: [r for r in rows if r["dataset"] == "nq"]  # noqa: E731 (the other datasets' BM25 rows borrow it)
    rows = nq(estimate.estimate(paper, tmp_path / "nowhere", [dict(line, config_hash=now)]))
    assert len(rows) == 1 and "stale" not in rows[0]
    rows = nq(estimate.estimate(paper, tmp_path / "nowhere", [dict(line, config_hash="0123456789abcdef")]))
    assert rows[0]["stale"].startswith("measured with other settings than today's rehearsal (config hash 0123456789")


def test_a_damaged_ledger_line_names_its_file_and_line(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"kind": "model", "job": "dpr", "cost": {}}\n{"kind": "model"\n')
    with pytest.raises(DataError, match=r"m\.jsonl:2: not a JSON line"):
        ledger.read(tmp_path)
    (tmp_path / "m.jsonl").write_text('{"kind": "model", "job": "dpr"}\n')
    with pytest.raises(DataError, match=r"m\.jsonl:1: neither a measured job"):
        ledger.read(tmp_path)


def test_the_estimate_command_records_then_projects_from_the_ledger(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("harness.meta.hardware", lambda: CPU)
    _results(tmp_path / "r")
    # the command records the rehearsal's own jobs only: these carry today's rehearsal hashes, as its jobs do
    keys = {"models/dpr": ("train", "dpr", None), "indexes/dpr/nq": ("index", "dpr", "nq"), "runs/nq/dpr": ("search", "dpr", "nq")}
    hashes = estimate._rehearsal_hashes(list(keys.values()))
    if len(hashes) < 3:
        pytest.skip("the rehearsal's DPR jobs cannot be hashed here")
    for folder, key in keys.items():
        meta = json.loads((tmp_path / "r" / folder / "meta.json").read_text())
        (tmp_path / "r" / folder / "meta.json").write_text(json.dumps({**meta, "config_hash": hashes[key]}))
    args = ["--config", "configs/profiles/paper.yaml", "--measured", str(tmp_path / "r"), "--ledger", str(tmp_path / "c")]
    assert estimate.main([*args, "--record"]) == 0
    assert "amd-epyc-avx2-2-cores-23.5gb.jsonl: 3 measured job(s), 1 failure(s)" in capsys.readouterr().out
    assert estimate.main(["--config", "configs/profiles/paper.yaml", "--measured", str(tmp_path / "none"),
                          "--ledger", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "\nmeasured where: 2 job(s) from " in out and "(commit abc1234, 2026-12-01)" in out
    assert "logs/train/bpr.log on amd-epyc-avx2-2-cores-23.5gb: error: train bpr: out of memory" in out
    with pytest.raises(DataError, match="no finished rehearsal job"):
        estimate.main(["--config", "configs/profiles/paper.yaml", "--measured", str(tmp_path / "none"), "--no-ledger"])


def test_a_record_from_before_the_isa_was_named_takes_this_machines_only_where_all_else_matches(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.meta.hardware", lambda: CPU)
    cost.allow_fallbacks(False)
    old = {k: v for k, v in CPU.items() if k != "simd"}
    for job, hw in (("dpr", old), ("bpr", {**old, "cpus": 4})):
        (tmp_path / "r" / "models" / job).mkdir(parents=True)
        (tmp_path / "r" / "models" / job / "meta.json").write_text(json.dumps(
            {"kind": "model", "job": job, "hardware": hw, "cost": cost.record("train", {"steps": 2}, 1.0)}))
    files = ledger.record(tmp_path / "r", tmp_path / "costs")
    assert sorted(files) == [str(tmp_path / "costs" / "amd-epyc-4-cores-23.5gb.jsonl"),
                             str(tmp_path / "costs" / "amd-epyc-avx2-2-cores-23.5gb.jsonl")]


def test_a_job_measured_with_other_settings_than_the_rehearsals_is_not_recorded(tmp_path, monkeypatch):
    """rehearsal-tiny (or an override that changes a job) measures another job than the rehearsal's:
    with today's rehearsal hashes, record leaves it out and names it."""
    monkeypatch.setattr("harness.meta.hardware", lambda: CPU)
    _results(tmp_path / "r", failed=False)
    skipped: list[str] = []
    meta = json.loads((tmp_path / "r" / "models" / "dpr" / "meta.json").read_text())
    (tmp_path / "r" / "models" / "dpr" / "meta.json").write_text(json.dumps({**meta, "config_hash": "tiny"}))
    written = ledger.record(tmp_path / "r", tmp_path / "costs", {("train", "dpr", None): "paper-shape"}, skipped)
    assert skipped == ["logs/train/dpr.log"] and list(written.values()) == [{"jobs": 2, "failures": 0}]


def test_machine_ratios_compare_the_same_jobs_per_unit_costs_on_two_machines():
    """Two machines that ran the same jobs with the same settings: per pair, the median, lowest and highest
    ratio of seconds a unit, the slower machine first (worked by hand: 2.0 and 1.5 -> median 1.75); a job
    measured with other settings (another config hash) is no pair; each machine's newest record counts;
    a GPU measurement is named by its GPU."""
    fast = {**CPU, "cpu": "Intel(R) Xeon(R) Processor", "simd": "AVX-512"}

    def rec(job, hw, spu, h="h1", created="2026-12-01", gpu=None, stage_kind="model"):
        c = {"seconds_per_unit": spu, "seconds": spu * 2, **({"gpu": gpu} if gpu else {})}
        return {"kind": stage_kind, "job": job, "hardware": hw, "config_hash": h, "created": created, "cost": c}

    records = [rec("dpr", CPU, 20.0), rec("dpr", fast, 10.0),
               rec("bpr", CPU, 9.0, created="2026-11-30"), rec("bpr", CPU, 15.0, created="2026-12-02"),
               rec("bpr", fast, 10.0),
               rec("svdr", CPU, 50.0, h="old"), rec("svdr", fast, 10.0, h="new"),   # other settings: no pair
               rec("vdr", CPU, 7.0)]                                                 # one machine only
    [r] = estimate.machine_ratios(records)
    assert (r["slower"], r["faster"]) == ("AMD EPYC (AVX2, 2 cores)", "Intel(R) Xeon(R) Processor (AVX-512, 2 cores)")
    assert r["median"] == pytest.approx(1.75) and (r["low"], r["high"]) == (pytest.approx(1.5), pytest.approx(2.0))
    assert r["jobs"] == ["train bpr", "train dpr"]
    first, line = estimate.machine_lines(records)
    assert first.startswith("measured on 2 machines: each job is projected from AMD EPYC (AVX2, 2 cores) (which "
                            "measured the most jobs)")   # 4 jobs there, 3 on the Xeon
    assert "AMD EPYC (AVX2, 2 cores) took 1.75x the time a unit of Intel(R) Xeon(R) Processor" in line
    assert "median of 2 job(s) with the same settings, 1.50x to 2.00x" in line
    # listed the other way round, the same answer (the slower first); a GPU is named by its GPU
    assert estimate.machine_ratios(records[::-1])[0]["median"] == pytest.approx(1.75)
    [g] = estimate.machine_ratios([rec("dpr", GPU, 0.5, gpu="NVIDIA H200"), rec("dpr", fast, 10.0)])
    assert (g["slower"], g["faster"], g["median"]) == ("Intel(R) Xeon(R) Processor (AVX-512, 2 cores)", "NVIDIA H200", 20.0)
    assert estimate.machine_lines([rec("dpr", CPU, 20.0)]) == []


def _git(repo, *args):
    import subprocess

    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_code_id_is_the_steps_own_modules_at_a_commit_or_as_they_are_now(tmp_path, monkeypatch):
    """A job's code digest (harness.methods.code.code_id) covers the method modules its step runs, followed
    through their imports (DPR's train step: dpr.py and base.py), read from git at a record's commit or
    from the working tree; a change to one of those files changes it, a change elsewhere does not."""
    from harness.methods import code as mc

    repo = tmp_path / "repo"
    methods = repo / "harness" / "methods"
    methods.mkdir(parents=True)
    (methods / "base.py").write_text("X = 1\n")
    (methods / "dpr.py").write_text("from harness.methods.base import X\n")
    (methods / "bm25.py").write_text("Y = 2\n")
    _git(tmp_path, "init", "-q", str(repo))
    for k, v in (("user.email", "t@example.org"), ("user.name", "t")):
        _git(repo, "config", k, v)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    first = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(mc, "REPO", repo)
    mc.code_id.cache_clear()
    assert mc.code_paths("train", "dpr", "train_step") == ("harness/methods/base.py", "harness/methods/dpr.py")
    assert mc.code_paths("negatives", "bm25", "mine") == ("harness/negatives.py",)
    assert mc.code_paths("train", "a-plugin", "train_step") == ()
    now = mc.code_id("train", "dpr", "train_step")
    assert now is not None and now == mc.code_id("train", "dpr", "train_step", first)
    assert mc.code_id("train", "dpr", "train_step", first + "+dirty") == now   # read as committed
    (methods / "bm25.py").write_text("Y = 3\n")        # not DPR's code
    _git(repo, "commit", "-qam", "two")
    second = _git(repo, "rev-parse", "HEAD")
    assert mc.code_id("train", "dpr", "train_step", second) == now
    (methods / "base.py").write_text("X = 2\n")        # imported by dpr.py: DPR's code
    _git(repo, "commit", "-qam", "three")
    third = _git(repo, "rev-parse", "HEAD")
    mc.code_id.cache_clear()
    assert mc.code_id("train", "dpr", "train_step", third) == mc.code_id("train", "dpr", "train_step") != now
    assert mc.code_id("train", "dpr", "train_step", "0" * 40) is None   # a commit this clone lacks
    mc.code_id.cache_clear()


def test_a_fusion_job_runs_no_code_of_its_method():
    """A fusion job (harness.fusion.fusion_job: LightRetriever's hybrid, BM25's) is a step of the shared
    fusion module: its code digest names no method module, so a change to LightRetriever's measure jobs
    does not make its hybrid's record one of other code (it did: the step, not found in the method's
    module, fell back to the method's whole package)."""
    from harness import plan
    from harness.config import load_config
    from harness.methods.code import code_id, code_paths

    p = plan.pin(load_config(["configs/profiles/paper.yaml"]))
    key = ("search", "lightretriever.hybrid", "msmarco")
    job = p.job(*key)
    assert (job.step, job.module) == ("run_fusion", "harness.fusion") == estimate.step_of(p)(key)
    assert code_paths("search", job.method, job.step, job.module) == ()
    assert code_id("search", job.method, job.step, None, job.module) is None
    own = p.job("search", "lightretriever", "msmarco")   # the method's own search: its modules
    assert "harness/methods/lightretriever/search.py" in code_paths("search", own.method, own.step, own.module)
    assert not any("measure" in f or "speed" in f for f in code_paths("search", own.method, own.step))


def test_pick_prefers_a_record_of_todays_code_before_the_reference_machine():
    """VDR's training measured on the reference machine before its corpus was read by id took 2.4x the
    seconds a step of today's code on another machine: a record of today's code (harness.meta.code_id)
    comes before the reference machine's, after today's settings; a record without a code (and no git
    commit to read it from) counts as other code."""
    xeon = {**CPU, "cpu": "Intel(R) Xeon(R) Processor", "simd": "AVX-512"}
    old = {"hardware": xeon, "cost": {}, "created": "2026-12-02", "config_hash": "h1", "kind": "model", "job": "vdr",
           "code": "aaaa"}
    new = {"hardware": CPU, "cost": {}, "created": "2026-12-04", "config_hash": "h1", "kind": "model", "job": "vdr",
           "code": "bbbb"}
    ref = ledger.machine(old)
    assert ledger.pick([new, old], gpu_job=False, current_hash="h1", prefer=ref) is old
    assert ledger.pick([new, old], gpu_job=False, current_hash="h1", prefer=ref, code="bbbb") is new
    assert ledger.pick([new, old], gpu_job=False, current_hash="h1", prefer=ref, code="aaaa") is old
    assert ledger.pick([{**new, "config_hash": "h0"}, old], gpu_job=False, current_hash="h1", prefer=ref,
                       code="bbbb") is old   # today's settings first
    bare = {k: v for k, v in new.items() if k != "code"}
    assert ledger.code_of(bare) is None
    assert ledger.pick([bare, old], gpu_job=False, current_hash="h1", prefer=ref, code="bbbb") is old
    [filled] = estimate.with_code([bare], lambda key: ("train_step", None))   # no commit to read it from
    assert "code" not in filled
    from harness.methods.code import code_id
    head = code_id("train", "dpr", "train_step")
    if head is not None:   # a record of HEAD's commit without the field: read from git (a clone holds HEAD)
        import subprocess
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "harness/methods"], capture_output=True,
                               text=True).stdout.strip()
        [filled] = estimate.with_code([{**bare, "job": "dpr", "method": "dpr", "git_commit": sha}],
                                      lambda key: ("train_step", None))
        assert dirty or filled["code"] == head


def test_machine_ratios_say_how_many_pairs_ran_the_same_code():
    fast = {**CPU, "cpu": "Intel(R) Xeon(R) Processor", "simd": "AVX-512"}

    def rec(job, hw, spu, code):
        return {"kind": "model", "job": job, "hardware": hw, "config_hash": "h", "created": "2026-12-01",
                "cost": {"seconds_per_unit": spu}, "code": code}

    [r] = estimate.machine_ratios([rec("dpr", CPU, 20.0, "c1"), rec("dpr", fast, 10.0, "c1"),
                                   rec("vdr", CPU, 4.0, "c2"), rec("vdr", fast, 10.0, "c0")])
    assert r["jobs"] == ["train dpr", "train vdr"] and r["same_code"] == ["train dpr"]
    line = estimate.machine_lines([rec("dpr", CPU, 20.0, "c1"), rec("dpr", fast, 10.0, "c1"),
                                   rec("vdr", CPU, 4.0, "c2"), rec("vdr", fast, 10.0, "c0")])[1]
    assert "1 of them on the same code, the others' changed between the two" in line
