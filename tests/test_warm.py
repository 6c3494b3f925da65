"""Warm start (harness.warm): which commands a warm server takes, under which environment, and that
a Snakemake run whose jobs were forked by warm servers writes the same models, index and runs as
one whose jobs each started cold."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import warm


def test_fingerprint_moves_with_load_time_variables_only():
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "2", "HOME": "/root"}
    assert warm.fingerprint(base) == warm.fingerprint({**base, "PATH": "/usr/bin", "HARNESS_X": "1", "TMPDIR": "/t"})
    for name in ("OMP_NUM_THREADS", "MKL_CBWR", "OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY", "CUDA_VISIBLE_DEVICES",
                 "HF_HOME", "PYTHONHASHSEED"):
        assert warm.fingerprint(base) != warm.fingerprint({**base, name: "other"}), name


def test_only_stage_jobs_go_to_a_server_and_each_under_its_numerics_mode(tmp_path):
    assert warm.mode_of(["train", "--job", "dpr", "--out", "x"]) == "portable"
    assert warm.mode_of(["--log", "l.log", "index", "--job", "dpr", "--dataset", "smoke", "--out", "x"]) == "portable"
    assert warm.mode_of(["--log=l.log", "search", "--job=dpr", "--dataset", "smoke", "--out", "x"]) == "portable"
    assert warm.mode_of(["measure", "--job", "dpr.speed", "--out", "x"]) == "native"
    native = tmp_path / "native.yaml"
    native.write_text("numerics: native\n")
    assert warm.mode_of(["train", "--config", str(native), "--job", "dpr", "--out", "x"]) == "native"
    assert warm.mode_of(["evaluate", "--job", "dpr", "--dataset", "smoke", "--out", "x"]) == "native"
    assert warm.mode_of(["--log", "l.log", "table", "--paper", "dpr", "--table", "2"]) == "native"
    for argv in (["search", "--index", "i", "--topics", "t", "--output", "o"], ["evaluate", "qrels", "run", "nDCG@10"],
                 ["table", "--help"], ["data", "--dataset", "smoke"], ["report"], [], ["--log", "l.log"]):
        assert warm.mode_of(argv) is None, argv


def test_a_server_runs_in_the_mode_s_environment():
    env = {"PATH": "/bin"}
    portable, native = warm.socket_path(Path("/d"), "portable", warm._mode_env("portable", env)), \
        warm.socket_path(Path("/d"), "native", warm._mode_env("native", env))
    assert portable.name.startswith("portable-") and native.name.startswith("native-")
    assert portable.name[len("portable-"):] != native.name[len("native-"):]   # portable's variables are set


def test_no_server_means_the_command_runs_cold(tmp_path, monkeypatch):
    monkeypatch.delenv(warm.ENV_DIR, raising=False)
    assert warm.run(["train", "--job", "dpr", "--out", str(tmp_path / "m")]) is None
    monkeypatch.setenv(warm.ENV_DIR, str(tmp_path))          # a folder, but no server and no run to tie one to
    monkeypatch.delenv(warm.ENV_PARENT, raising=False)
    assert warm.run(["train", "--job", "dpr", "--out", str(tmp_path / "m")]) is None
    assert not list(tmp_path.glob("*"))                     # no socket, log or start marker left
    monkeypatch.setenv("HARNESS_WARM", "0")
    assert warm.run(["train", "--job", "dpr", "--out", str(tmp_path / "m")]) is None


def _files(folder: Path) -> dict[str, str]:
    """sha256 of every file but meta.json (times, hosts, warm_start) and snakemake's stamps."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith("meta.json") and not p.name.startswith(".snakemake")
            and p.name != "loss.tsv"}


def _dag(repo: Path, out: Path, warm_on: bool) -> dict[str, Path]:
    overlay = out / "overlay.yaml"
    out.mkdir(parents=True)
    overlay.write_text(yaml.safe_dump({"methods": {"dpr": {"epochs": 1, "max_train_questions": 96}}}))
    R = out / "smoke"
    targets = {"model": R / "models" / "dpr", "index": R / "indexes" / "dpr" / "smoke", "run": R / "runs" / "smoke" / "dpr"}
    env = {**os.environ, "HARNESS_WARM": "1" if warm_on else "0"}
    r = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "--cores", "2", *map(str, targets.values()),
                        "--configfile", str(overlay), "--config", f"results_dir={out}"],
                       cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return targets


@pytest.mark.slow
def test_warm_jobs_write_what_cold_jobs_write(repo, tmp_path):
    cold = _dag(repo, tmp_path / "cold", warm_on=False)
    hot = _dag(repo, tmp_path / "warm", warm_on=True)
    started = {k: json.loads((p / "meta.json").read_text())["warm_start"] for k, p in hot.items()}
    assert all(started.values()), started     # the train job started the server and waited for it
    assert not any(json.loads((p / "meta.json").read_text())["warm_start"] for p in cold.values())
    for key in cold:
        assert _files(hot[key]) and _files(hot[key]) == _files(cold[key]), key


def test_preloading_starts_no_thread_a_fork_would_lose(repo):
    """The server forks its jobs: a thread alive at the fork is not in the child (a lock it holds
    stays held). Preloading may add no thread beyond OpenBLAS's pools, which numpy and scipy start
    when they load and re-create after a fork."""
    probe = ("import os\nfrom harness import numerics, warm\nnumerics.apply('portable')\n"
             "import numpy, scipy.linalg\nbase = len(os.listdir('/proc/self/task'))\n"
             "done = warm.preload()\nprint(base, len(os.listdir('/proc/self/task')), ' '.join(done))\n")
    r = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    base, after, *done = r.stdout.split()
    assert after == base, f"preloading {warm.PRELOAD} started {int(after) - int(base)} thread(s)"
    assert {"torch", "transformers.modeling_utils", "transformers.models.bert.modeling_bert"} <= set(done)
    assert not {"pyserini", "jnius", "pandas"} & set(done)


def test_a_client_returns_once_its_child_has_exited_not_at_its_status():
    """The child sends its status and then exits; the client waits for its end of the socket to close
    (at exit, after its memory is released) so that the next job's memory guard sees that memory free.
    A child that holds on past the limit is not waited for beyond it."""
    import socket
    import time

    for linger, limit, waited in ((1.0, 30.0, True), (30.0, 0.5, False)):
        ours, theirs = socket.socketpair()
        child = subprocess.Popen([sys.executable, "-c", f"import os, socket, time; s = socket.socket(fileno={theirs.fileno()}); "
                                  f"s.sendall(b'X'); time.sleep({linger})"], pass_fds=[theirs.fileno()])
        theirs.close()
        try:
            assert ours.recv(1) == b"X"
            t0 = time.perf_counter()
            warm._await_exit(ours, limit)
            took = time.perf_counter() - t0
            if waited:
                assert took > 0.5 and child.wait(timeout=5) == 0, took
            else:
                assert took < 10 and child.poll() is None, took
        finally:
            child.kill()
            child.wait()
            ours.close()
