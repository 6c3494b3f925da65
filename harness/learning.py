"""The learning check: did a trained model learn? (issue "Stand-ins that learn", item 4)

Two parts, both recorded, both required:

- its training loss fell: the mean of the last 10 % of optimizer steps below that of the first 10 %
  (:func:`harness.train.loss_check`, in every model's meta.json under ``learning.loss``);
- it beats the same architecture before training: model ``M@init`` (the plan's learning twins,
  :func:`harness.plan.learning_twins`: ``M``'s own train step at learning rate 0) is indexed and
  searched by twins of ``M``'s own jobs on the same queries, and ``M``'s first system must score
  higher per query on the first of config ``learning.measures`` the evaluation has, by a paired
  sign-flip permutation test (one-sided, ``learning.alpha``; harness.stats) with the 95 % paired
  bootstrap interval of the mean difference beside it. Where the profile also measures the
  objective ``M`` trains for on a test set of its own (a measure job with params ``learning``:
  DensePhrases' reading comprehension, each question against its gold passage: L_single, which
  every variant trains for, Table 6's "None" alone), that measure's twin is a primary comparison
  too, and ``M`` learned if one of its primary comparisons beats its start (Bonferroni: at
  ``alpha`` divided by their number): a model that learned to read its passage but not to tell
  passages apart learned, and its search, below its start, marks its own cells.

Models whose initial checkpoint, index and search are one computation (equal ``start_key`` of their
method: DensePhrases' variants that differ in training alone) share one twin: each is compared with
the twin of the first of them, its system to the twin's system of the same position (``start`` in the
comparison names it).

A model that fails either part "did not learn": every table cell fed by it (its systems, and any
system whose search reads it, however indirectly) carries that status instead of a verdict against
the paper, with the figures in its reason.

Every other system of the twin search is compared with its own initial checkpoint the same way. A
model can learn while one of its systems gets worse (VDR's full-vector search learns on small while
its binary-query search falls below that of the untrained SPLADE checkpoint it starts from): a system
significantly *below* its own start (one-sided, the other way) is "did not learn" too, in every cell
it feeds on any dataset, since its figure shows what training cost, not what the method does. A system
not significantly different from its start is reported, not marked (re-ranking BM25's top 5 cannot
change Success@5). ``python -m harness learning --config ...`` prints the check of every model.
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.plan import INIT, Ref

STATUS = "did not learn"
#: dimensions of efficiency figures (harness.units): a time, a size, a rate or a speedup does not depend
#: on whether the weights learned, so a model that did not learn leaves those cells as they are
EFFICIENCY = ("time", "bytes", "rate", "factor")


def applies(unit: str | None) -> bool:
    """Whether a figure in ``unit`` is one that a model that did not learn makes no result."""
    from harness.units import UNITS

    return UNITS.get(unit or "", ("",))[0] not in EFFICIENCY


def _plan(cfg: Mapping[str, Any]):
    from harness import plan as hplan

    return hplan.get(cfg)


def _cache(p: Any) -> dict[str, Any]:
    """Per-plan memo of this module (the plan is built once per config content, as harness.workflow
    keeps its served-tables map): each checked model's comparisons (:func:`comparisons`) and the
    verdicts read so far."""
    memo = getattr(p, "_learning", None)
    if memo is None:
        checks: dict[str, list[tuple[Any, str, str, bool]]] = {}
        for stage in ("measure", "search"):  # the objective's measure first: it is listed first
            for j in p.concrete(stage):
                for i, (tsys, models) in enumerate((j.params.get("learning_twin_of") or {}).items()):
                    for model, system in models.items():
                        checks.setdefault(model, []).append((j, tsys, system, stage == "measure" or i == 0))
        memo = p._learning = {"checks": checks, "verdicts": {}, "comparisons": {}}
    return memo


def comparisons(cfg: Mapping[str, Any], model: str) -> list[tuple[Any, str, str, bool]]:
    """(twin job, its system, ``model``'s own system, primary) of every comparison of ``model`` with
    its start (harness.plan.learning_twins; a twin may stand for several models that start from one
    checkpoint). Primary: its objective's measure where the profile runs one (DensePhrases' reading
    comprehension) and the first system of its twin search; the other systems of its twin search
    are compared too (a system below its start marks its cells)."""
    return list(_cache(_plan(cfg))["checks"].get(model, []))


def _twins(cfg: Mapping[str, Any], model: str) -> list[Any]:
    """The twin jobs ``model`` is compared with, each once."""
    return list({(j.stage, j.id, j.dataset): j for j, _, _, _ in comparisons(cfg, model)}.values())


def twin_searches(cfg: Mapping[str, Any], model: str) -> list[Any]:
    """The learning twins' search jobs of ``model`` (one per dataset it is searched on)."""
    return [j for j in _twins(cfg, model) if j.stage == "search"]


def objective_twins(cfg: Mapping[str, Any], model: str) -> list[tuple[Any, str]]:
    """(twin measure job, ``model``'s own system) of ``model``'s training objective where the profile
    measures it (DensePhrases' reading comprehension: harness.plan.learning_twins); empty for most models."""
    return [(j, s) for j, _, s, _ in comparisons(cfg, model) if j.stage == "measure"]


def _measure(cfg: Mapping[str, Any], measures: Mapping[str, float]) -> str | None:
    return next((m for m in (cfg.get("learning") or {}).get("measures", ["nDCG@10"]) if m in measures), None)


def _eval_file(cfg: Mapping[str, Any], job_id: str, dataset: str, system: str) -> Path:
    from harness import plan as hplan

    return hplan.path(cfg, Ref("eval", job_id, dataset)) / f"{system}.json"


def _files(cfg: Mapping[str, Any], model: str, dataset: str, system: str, twin: Any = None,
           twin_system: str | None = None) -> list[Path]:
    """The trained and the initial file of a comparison: the evaluations of ``model``'s search job
    (its ``system``) and its twin's (``twin_system``, by default the same name), or (``twin`` a measure
    job) the figures of the trained measure job and of the twin."""
    from harness import plan as hplan

    tsys = twin_system or system
    if twin is not None and twin.stage == "measure":
        return [hplan.path(cfg, Ref("metrics", twin.id.removesuffix(INIT), dataset)) / f"{system}.json",
                hplan.path(cfg, Ref("metrics", twin.id, dataset)) / f"{tsys}.json"]
    return [_eval_file(cfg, model, dataset, system),
            _eval_file(cfg, twin.id if twin is not None else model + INIT, dataset, tsys)]


def _per_query(files: list[Path], cfg: Mapping[str, Any], twin: Any) -> tuple[str | None, list[dict[str, float]]]:
    """The measure a comparison reads and each file's per-query values of it: the first of config
    ``learning.measures`` the evaluation has, or the measure job's figure (``twin.params["learning"]``,
    each question's value listed under ``predictions``)."""
    from harness.evaluate.run import PER_QUERY_SUFFIX, read_per_query
    from harness.figures import per_question
    from harness.io import read_json

    if twin is not None and twin.stage == "measure":
        name = str(twin.params["learning"])
        return name, [per_question(read_json(f), name) for f in files]
    measure = _measure(cfg, read_json(files[0]).get("measures", {}))
    if measure is None:
        return None, []
    return measure, [{q: v.get(measure, 0.0) for q, v in read_per_query(f.with_name(f.stem + PER_QUERY_SUFFIX)).items()}
                     for f in files]


def compare(cfg: Mapping[str, Any], model: str, dataset: str, system: str, twin: Any = None,
            twin_system: str | None = None) -> dict[str, Any]:
    """Trained ``system`` against its twin on ``dataset``: the measure, both means, the mean
    difference with its 95 % paired bootstrap interval, the one-sided p-value (trained better), the
    number of queries, ``beats_init`` and ``below_init`` (significantly worse: the one-sided test the
    other way); or ``{"missing": path}`` where an evaluation is not there yet. ``twin``: the twin job
    (a measure job: the comparison reads its figures; by default the evaluations of the search twin),
    ``twin_system`` its system (by default ``system``; another where the twin stands for several
    models that start from one checkpoint, named in ``start``)."""
    import numpy as np

    from harness import stats

    files = _files(cfg, model, dataset, system, twin, twin_system)
    for f in files:
        if not f.exists():
            return {"dataset": dataset, "system": system, "missing": str(f)}
    measure, pq = _per_query(files, cfg, twin)
    if measure is None:
        return {"dataset": dataset, "system": system, "missing": f"{files[0]} has none of learning.measures"}
    qids = sorted(set(pq[0]) & set(pq[1]))
    a = np.array([pq[0][q] for q in qids])
    b = np.array([pq[1][q] for q in qids])
    alpha = float((cfg.get("learning") or {}).get("alpha", 0.05))
    diff = float(np.mean(a - b)) if qids else 0.0
    p2 = stats.paired_test(a, b) if len(qids) >= 2 else 1.0
    p1 = p2 / 2 if diff > 0 else 1.0 - p2 / 2  # one-sided: trained better than initial
    lo, hi = stats.bootstrap_ci(a - b) if len(qids) >= 2 else (diff, diff)
    return {"dataset": dataset, "system": system, "measure": measure, "queries": len(qids),
            "trained": float(np.mean(a)) if qids else None, "init": float(np.mean(b)) if qids else None,
            "diff": diff, "ci95": [lo, hi], "p_one_sided": p1, "alpha": alpha, "beats_init": bool(p1 < alpha and diff > 0),
            "below_init": bool(1.0 - p1 < alpha and diff < 0),
            **({"start": f"{twin.id}/{twin_system}"} if twin is not None and twin_system not in (None, system) else {})}


def verdict(cfg: Mapping[str, Any], model: str, others: bool = True) -> dict[str, Any]:
    """The learning check of ``model``: ``loss`` (its meta.json's ``learning.loss``), ``init`` (its
    primary comparisons, each with ``primary`` True: its objective's measure where the profile runs
    one, and the first system of its twin search; empty where the model is not checked against its
    initial checkpoint), ``systems`` (the comparisons of the twin search's other systems), and
    ``learned``: False where its loss did not fall or no primary comparison beats its start, True
    where the loss fell and one does (at ``learning.alpha`` divided by the number of primary
    comparisons: Bonferroni), None otherwise (a comparison missing, or a model the profile does not
    compare with its initial checkpoint and whose loss fell). Any comparison below its start, primary
    or not, marks the cells its system feeds (:func:`cell_status`). ``others=False`` leaves
    ``systems`` empty (each comparison is a 10,000-resample test: a table asks only for its own)."""
    from harness import plan as hplan
    from harness.io import read_json

    from harness.train import loss_check

    folder = hplan.path(cfg, Ref("model", model))
    meta = folder / "meta.json"
    loss = (read_json(meta).get("learning") or {}).get("loss") if meta.exists() else None
    loss = loss or loss_check(folder)  # a model written before the check was recorded in meta.json
    comps, rest = [], []
    for j, ts, s, primary in comparisons(cfg, model):
        if primary or others:
            (comps if primary else rest).append({**_compared(cfg, model, str(j.dataset), s, j, ts), "primary": primary})
    alpha = float((cfg.get("learning") or {}).get("alpha", 0.05)) / max(1, len(comps))
    beats = any(c.get("beats_init") and c["p_one_sided"] < alpha for c in comps)
    complete = loss is not None and bool(comps) and not any("missing" in c for c in comps)
    if loss is not None and not loss["fell"]:
        learned: bool | None = False
    elif beats and loss is not None:
        learned = True
    else:  # no primary comparison beats its start: a verdict once every one is in
        learned = False if complete else None
    return {"model": model, "loss": loss, "init": comps, "systems": rest, "learned": learned}


def _read(cfg: Mapping[str, Any], model: str) -> dict[str, Any]:
    """``model``'s verdict on its first systems, read once per plan."""
    memo = _cache(_plan(cfg))["verdicts"]
    if model not in memo:
        memo[model] = verdict(cfg, model, others=False)
    return memo[model]


def _compared(cfg: Mapping[str, Any], model: str, dataset: str, system: str, twin: Any = None,
              twin_system: str | None = None) -> dict[str, Any]:
    """:func:`compare`, computed once per plan (each is a 10,000-resample test)."""
    memo = _cache(_plan(cfg))["comparisons"]
    key = (model, dataset, system, twin.id if twin is not None else None, twin_system)
    if key not in memo:
        memo[key] = compare(cfg, model, dataset, system, twin, twin_system)
    return memo[key]


def _below(cfg: Mapping[str, Any], model: str, systems: set[str]) -> list[dict[str, Any]]:
    """The comparisons of ``model``'s systems among ``systems`` that are below their start (a model
    can learn while one of its systems gets worse), computed only where a cell reads their system."""
    return [c for j, ts, s, _ in comparisons(cfg, model) if s in systems
            for c in [_compared(cfg, model, str(j.dataset), s, j, ts)] if c.get("below_init")]


def _feeding(cfg: Mapping[str, Any], system: str, dataset: str) -> tuple[set[str], set[str]]:
    """The models and the systems a cell's values depend on (:func:`models_feeding`): the cell's own
    system and every system whose run its search reads, however indirectly."""
    p = _plan(cfg)
    job = p.systems().get((system, dataset))
    todo = [job] if job is not None else p.metric_jobs(system, dataset)  # a measure job's figure: its inputs
    seen, models, systems = set(), set(), {system}
    while todo:
        j = todo.pop()
        for ref in j.inputs.values():
            if ref.kind == "system":
                systems.add(str(ref.id))
            ref = p.run_of(ref)
            if ref.kind == "model":
                models.add(str(ref.id))
            prod = p.producer(ref)
            # not into a model's own training inputs (a teacher, a base model): the model has its own check
            if prod is not None and prod not in seen and ref.kind in ("index", "run"):
                seen.add(prod)
                todo.append(p.job(*prod))
    if job is None:  # a measure job reads several models: a figure is fed by the one its name carries
        named = sorted((m for m in models if system == m or system.startswith((m + ".", m + "-"))), key=len)
        models = set(named[-1:]) or models
    return models, systems


def models_feeding(cfg: Mapping[str, Any], system: str, dataset: str) -> list[str]:
    """The models whose weights a system's values depend on: those its search job reads, directly,
    through an index, or through another system's run (a fusion, a re-ranking), not the teachers or
    base models they were trained from (each model has its own check); for a figure of a measure job,
    which reads several models, the model its name carries (``qcr.noent-usage-docs``: qcr.noent)."""
    return sorted(_feeding(cfg, system, dataset)[0])


def cell_status(cfg: Mapping[str, Any], system: str, dataset: str, unit: str | None = None) -> tuple[str, str] | None:
    """``("did not learn", why)`` where a figure in ``unit`` (:func:`applies`) depends on a model
    that failed its check, or on a system of a model's twin search that training made significantly
    worse than its initial checkpoint (on the dataset the twin searched); each model's verdict is
    read once per plan."""
    if not applies(unit):
        return None
    models, systems = _feeding(cfg, system, dataset)
    for model in sorted(models):
        v = _read(cfg, model)
        if v["learned"] is False:
            return STATUS, f"model {model} did not learn: {describe(v)}"
        below = _below(cfg, model, systems)
        if below:
            return STATUS, (f"{below[0]['system']} is worse than {model}'s initial checkpoint: "
                            + "; ".join(_comparison(c) for c in below))
    return None


def required(cfg: Mapping[str, Any], system: str, dataset: str) -> list[Path]:
    """The folders a cell's learning status reads (its models' twins' and their own)."""
    out = []
    for model in models_feeding(cfg, system, dataset):
        out += _compared_folders(cfg, model)
    return out


def _compared_folders(cfg: Mapping[str, Any], model: str) -> list[Path]:
    """The folders ``model``'s comparisons read: both evaluations of each twin search, both figure
    folders of each twin of its objective's measure."""
    from harness import plan as hplan

    out = []
    for j in _twins(cfg, model):
        kind, trained = ("eval", model) if j.stage == "search" else ("metrics", j.id.removesuffix(INIT))
        out += [hplan.path(cfg, Ref(kind, j.id, j.dataset)), hplan.path(cfg, Ref(kind, trained, j.dataset))]
    return out


def _comparison(c: Mapping[str, Any]) -> str:
    if "missing" in c:
        return f"no comparison yet ({c['missing']})"
    below = bool(c.get("below_init"))
    p = f"p (worse) {1.0 - c['p_one_sided']:.3g}" if below else f"p {c['p_one_sided']:.3g}"
    note = "" if c["beats_init"] or below else " (not significantly better)"
    start = f" ({c['start']})" if c.get("start") else ""
    return (f"{c['system']} {c['measure']} on {c['dataset']} {c['trained']:.3f} vs initial {c['init']:.3f}{start}, "
            f"diff {c['diff']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}], {p}, {c['queries']} queries" + note)


def describe(v: Mapping[str, Any]) -> str:
    """One line: the loss, each first system's comparison with the initial checkpoint, and any other
    system below its start."""
    bits = []
    loss = v.get("loss")
    if loss:
        bits.append(f"loss {loss['first']:.3g} -> {loss['last']:.3g} over {loss['steps']} steps"
                    + ("" if loss["fell"] else " (did not fall)"))
    bits += [_comparison(c) for c in v.get("init", [])]
    bits += [_comparison(c) for c in v.get("systems", []) if c.get("below_init")]
    return "; ".join(bits) or "no loss log and no comparison"


def verdicts(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The check of every model of the profile that was trained (its folder exists) or is checked
    against its initial checkpoint (twins aside; a target that trains only some models, such as the
    regression, leaves the others out)."""
    from harness import plan as hplan

    p = _plan(cfg)
    memo = _cache(p)
    return [verdict(cfg, j.id) for j in p.concrete("train") if INIT not in j.id
            and (j.id in memo["checks"] or hplan.path(cfg, Ref("model", j.id)).exists())]


def required_all(cfg: Mapping[str, Any]) -> list[str]:
    """Every file and folder the checks of the profile read (the Snakefile's input function): each
    trained model's folder, and both evaluations of each twin comparison."""
    from harness import plan as hplan

    p = _plan(cfg)
    out = [hplan.path(cfg, Ref("model", j.id)) for j in p.concrete("train") if INIT not in j.id]
    memo = _cache(p)
    for model in sorted(memo["checks"]):
        out += _compared_folders(cfg, model)
    return sorted({str(o) for o in out})


def verdict_word(v: Mapping[str, Any]) -> str:
    """learned / did not learn / loss fell, not compared / not checked yet."""
    if v["learned"] is not None:
        return "learned" if v["learned"] else STATUS
    return "loss fell; not compared with its initial checkpoint" if not v["init"] and v["loss"] else "not checked"


CSV_FIELDS = ("model", "verdict", "loss_steps", "loss_first", "loss_last", "loss_fell", "dataset", "system", "primary",
              "measure", "queries", "trained", "initial", "difference", "ci_low", "ci_high", "p_one_sided",
              "beats_initial", "below_initial", "system_check", "start")


def system_check(c: Mapping[str, Any]) -> str:
    """A comparison in words: beats its start / no different / below its start (did not learn)."""
    if not c or "missing" in c:
        return ""
    return ("beats its start" if c["beats_init"] else f"below its start: {STATUS}" if c.get("below_init")
            else "not significantly different from its start")


def rows(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per model and comparison, first systems first (one per model without a comparison):
    the CSV the rule writes."""
    out = []
    for v in verdicts(cfg):
        loss = v["loss"] or {}
        base = {"model": v["model"], "verdict": verdict_word(v), "loss_steps": loss.get("steps", ""),
                "loss_first": loss.get("first", ""), "loss_last": loss.get("last", ""), "loss_fell": loss.get("fell", "")}
        for c in (v["init"] + v.get("systems", [])) or [{}]:
            full = "missing" not in c and bool(c)
            out.append({**base, "dataset": c.get("dataset", ""), "system": c.get("system", ""),
                        "primary": c.get("primary", ""), "measure": c.get("measure", ""), "queries": c.get("queries", ""),
                        "trained": c.get("trained", ""), "initial": c.get("init", ""), "difference": c.get("diff", ""),
                        "ci_low": c["ci95"][0] if full else "", "ci_high": c["ci95"][1] if full else "",
                        "p_one_sided": c.get("p_one_sided", ""), "beats_initial": c.get("beats_init", ""),
                        "below_initial": c.get("below_init", ""), "system_check": system_check(c),
                        "start": c.get("start", "")})
    return out


def main(argv: list[str]) -> int:
    """``python -m harness learning --config ... [--out learning.csv]``: one line per model."""
    import csv
    import io

    from harness.config import add_config_argument, load_config
    from harness.io import atomic_write_text

    ap = argparse.ArgumentParser(prog="python -m harness learning", description=__doc__.split("\n")[0])
    add_config_argument(ap)
    ap.add_argument("--out", type=Path, help="write the checks as CSV here")
    a = ap.parse_args(argv)
    cfg = load_config(a.config)
    for v in verdicts(cfg):
        print(f"{v['model']}: {verdict_word(v)}: {describe(v)}")
    if a.out:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows(cfg))
        a.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(a.out, buf.getvalue())
    return 0
