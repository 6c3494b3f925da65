"""Runs derived from runs, shared by every method: fusion of two or more runs.

* ``rrf``: reciprocal rank fusion, score = sum over runs of 1 / (rrf_k + rank) (Cormack et al., 2009;
  rrf_k = 60 by default, as pyserini and QCR/LightRetriever's hybrid runs use it); optionally
  weighted, score = sum over runs i of w_i / (rrf_k + rank_i) (QCR's code + dense hybrid);
* ``interpolate``: per-query min-max normalised linear interpolation of two runs,
  alpha * norm(s_1) + (1 - alpha) * norm(s_2) (LightRetriever's dense + sparse hybrid).

Both are pyserini's fusion (``pyserini.fusion``, the library every BM25 run here already goes
through; importing it does not start the JVM), not hand-written; weighted rrf chains the same
``pyserini.trectools`` steps with a scaling between them. A method declares a fused system
with :func:`fusion_job`; the job runs :func:`run_fusion` like any other search step.
"""
from __future__ import annotations

import math
import numbers
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.job import Job, Ref

HOWS = ("rrf", "interpolate")
Hits = dict[str, list[tuple[str, float]]]


def check_weights(weights: Sequence[float] | None, n_runs: int, how: str, where: str) -> list[float] | None:
    """``weights`` as floats, one per run, >= 0 and not all 0 (None stays None: unweighted);
    ``where`` (e.g. ``system qcr-hybrid``) names the thing in the ConfigError."""
    if weights is None:
        return None
    if how != "rrf":
        raise ConfigError(f"{where}: weights apply to rrf fusion only, not {how!r}",
                          fix="drop weights (interpolate weighs its two runs with alpha)")
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise ConfigError(f"{where}: rrf weights must be a list of numbers, one per run, got {weights!r}")
    if len(weights) != n_runs:
        raise ConfigError(f"{where}: {len(weights)} rrf weights for {n_runs} runs", fix="give one weight per run")
    out = []
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not (math.isfinite(w) and w >= 0):
            raise ConfigError(f"{where}: rrf weight {w!r} is not a finite number >= 0", fix="use weights like [0.6, 0.4]")
        out.append(float(w))
    if not any(out):
        raise ConfigError(f"{where}: all rrf weights are 0", fix="give at least one run a positive weight")
    return out


def fuse(runs: Sequence[Mapping[str, Sequence[tuple[str, float]]]], how: str, *, k: int, depth: int | None = None,
         rrf_k: int = 60, alpha: float = 0.5, weights: Sequence[float] | None = None) -> Hits:
    """Fuse runs ({qid: [(docid, score), ...]}, best first) into one of depth ``k`` per query.

    A document's rank in a run is its place in that run's list (from 1; input scores are not used by
    rrf, so tied input scores keep their list order). ``depth`` keeps each run's first ``depth``
    documents per query after ranking (ranks unchanged). rrf: score(d) = sum_i w_i * 1 / (rrf_k +
    rank_i(d)) (computed in that order, float64), a run without d adds 0; ``weights`` (one per run,
    >= 0, not all 0) default to 1 each, and ``None`` runs pyserini's ``reciprocal_rank_fusion``
    itself. With weights, each run is
    rescored as pyserini's rrf does (``RescoreMethod.RRF``: 1 / (rrf_k + rank)), then multiplied by
    its weight (``RescoreMethod.SCALE``), then summed (``TrecRun.merge`` with ``AggregationMethod.SUM``,
    which applies ``depth`` and ``k``) — the steps of ``reciprocal_rank_fusion`` plus the scaling,
    so weights of 1 give the unweighted scores bit for bit. A document only in runs of weight 0
    stays in the union with score 0. Equal fused scores are ordered by doc id ascending (pyserini)."""
    from pyserini.fusion import interpolation, reciprocal_rank_fusion
    from pyserini.trectools import AggregationMethod, RescoreMethod, TrecRun

    from harness.runs import read_run, write_run

    if how not in HOWS:
        raise ConfigError(f"unknown fusion {how!r}; known: {', '.join(HOWS)}")
    if len(runs) < 2 or (how == "interpolate" and len(runs) != 2):
        raise ConfigError(f"fusion {how!r} takes {'exactly two' if how == 'interpolate' else 'two or more'} runs, "
                          f"got {len(runs)}")
    weights = check_weights(weights, len(runs), how, f"fusion {how!r}")
    with tempfile.TemporaryDirectory(prefix="fusion-") as tmp:
        trec = []
        for i, run in enumerate(runs):
            path = Path(tmp) / f"{i}.trec"
            write_run(path, run, tag=f"run{i}")
            trec.append(TrecRun(str(path)))
        if how == "rrf" and weights is None:
            fused = reciprocal_rank_fusion(trec, rrf_k=rrf_k, depth=depth, k=k)
        elif how == "rrf":
            scaled = [r.clone().rescore(method=RescoreMethod.RRF, rrf_k=rrf_k).rescore(method=RescoreMethod.SCALE, scale=w)
                      for r, w in zip(trec, weights)]
            fused = TrecRun.merge(scaled, AggregationMethod.SUM, depth=depth, k=k)
        else:
            normed = [r.clone().rescore(method=RescoreMethod.NORMALIZE) for r in trec]
            fused = interpolation(normed, alpha=alpha, depth=depth, k=k)
        out = Path(tmp) / "fused.trec"
        fused.save_to_txt(str(out), tag="fused")
        return read_run(out)


def fusion_job(system: str, method: str, dataset: str, runs: Sequence[str], how: str,
               keys: tuple[str, ...] = (), weights: Sequence[float] | None = None, **params: Any) -> Job:
    """A search job writing ``system``: the fusion of the runs of ``runs`` (system ids) on ``dataset``.
    ``weights`` (rrf only, one per run; see :func:`fuse`) land in ``job.params`` as floats, so the plan
    hashes them; unweighted jobs carry no ``weights`` param (their hashes are as before)."""
    if how not in HOWS:
        raise ConfigError(f"system {system}: unknown fusion {how!r}; known: {', '.join(HOWS)}")
    weights = check_weights(weights, len(runs), how, f"system {system}")
    if weights is not None:
        params["weights"] = weights
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
    return {"fusion": how, "queries": len(fused)}   # its cost per query (python -m harness estimate)
