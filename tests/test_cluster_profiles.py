"""The cluster profiles (workflow/profiles/slurm, workflow/profiles/kubernetes) on the paper profile.

A dry run through each executor plugin (no cluster, no credentials) must plan the DAG; every planned job
is parsed from the dry-run output into (rule, resources), and each job's resources are handed to the
plugin's own code that builds the submission (the sbatch line; the pod spec), so that a job asking for
`gpu >= 1` is checked to get the executor's GPU request and a CPU-only job none. Rule names appear only
as the generic stage names of the workflow.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
import yaml

# The workflow's generic stage rules. The paper profile's neural jobs of GPU_STAGES ask for gpu=1.
STAGES = {"data", "decontam", "negatives", "train", "index", "search", "measure", "evaluate", "table",
          "claims", "regression"}
GPU_STAGES = ("train", "index", "search", "measure")
CPU_ONLY_STAGES = ("data", "table", "evaluate", "claims")
PROFILES = ("slurm", "kubernetes")

_JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (?P<rule>[\w.-]+):\s*$")
_THREADS = re.compile(r"^\s+threads: (?P<n>\d+)\s*$")
_RESOURCES = re.compile(r"^\s+resources: (?P<items>.*)$")
_ITEM = re.compile(r", (?=[A-Za-z_]\w*=)")


def _value(text: str) -> int | float | str:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_dry_run(text: str) -> list[tuple[str, dict]]:
    """Jobs of a `snakemake -n` output as (rule, resources), resources with `_threads` added."""
    jobs: list[tuple[str, dict]] = []
    for line in text.splitlines():
        if m := _JOB.match(line):
            jobs.append((m["rule"], {"_threads": 1}))
        elif jobs and (m := _THREADS.match(line)):
            jobs[-1][1]["_threads"] = int(m["n"])
        elif jobs and (m := _RESOURCES.match(line)):
            for item in _ITEM.split(m["items"].strip()):
                key, _, val = item.partition("=")
                jobs[-1][1][key.strip()] = _value(val.strip())
    return jobs


def gpus(rule: str, res: dict) -> int:
    n = res.get("gpu", 0)
    if not isinstance(n, int):
        pytest.fail(f"rule {rule}: resource gpu={n!r} is not an integer in the dry run")
    return n


class _Resources(dict):
    """The job.resources the plugins see: a mapping with attribute access."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(name) from e


def _fake_job(rule: str, res: dict) -> SimpleNamespace:
    # `<TBD>` (e.g. disk_mb from input sizes) is resolved only when the job runs: left out here
    resources = _Resources({k: v for k, v in res.items() if k != "_threads" and v != "<TBD>"})
    return SimpleNamespace(name=rule, resources=resources, threads=res["_threads"], jobid=1, attempt=1,
                           is_containerized=False, is_group=lambda: False)


def sbatch_gpu_flags(rule: str, res: dict) -> tuple[str, str]:
    """(GPU flags, whole sbatch line) that snakemake-executor-plugin-slurm builds for this job."""
    from snakemake_executor_plugin_slurm.partitions import parse_gpu_requirements
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string
    from snakemake_executor_plugin_slurm.validation import validate_slurm_extra

    job = _fake_job(rule, res)
    parse_gpu_requirements(job)  # raises on a job with both `gpu` and a gpu `gres`
    validate_slurm_extra(job)  # raises on --gpus/--gres smuggled in through slurm_extra
    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": f"rule_{rule}", "account": "",
              "partition": f"-p {res['slurm_partition']}" if res.get("slurm_partition") else "",
              "workdir": "."}
    gpu_flags = set_gres_string(job)  # the plugin appends these to the sbatch line
    return gpu_flags.strip(), get_submit_command(job, params) + gpu_flags


def k8s_container(rule: str, res: dict):
    """(pod spec, container) that snakemake-executor-plugin-kubernetes submits for this job."""
    from snakemake_executor_plugin_kubernetes import Executor

    captured = {}
    ex = Executor.__new__(Executor)  # no __post_init__: no kubeconfig, no API client
    ex.logger = SimpleNamespace(debug=lambda *a: None, info=lambda *a: None, warning=lambda *a: None,
                                error=lambda *a: None)
    ex.lock = threading.Lock()
    ex.container_image, ex.persistent_volumes, ex.privileged = "image", [], False
    ex.k8s_cpu_scalar, ex.k8s_service_account_name = 0.95, None
    ex.secret_envvars, ex.run_namespace, ex.namespace = {}, "test", "default"
    ex.batchapi = SimpleNamespace(create_namespaced_job=lambda ns, body: captured.setdefault("body", body))
    ex.format_job_exec = lambda job: "true"
    ex.report_job_submission = lambda info: None
    job = _fake_job(rule, {**res, "_cores": res["_threads"]})
    ex.run_job(job)
    pod = captured["body"].spec.template.spec
    return pod, pod.containers[0]


@pytest.fixture(scope="module", params=PROFILES)
def planned(request, repo, tmp_path_factory):
    """(profile, jobs) of a dry run of reproduce_all on the paper profile through the profile's executor."""
    profile = request.param
    pytest.importorskip(f"snakemake_executor_plugin_{profile}",
                        reason="the `cluster` extra is not installed: pip install -e '.[cluster]'")
    tmp = tmp_path_factory.mktemp(f"cluster-{profile}")
    extra: list[str] = []
    env = {**os.environ, "HARNESS_OFFLINE": "1"}
    if profile == "kubernetes":
        # The profile's fs storage prefix is the repo checkout on the cluster's shared volume: here, this
        # checkout. No kubeconfig: a dry run must not need a cluster.
        extra = ["--default-storage-prefix", str(repo)]
        env["KUBECONFIG"] = str(tmp / "no-kubeconfig")
    cmd = [sys.executable, "-m", "snakemake", "-n", "--nolock", "reproduce_all",
           "--workflow-profile", f"workflow/profiles/{profile}", *extra,
           "--configfile", "configs/profiles/paper.yaml", "--config", f"results_dir={tmp / 'results'}"]
    r = subprocess.run(cmd, check=False, cwd=repo, capture_output=True, text=True, timeout=900, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(cmd)}\n{out[-4000:]}"
    jobs = parse_dry_run(out)
    assert jobs, f"no job planned:\n{out[-3000:]}"
    assert all("mem_mb" in res for _, res in jobs), "dry-run output without resources lines"
    return profile, jobs


def test_parse_dry_run_reads_rules_and_resources():
    text = """[Mon Nov 23 05:17:30 2026]
rule train:
    output: /r/models/dpr
    jobid: 3
    wildcards: method=dpr
    threads: 16
    resources: tmpdir=/tmp, disk_mb=<TBD>, mem_mb=64000, mem=64 GB, slurm_partition=gpu, runtime=2880, gpu=1
[Mon Nov 23 05:17:30 2026]
localrule reproduce_all:
    input: /r/index.html
    jobid: 0
    resources: tmpdir=/tmp, gpu_manufacturer=nvidia, scale=0
Job stats:
job      count
"""
    (r1, a), (r2, b) = parse_dry_run(text)
    assert (r1, a["gpu"], a["mem_mb"], a["runtime"], a["_threads"], a["disk_mb"]) == \
        ("train", 1, 64000, 2880, 16, "<TBD>")
    assert a["slurm_partition"] == "gpu" and a["mem"] == "64 GB"
    assert (r2, b["gpu_manufacturer"], b["scale"], b["_threads"]) == ("reproduce_all", "nvidia", 0, 1)


@pytest.mark.parametrize("profile", PROFILES)
def test_profiles_name_only_generic_stage_rules(repo, profile):
    cfg = yaml.safe_load((repo / "workflow" / "profiles" / profile / "config.yaml").read_text())
    assert cfg["executor"] == profile
    assert set(cfg.get("set-resources") or {}) <= STAGES
    for per_rule in [cfg.get("default-resources") or {}, *(cfg.get("set-resources") or {}).values()]:
        # the GPU request comes from each job's own `gpu`; never forced by the profile
        assert "gpu" not in per_rule and "gpu" not in str(per_rule.get("gres", ""))


def test_gpu_jobs_get_the_executors_gpu_request(planned):
    profile, jobs = planned
    gpu_jobs = [(rule, res) for rule, res in jobs if gpus(rule, res) >= 1]
    for rule, res in gpu_jobs:
        n = gpus(rule, res)
        if profile == "slurm":
            flags, call = sbatch_gpu_flags(rule, res)
            model = f"{res['gpu_model']}:" if res.get("gpu_model") else ""
            assert flags == f"--gpus={model}{n}", (rule, res, call)
            assert f" -t {res['runtime']}" in call and f"--mem {res['mem_mb']}" in call, (rule, call)
        else:
            pod, container = k8s_container(rule, res)
            vendor = str(res.get("gpu_manufacturer", "")).lower()
            assert vendor in ("nvidia", "amd"), (rule, res)
            key = f"{vendor}.com/gpu"
            # Kubernetes schedules a GPU only with a limit (requests alone are rejected)
            assert container.resources.limits and container.resources.limits.get(key) == str(n), (rule, res)
            assert container.resources.requests.get(key) == str(n)
            assert any(t.key == key for t in pod.tolerations or []), (rule, res)
    per_stage = {s: sum(1 for rule, _ in gpu_jobs if rule == s) for s in GPU_STAGES}
    print(f"{profile}: GPU jobs per stage {per_stage}, of {len(jobs)} jobs")


def test_paper_profile_trains_on_a_gpu(planned):
    profile, jobs = planned
    train = [res for rule, res in jobs if rule == "train"]
    assert train, f"{profile}: no job of rule 'train' planned (rules: {sorted({r for r, _ in jobs})})"
    assert any(gpus("train", res) >= 1 for res in train), \
        f"{profile}: no job of rule 'train' asks for a GPU: {[res.get('gpu') for res in train]}"


def test_cpu_only_stages_ask_for_no_gpu(planned):
    profile, jobs = planned
    cpu_jobs = [(rule, res) for rule, res in jobs if rule in CPU_ONLY_STAGES]
    assert {rule for rule, _ in cpu_jobs} >= {"table", "evaluate", "claims"}, sorted({r for r, _ in jobs})
    for rule, res in cpu_jobs:
        assert gpus(rule, res) == 0, (rule, res)
        if profile == "slurm":
            flags, call = sbatch_gpu_flags(rule, res)
            assert flags == "" and "--gpus" not in call and "--gres" not in call, (rule, call)
        else:
            _, container = k8s_container(rule, res)
            for amounts in (container.resources.requests or {}, container.resources.limits or {}):
                assert all(v == "0" for k, v in amounts.items() if k.endswith(".com/gpu")), (rule, amounts)
