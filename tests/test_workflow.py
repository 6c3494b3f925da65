"""The Snakemake workflow: a named table target, lint, config errors, a full smoke run (each profile's dry run: tests/test_plan.py)."""
from __future__ import annotations

import csv
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def smk(repo: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(SNAKEMAKE + ["--nolock", *args], cwd=repo, capture_output=True, text=True, timeout=timeout)


def test_named_table_target(repo, tmp_path):
    r = smk(repo, "-n", "svdr_table1", "--config", f"results_dir={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"{tmp_path}/tables/svdr/1.md" in r.stdout + r.stderr


def test_lint_is_clean(repo):
    r = smk(repo, "--lint")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "Congratulations" in r.stdout + r.stderr


def test_misspelled_config_key_fails_before_any_rule(repo, tmp_path):
    r = smk(repo, "-n", "reproduce_all", "--config", f"results_dir={tmp_path}", "seeed=3")
    assert r.returncode != 0
    assert "unknown key 'seeed' (did you mean 'seed'?)" in r.stderr
    assert not (tmp_path / "smoke").exists()


def test_a_dry_run_writes_nothing_into_the_results_tree(repo, tmp_path):
    """A dry run with another config must not rewrite the config.yaml that a run in the same results
    tree reads (a dry run of small without an overlay once rewrote a running small run's config, and
    its next job refused a model built with the old one); a real run writes it before its first job."""
    from harness.workflow import dry_run_argv

    r = smk(repo, "--cores", "1", "--config", f"results_dir={tmp_path}", "--", f"{tmp_path}/smoke/data/smoke")
    assert r.returncode == 0, r.stderr[-2000:]
    cfg = tmp_path / "smoke" / "config.yaml"
    before = cfg.read_text()
    assert "seed: 13" in before
    for flags in (["-n"], ["-np"], ["--dry-run"]):
        r = smk(repo, *flags, "reproduce_all", "--config", f"results_dir={tmp_path}", "seed=99")
        assert r.returncode == 0, r.stderr[-2000:]
        assert cfg.read_text() == before, flags
    r = smk(repo, "--cores", "1", "--config", f"results_dir={tmp_path}", "seed=99", "--", f"{tmp_path}/smoke/data/smoke")
    assert r.returncode == 0 and "seed: 99" in cfg.read_text()  # a real run writes its own
    assert dry_run_argv(["-n", "--cores", "1"]) and dry_run_argv(["--cores", "1", "-pn"])
    assert not dry_run_argv(["--cores", "1", "--configfile", "x.yaml"]) and not dry_run_argv(["--", "-n"])
    assert not dry_run_argv(["--forceall", "-p"])


def test_conda_env_pins_match_pyproject(repo):
    deps = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((repo / "workflow" / "envs" / "harness.yaml").read_text())
    pip = next(d for d in env["dependencies"] if isinstance(d, dict))["pip"]
    assert sorted(pip) == sorted(deps)


@pytest.mark.slow
def test_full_smoke_run(smoke_run):
    """The whole DAG on the smoke profile, into a temporary results folder (shared with the report's browser test)."""
    tmp_path, r = smoke_run
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    with open(tmp_path / "tables" / "svdr" / "1.csv", encoding="utf-8") as fh:
        rows = {(x["row"], x["column"]): x for x in csv.DictReader(fh)}
    for system in ("DPR", "BM25"):
        for k in ("1", "5", "20"):
            cell = rows[(system, f"NQ top{k}")]
            assert cell["status"] == "stand-in" and 0.0 <= float(cell["measured"]) <= 100.0
    assert (tmp_path / "index.html").exists() and (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "smoke" / "regression.json").exists()
    # the log says which paper tables each job serves
    assert "index svdr.token on smoke: serves svdr Table 1" in r.stdout + r.stderr
    claims = list(csv.DictReader(open(tmp_path / "claims" / "smoke.csv", encoding="utf-8")))
    from harness.claims import COLUMNS

    assert claims and list(claims[0]) == COLUMNS  # the aggregates' comparison and its evidence (verdict, p, CI, n)
    assert {r["verdict"] for r in claims} <= {"holds", "holds (not significant)", "fails (not significant)", "fails",
                                              "holds (exact)", "fails (exact)", "holds (untested)", "fails (untested)",
                                              "not run", "did not learn"}
    assert any(r["test"].startswith("paired") and int(r["n"]) > 0 for r in claims)  # smoke's effectiveness claims are tested
    hashing = next(r for r in claims if r["claim_id"] == "bpr-hash-lookup-faster-than-linear-scan")
    assert hashing["test"].startswith("paired") and int(hashing["n"]) > 0  # a timing kept per question is tested
    # every method's own model got its learning check; smoke's DPR learned on its 63 test questions
    learned = list(csv.DictReader(open(tmp_path / "learning" / "smoke.csv", encoding="utf-8")))
    assert {r["model"] for r in learned if r["measure"]} == {"dpr", "svdr", "vdr", "bpr", "qcr", "lightretriever",
                                                             "densephrases"}
    dpr = next(r for r in learned if r["model"] == "dpr")
    assert dpr["verdict"] == "learned" and dpr["queries"] == "63" and float(dpr["ci_low"]) > 0
    # smoke's budgets are chosen so that each method's own model learns (portable numerics: the same bits anywhere)
    assert {r["model"]: r["verdict"] for r in learned if r["measure"]} == dict.fromkeys(
        ("dpr", "svdr", "vdr", "bpr", "qcr", "lightretriever", "densephrases"), "learned")
    assert (tmp_path / "site" / "learning.html").exists()
    # every published table rendered
    n_tables = sum(1 for _ in (tmp_path / "tables").rglob("*.md"))
    assert n_tables >= 37
    # every artifact carries its metadata
    for folder in ["data/smoke", "indexes/bm25/smoke", "indexes/dpr/smoke", "models/dpr"]:
        meta = yaml.safe_load((tmp_path / "smoke" / folder / "meta.json").read_text())
        assert meta["git_commit"] and meta["versions"]["torch"]


@pytest.mark.slow
def test_smoke_jobs_read_only_settings_their_hashes_cover(smoke_run, repo):
    """Every job of the smoke DAG ran with a recording view of the config (meta.json settings_read):
    a setting it read that neither its hash nor its inputs' hashes cover would leave its artifact
    stale when changed (harness.plan.Plan.unhashed_reads)."""
    from harness import plan as hplan
    from harness.config import load_config

    tmp_path, r = smoke_run
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    cfg = load_config([tmp_path / "smoke" / "config.yaml"])
    metas = list((tmp_path / "smoke").glob("*/**/meta.json"))
    assert sum(1 for m in metas if "settings_read" in m.read_text(encoding="utf-8")) > 50
    found = hplan.unhashed_in_results(cfg)
    assert not found, "settings read but not hashed:\n" + "\n".join(f"  {k}: {', '.join(v)}" for k, v in found.items())


def test_steady_scheduler_drops_only_a_local_runs_default_rate_limit():
    """Snakemake's default job-rate limiter makes its local scheduler loop spin (snakemake#3744):
    the Snakefile's onstart drops it for a local run, and only the default one."""
    from types import SimpleNamespace

    from snakemake.scheduling.job_scheduler import JobRateLimiter
    from snakemake.settings.types import MaxJobsPerTimespan

    from harness.workflow import steady_scheduler

    def wf(limit: str, local: bool = True):
        return SimpleNamespace(local_exec=local, scheduler=SimpleNamespace(
            job_rate_limiter=JobRateLimiter(MaxJobsPerTimespan.parse_choice(limit))))

    local = wf("100/1s")
    assert steady_scheduler(local) and local.scheduler.job_rate_limiter is None
    for kept in (wf("100/1s", local=False), wf("10/1m")):
        assert not steady_scheduler(kept) and kept.scheduler.job_rate_limiter is not None
    assert not steady_scheduler(SimpleNamespace(local_exec=True))   # no scheduler (a dry run's onstart)
