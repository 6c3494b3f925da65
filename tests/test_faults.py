"""Fault injection: damaged mirror files of each format, stale inputs of every kind, a write that
runs out of space, a temporary a killed job left, a job SIGKILLed mid-write and rerun (slow: it reuses
the smoke DAG's results). Each fault ends in one clear error or is repaired; nothing half-written
looks finished."""
from __future__ import annotations

import errno
import gzip
import hashlib
import json
from pathlib import Path

import pytest

from harness import plan as hp
from harness.config import load_config
from harness.datasets.download import RemoteFile, Unavailable, fetch
from harness.errors import ConfigError, DataError
from harness.io import atomic_path, atomic_write_text
from harness.meta import write_meta

GOOD = {
    "corpus.jsonl.gz": gzip.compress(b'{"_id": "d1", "text": "a passage"}\n', mtime=0),
    "queries.jsonl": b'{"id": "q1", "text": "a question"}\n',
    "topics.tsv": b"q1\ta question\n",
    "dev.json": json.dumps({"data": [{"title": "t"}]}).encode(),
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_a_damaged_mirror_file_of_each_format_is_one_error_naming_it(tmp_path, monkeypatch, name):
    monkeypatch.delenv("HARNESS_DATA_MIRROR", raising=False)
    good = GOOD[name]
    f = RemoteFile(f"set/{name}", f"https://example.org/{name}", sha256=hashlib.sha256(good).hexdigest())
    mirror = tmp_path / "mirror"
    (mirror / "set").mkdir(parents=True)
    (mirror / "set" / name).write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(DataError) as exc:
        fetch(f, cache_dir=tmp_path / "cache", mirrors=[mirror], offline=False)
    msg = str(exc.value)
    assert not isinstance(exc.value, Unavailable)  # damaged, not absent: no other source is tried
    assert f"{mirror / 'set' / name}" in msg and "corrupted" in msg and "sha256" in msg
    (mirror / "set" / name).write_bytes(good)  # the good copy: served from the mirror in place
    assert fetch(f, cache_dir=tmp_path / "cache", mirrors=[mirror], offline=True) == mirror / "set" / name


def _fake(p: hp.Plan, job: hp.Job) -> Path:
    """What a job of ``p`` leaves: its output (a folder, or the negatives' file) and its meta.json."""
    out = hp.output(p.cfg, job)
    extra = {"job": job.id, "method": job.method, "config_values": p.values(job), "input_hashes": p.input_hashes(job)}
    if job.stage == "negatives":
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text('{"id": "q1", "negatives": []}\n')
        Path(f"{out}.meta.json").write_text(json.dumps({"kind": "negatives", "config_hash": p.hash(job),
                                                        "config_values": p.values(job)}))
        return out
    out.mkdir(parents=True)
    write_meta(out, job.stage, spec=job.id, config_hash=p.hash(job), seconds=0.0, extra=extra)
    return out


@pytest.mark.parametrize("stage, id_, dataset, role, key, a, b, says", [
    ("decontam", "decontam", None, "decontam", "decontam.k", 2, 8, "config key decontam changed"),
    ("negatives", "negatives", "smoke", "negatives", "negatives.keep", 3, 5, "config key negatives changed"),
    ("train", "dpr", None, "model", "methods.dpr.lr", 1e-3, 2e-3, "config key methods.dpr.lr changed"),
    ("index", "dpr", "smoke", "index", "methods.dpr.lr", 1e-3, 2e-3, "its input model"),
    ("search", "dpr", "smoke", "run", "methods.dpr.lr", 1e-3, 2e-3, "its input"),
])
def test_a_stale_input_of_every_kind_is_refused_naming_what_changed(tmp_path, stage, id_, dataset, role, key, a, b,
                                                                    says):
    mk = lambda v: hp._cached.__wrapped__(json.dumps(  # noqa: E731 (a fresh plan per value)
        load_config([], overrides={"results_dir": str(tmp_path), key: v}), sort_keys=True, default=str))
    old, new = mk(a), mk(b)
    job = old.job(stage, id_, dataset)
    where = _fake(old, job)
    ref = hp.output_ref(job)
    assert hp.check_input(old, role, ref) == where
    with pytest.raises(ConfigError, match=says) as exc:
        hp.check_input(new, role, ref)
    assert str(where) in str(exc.value) and "delete" in str(exc.value)


def test_a_write_that_runs_out_of_space_leaves_nothing(tmp_path, monkeypatch):
    """ENOSPC in the middle of a write: the exception reaches the caller, the old file stays as it
    was, no new file and no temporary remain."""
    target = tmp_path / "out" / "table.csv"
    atomic_write_text(target, "old\n")

    def full(self, data, *a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"), atomic_path(target) as tmp:
        monkeypatch.setattr(Path, "write_text", full)
        tmp.write_text("new\n")
    monkeypatch.undo()
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["table.csv"]


def test_a_temporary_a_killed_job_left_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "indexes" / "dpr" / "smoke"
    left = target.parent / ".smoke.abcd1234.tmp"
    (left / "smoke").mkdir(parents=True)
    (left / "smoke" / "index.faiss").write_bytes(b"\0" * 64)
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "index.faiss").write_bytes(b"\1" * 64)
    assert sorted(p.name for p in target.parent.iterdir()) == ["smoke"]


@pytest.mark.slow
def test_a_killed_job_leaves_nothing_finished_and_its_rerun_is_the_clean_run(smoke_run, tmp_path, repo):
    """A train job SIGKILLed while it writes: no model folder appears (only its temporary); the rerun
    removes the temporary and writes the same bytes as the smoke DAG's clean run of the same job, and
    the index, runs and evaluations built from it equal the DAG's (the same seed twice, end to end)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    done, r = smoke_run
    assert r.returncode == 0
    root = tmp_path / "smoke"
    for part in ("data", "negatives", "decontam"):
        shutil.copytree(done / "smoke" / part, root / part)
    cfg = tmp_path / "here.yaml"
    cfg.write_text(f"results_dir: {tmp_path}\n")
    out = root / "models" / "bpr"
    cmd = [sys.executable, "-m", "harness", "train", "--config", str(cfg), "--job", "bpr", "--out", str(out)]
    job = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    t0 = time.time()
    while not list(out.parent.glob(".bpr.*.tmp")) and job.poll() is None and time.time() - t0 < 120:
        time.sleep(0.05)
    time.sleep(1.0)   # inside the training loop
    assert job.poll() is None, "the job ended before it could be killed"
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    assert not out.exists() and list(out.parent.glob(".bpr.*.tmp"))   # nothing that looks finished
    subprocess.run(cmd, cwd=repo, check=True, capture_output=True)
    assert sorted(p.name for p in out.parent.iterdir()) == ["bpr"]   # the temporary is gone
    clean = done / "smoke" / "models" / "bpr"
    side_files = ("meta.json", ".snakemake_timestamp")   # when it was written, and Snakemake's own marker

    def files(folder: Path) -> list[Path]:
        return sorted(p.relative_to(folder) for p in folder.rglob("*")
                      if p.is_file() and p.name not in side_files)

    assert files(clean) == files(out)
    deterministic = [f for f in files(clean) if f.name != "loss.tsv"]   # loss.tsv holds wall seconds
    assert deterministic and all((out / f).read_bytes() == (clean / f).read_bytes() for f in deterministic)
    # the same seed twice, downstream too: the rerun model's index, runs and evaluations equal the DAG's
    here = load_config([cfg])
    for stage, id_, kind in (("index", "bpr", "index"), ("index", "bpr.hash", "index"), ("search", "bpr", "run"),
                             ("evaluate", "bpr", "eval")):
        where = hp.path(here, hp.Ref(kind, id_, "smoke"))
        subprocess.run([sys.executable, "-m", "harness", stage, "--job", id_, "--dataset", "smoke",
                        "--out", str(where), "--config", str(cfg)], cwd=repo, check=True, capture_output=True)
    runs = sorted((done / "smoke" / "runs" / "smoke" / "bpr").glob("*.trec"))
    assert runs and all((root / "runs" / "smoke" / "bpr" / r.name).read_bytes() == r.read_bytes() for r in runs)
    for ev in sorted((done / "smoke" / "eval" / "smoke" / "bpr").glob("*.json")):
        assert json.loads((root / "eval" / "smoke" / "bpr" / ev.name).read_text())["measures"] == \
            json.loads(ev.read_text())["measures"], ev.name
