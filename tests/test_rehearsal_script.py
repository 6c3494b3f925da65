"""scripts/rehearsal_gpu.sh (#28 item 5): the rehearsal's jobs through their stage commands on a
machine without Snakemake, a train job's model read by the index and search jobs after it, every
job's meta.json gathered in the results layout that ``python -m harness estimate --measured`` reads.
Run here on the smoke profile's DPR (CPU), its data and BM25 negatives made by their stage commands."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_gpu_script_chains_train_index_and_search_into_the_results_layout(tmp_path):
    from harness import config as hconfig
    from harness import estimate

    cfg = hconfig.load_config([])
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["methods"]["dpr"].update(bm25_rerank_depths=[], epochs=1, max_train_questions=32)  # no BM25 run read; 2 steps
    root = tmp_path / "results" / "smoke"
    root.mkdir(parents=True)
    hconfig.dump(cfg, root / "config.yaml")
    for stage, job, out in (("data", [], root / "data" / "smoke"),  # what Snakemake prepares where it runs
                            ("index", ["--job", "bm25"], root / "indexes" / "bm25" / "smoke"),
                            ("negatives", [], root / "negatives" / "smoke.jsonl")):
        subprocess.run([sys.executable, "-m", "harness", stage, "--config", str(root / "config.yaml"), *job,
                        "--dataset", "smoke", "--out", str(out)], cwd=REPO, check=True, capture_output=True, timeout=600)
    out = tmp_path / "out"
    env = {**os.environ, "CONFIG": str(root / "config.yaml"),
           "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "rehearsal_gpu.sh"), str(out), "900", "dpr=600",
                           "index:dpr:smoke=300", "search:dpr:smoke=300", "index:dpr:nosuch=60", "sample:dpr=5"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in ("train dpr: rc 0", "index dpr-smoke: rc 0", "search dpr-smoke: rc 0"):
        assert line in summary, summary
    assert "index dpr-nosuch: rc 2" in summary and "data/nosuch) does not exist" in summary  # its error line kept
    assert "sample:dpr: unknown stage sample" in summary
    index = json.loads((out / "indexes" / "dpr" / "smoke" / "meta.json").read_text(encoding="utf-8"))
    assert index["inputs"]["model"] == str(root / "models" / "dpr")  # the model the script trained
    assert index["cost"]["pricing"] == "steady" and index["cost"]["fixed_seconds"] > 0  # its model's load paid once
    run = json.loads((out / "runs" / "smoke" / "dpr" / "meta.json").read_text(encoding="utf-8"))
    assert run["inputs"]["index"] == str(root / "indexes" / "dpr" / "smoke")
    assert (out / "logs" / "train" / "dpr.log").is_file() and (out / "models" / "dpr" / "loss.tsv").is_file()
    rows = {r["stage"]: r for r in estimate.estimate(cfg, out)}  # the smoke profile's plan
    assert set(rows) == {"train", "index", "search"} and all(r["measured_seconds"] > 0 for r in rows.values())
