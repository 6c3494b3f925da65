"""Runs derived from runs, shared by every method: fusion of two or more runs.

* ``rrf``: reciprocal rank fusion, score = sum over runs of 1 / (rrf_k + rank) (Cormack et al., 2009;
  rrf_k = 60 by default, as pyserini and QCR/LightRetriever's hybrid runs use it);
* ``interpolate``: per-query min-max normalised linear interpolation of two runs,
  alpha * norm(s_1) + (1 - alpha) * norm(s_2) (LightRetriever's dense + sparse hybrid).

Both are pyserini's fusion (``pyserini.fusion``, the library every BM25 run here already goes
through; importing it does not start the JVM), not hand-written. A method declares a fused system
with :func:`fusion_job`; the job runs :func:`run_fusion` like any other search step.
"""
from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.plan import Job, Ref

HOWS = ("rrf", "interpolate")
Hits = dict[str, list[tuple[str, float]]]


def fuse(runs: Sequence[Mapping[str, Sequence[tuple[str, float]]]], how: str, *, k: int, depth: int | None = None,
         rrf_k: int = 60, alpha: float = 0.5) -> Hits:
    """Fuse runs ({qid: [(docid, score), ...]}, best first) into one of depth ``k`` per query."""
    from pyserini.fusion import interpolation, reciprocal_rank_fusion
    from pyserini.trectools import RescoreMethod, TrecRun

    from harness.runs import read_run, write_run

    if how not in HOWS:
        raise ConfigError(f"unknown fusion {how!r}; known: {', '.join(HOWS)}")
    if len(runs) < 2 or (how == "interpolate" and len(runs) != 2):
        raise ConfigError(f"fusion {how!r} takes {'exactly two' if how == 'interpolate' else 'two or more'} runs, "
                          f"got {len(runs)}")
    with tempfile.TemporaryDirectory(prefix="fusion-") as tmp:
        trec = []
        for i, run in enumerate(runs):
            path = Path(tmp) / f"{i}.trec"
            write_run(path, run, tag=f"run{i}")
            trec.append(TrecRun(str(path)))
        if how == "rrf":
            fused = reciprocal_rank_fusion(trec, rrf_k=rrf_k, depth=depth, k=k)
        else:
            normed = [r.clone().rescore(method=RescoreMethod.NORMALIZE) for r in trec]
            fused = interpolation(normed, alpha=alpha, depth=depth, k=k)
        out = Path(tmp) / "fused.trec"
        fused.save_to_txt(str(out), tag="fused")
        return read_run(out)


def fusion_job(system: str, method: str, dataset: str, runs: Sequence[str], how: str,
               keys: tuple[str, ...] = (), **params: Any) -> Job:
    """A search job writing ``system``: the fusion of the runs of ``runs`` (system ids) on ``dataset``."""
    if how not in HOWS:
        raise ConfigError(f"system {system}: unknown fusion {how!r}; known: {', '.join(HOWS)}")
    return Job("search", system, method, "run_fusion", dataset, module=__name__, systems=(system,),
               keys=("evaluate.depth", *keys), params={"how": how, "runs": list(runs), **params},
               inputs={f"run_{i}": Ref("system", s, dataset) for i, s in enumerate(runs)})


def run_fusion(ctx: Any, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    from harness.artifacts import write_run_with_meta
    from harness.runs import read_run

    p = dict(job.params)
    runs = [read_run(inputs[f"run_{i}"] / f"{s}.trec") for i, s in enumerate(p.pop("runs"))]
    how = p.pop("how")
    fused = fuse(runs, how, k=ctx.cfg["evaluate"]["depth"], **p)
    write_run_with_meta(out / f"{job.systems[0]}.trec", fused, system=job.systems[0],
                        meta={"dataset": job.dataset, "fusion": how, "runs": job.params["runs"], **p})
    return {"fusion": how}
