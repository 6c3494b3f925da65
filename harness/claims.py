"""`python -m harness claims --out results/claims/<profile>.csv`: check configs/claims.yaml.

Each claim compares two quantities (measured values or constants); a measure ``metric:<name>``
reads the system's metrics file (efficiency figures, in base units). The right side is
``factor × rhs + offset`` (defaults 1 and 0; offset -0.02 reads "within 2 points"). Columns of the output:
claim_id, paper, holds (true / false / not run: the comparison of the two aggregates), measured,
detail, and the evidence (:func:`evidence`, harness.stats): verdict, test, n, diff, ci_low, ci_high, p,
p_holm (Holm over the tested claims of each paper, per profile), mdd (the minimum detectable
difference at alpha 0.05, power 0.8, for the claim's n), and against the paper (:func:`against_paper`)
er and dri (Breuer et al.'s Effect Ratio and Delta Relative Improvement of the raw improvement lhs - rhs,
the claim's factor aside, from the aggregates: the papers publish no per-topic runs) with the published
cells they use.

Verdicts: ``holds`` (significant in the claimed direction after Holm), ``holds (not significant)``,
``fails (not significant)``, ``fails`` (significant against the claim), ``holds (exact)`` / ``fails
(exact)`` for sizes in bytes (deterministic: no sampling to test), ``holds (untested)`` / ``fails
(untested)`` where no test applies (a figure without per-query values: one index build, a throughput,
a ratio of two timings without its batches; the ``test`` column says why), ``not run`` (with the
reason). A timing kept per question (BPR's query time: each question's mean over its repeats, every
system timed on the same questions) is tested paired like an evaluation measure; a throughput or a
speedup kept batch by batch gets a bootstrap interval over its batches (:func:`batch_interval`).
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import stats
from harness.config import REPO, add_config_argument, load_config, read_yaml, validate
from harness.io import atomic_write_text
from harness.measured import Found, available, check_measure, find_key, find_mean, mean_of, outputs, parse_key

CLAIMS = REPO / "configs" / "claims.yaml"
OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
ALPHA = 0.05
EVIDENCE = ["verdict", "test", "n", "diff", "ci_low", "ci_high", "p", "p_holm", "mdd", "er", "dri", "published_diff", "published"]
COLUMNS = ["claim_id", "paper", "holds", "measured", "detail", *EVIDENCE, "unlearned"]


def load_claims(path: Path = CLAIMS) -> list[dict[str, Any]]:
    """The claims of ``path``, validated; a misspelled measure fails here, not as a missing value."""
    doc = read_yaml(path)
    validate(doc, "claims", source=str(path))
    for claim in doc["claims"]:
        for side in ("lhs", "rhs"):
            if "measure" in claim[side]:
                check_measure(claim[side]["measure"], f"{path}: claim {claim['id']} ({side})")
    return doc["claims"]


def quantity_key(cfg: Mapping[str, Any], q: Mapping[str, Any]) -> str | None:
    if "value" in q:
        return None
    sub = cfg["substitutions"].get(q["dataset"])   # null: no stand-in (tables.unavailable says why); a mean: no one set
    dataset = sub if isinstance(sub, str) else q["dataset"]
    return f"{dataset}/{q['system']}/{q['measure']}"


def side_keys(cfg: Mapping[str, Any], q: Mapping[str, Any]) -> list[str] | None:
    """The measured keys a claim side reads: its label's stand-in (or a dataset key), or one per set where
    the mean over sets stands in for the label (``substitutions.<label>.mean_of``); None for a constant."""
    if "value" in q:
        return None
    sets = mean_of(cfg, q["dataset"])
    return [f"{d}/{q['system']}/{q['measure']}" for d in sets] if sets else [str(quantity_key(cfg, q))]


def evaluate(cfg: Mapping[str, Any], claim: Mapping[str, Any]) -> dict[str, Any]:
    values, names, found = [], [], []
    for side in ("lhs", "rhs"):
        q = claim[side]
        keys = side_keys(cfg, q)
        if keys is None:
            values.append(float(q["value"]))
            names.append(f"{q['value']}")
            found.append(None)
            continue
        sets = [parse_key(k)[0] for k in keys]
        key = keys[0] if len(keys) == 1 else (f"{q['dataset']} (the mean over {len(keys)} sets: "
                                              f"{', '.join(sets)})/{q['system']}/{q['measure']}")
        why = next((f"{k}: {w}" for k in keys if (w := available(cfg, k))), None)
        if why:
            return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "not run", "measured": "",
                    "detail": why}
        found_ = (find_key(cfg, key) if len(keys) == 1
                  else find_mean(cfg, q["system"], sets, q["measure"]))
        if found_.value is None:
            return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "not run", "measured": "",
                    "detail": f"{key}: {found_.reason}"}
        v, unit = found_.value, found_.unit
        if found_.raw and found_.raw.get("kind") == "projected":
            unit = (unit + " projected").strip()
        values.append(v)
        found.append(found_)
        names.append(f"{key}={v:.6g}" + (f" {unit}" if unit else ""))
    factor = claim.get("factor", 1.0)
    offset = claim.get("offset", 0.0)
    holds = OPS[claim["op"]](values[0], factor * values[1] + offset)
    rhs = names[1] if factor == 1.0 else f"{factor} × {names[1]}"
    if offset:
        rhs += f" {'+' if offset > 0 else '-'} {abs(offset)}"
    return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "true" if holds else "false",
            "measured": f"{names[0]} {claim['op']} {rhs}", "detail": claim["statement"],
            **evidence(claim, values, found), **against_paper(claim, values), "unlearned": unlearned(cfg, claim, found)}


def unlearned(cfg: Mapping[str, Any], claim: Mapping[str, Any], found: list[Found | None]) -> str:
    """Why a side's value is no result: a model behind it that did not learn (harness.learning), or ""
    (a metric side in a time, size or speed unit, the same whether the weights learned, never is)."""
    from harness.learning import cell_status

    why = []
    for side, f in zip(("lhs", "rhs"), found, strict=True):
        if f is None:  # a constant
            continue
        for key in side_keys(cfg, claim[side]) or []:
            dataset, system, _ = parse_key(key)
            failed = cell_status(cfg, system, dataset, (f.raw or {}).get("unit"))
            if failed and failed[1] not in why:
                why.append(failed[1])
    return "; ".join(why)


def published_side(paper: str, q: Mapping[str, Any]) -> tuple[float, str] | None:
    """A claim side's published value (a fraction where the paper prints %) and the cell it comes from:
    the record of the paper's tables that the reproduction matrix maps to the same system, dataset
    label and measure (None for a constant, a metrics figure or a side no table prints)."""
    from harness.tables.matrix import load_matrix, published, record_target

    if "value" in q or str(q.get("measure", "")).startswith("metric:"):
        return None
    matrix = load_matrix(paper)
    for rec in published(paper)["records"]:
        system, measure, spec = record_target(rec, matrix["tables"].get(rec["table"], {}))
        if (rec["value"] is not None and rec.get("unit") in ("%", "none") and system == q["system"]
                and spec["dataset"] == q["dataset"] and measure == q["measure"]):
            v = float(rec["value"]) / (100.0 if rec["unit"] == "%" else 1.0)
            return v, f"Table {rec['table']} {rec['row']} / {rec['column']} = {rec['value']}{'%' if rec['unit'] == '%' else ''}"
    return None


def against_paper(claim: Mapping[str, Any], values: list[float]) -> dict[str, Any]:
    """ER and ΔRI of the claim's improvement (lhs over rhs) against the published one, where the
    paper prints both sides."""
    pub = [published_side(claim["paper"], claim[side]) for side in ("lhs", "rhs")]
    if pub[0] is None or pub[1] is None:
        return {}
    (po_adv, w_adv), (po_base, w_base) = pub
    return {"er": stats.effect_ratio(po_base, po_adv, values[1], values[0]),
            "dri": stats.delta_ri(po_base, po_adv, values[1], values[0]), "published_diff": po_adv - po_base,
            "published": f"{w_adv}; {w_base}"}


def per_query(found: Found | None, measure: str | None) -> dict[str, float] | None:
    """The per-query values behind a side: an evaluation measure's (``<system>.perquery.tsv.gz`` beside
    its eval JSON), or a metrics figure's per-question values where its file lists them
    (``predictions``: ``{"id": ..., "<name>": ...}``, e.g. the reader's EM); None for a constant or
    where no per-query values were kept."""
    from harness.evaluate.run import PER_QUERY_SUFFIX, read_per_query
    from harness.figures import per_question
    from harness.io import read_json

    if found is not None and found.parts:   # a mean over sets: each query keyed by (set, query id)
        merged: dict[Any, float] = {}
        for dataset, part in found.parts.items():
            vals = per_query(part, measure)
            if vals is None:
                return None
            merged.update({(dataset, q): v for q, v in vals.items()})
        return merged
    if found is None or found.path is None:
        return None
    if measure and measure.startswith("metric:") and found.path.suffix == ".json" and found.path.exists():
        name = measure.removeprefix("metric:")
        data = read_json(found.path)
        vals = per_question(data, name)
        unit = ((data.get("values") or {}).get(name) or {}).get("unit")
        if vals and unit and found.unit and unit != found.unit:   # the side's base unit (ms -> s)
            from harness.units import convert

            vals = {q: convert(v, unit, found.unit) for q, v in vals.items()}
        return vals or None
    if found.path.parent.parent.parent.name != "eval":
        return None
    f = found.path.with_name(found.path.stem + PER_QUERY_SUFFIX)
    if not f.exists():
        return None
    return {q: v[measure] for q, v in read_per_query(f).items() if measure in v} if measure else None


def timed_batches(found: Found | None) -> tuple[list[float], list[float], float] | None:
    """``(num, den, scale)`` of a figure kept batch by batch (:func:`harness.figures.value`'s
    ``batches``: the value is ``scale * sum(num) / sum(den)`` in the side's base unit); None otherwise."""
    b = (found.raw or {}).get("batches") if found is not None else None
    if not b or found.value is None:
        return None
    from harness.units import UNITS

    return list(b["num"]), list(b["den"]), float(UNITS[found.raw["unit"]][1])


def batch_interval(claim: Mapping[str, Any], values: list[float],
                   bt: list[tuple[list[float], list[float], float] | None]) -> dict[str, Any]:
    """The 95% bootstrap interval of ``lhs - (factor * rhs + offset)`` where the figures are ratios of
    sums over timed batches (a throughput: queries / seconds; a speedup: seconds / seconds): the
    batches are resampled, both sides' together where both were timed on the same batches (paired);
    a constant side stays constant. The verdict reads the interval (no p-value)."""
    import numpy as np

    factor, offset = claim.get("factor", 1.0), claim.get("offset", 0.0)
    sizes = {len(b[0]) for b in bt if b is not None}
    if len(sizes) > 1:
        return {"test": f"none: the two sides were timed on different batches ({'/'.join(map(str, sorted(sizes)))})",
                "n": ""}
    n = sizes.pop()
    if n < 2:
        return {"test": "none: one timed batch (a throughput or ratio needs at least 2 batches for an interval)",
                "n": n}
    arrays = [a for b in bt if b is not None for a in b[:2]]
    scales = [b[2] if b is not None else None for b in bt]

    def stat(*xs, axis=-1):
        it = iter(xs)
        sides = [scales[i] * np.sum(next(it), axis=axis) / np.sum(next(it), axis=axis) if scales[i] is not None
                 else values[i] for i in range(2)]
        return sides[0] - (factor * sides[1] + offset)

    lo, hi = stats.bootstrap_ci(tuple(arrays), stat, paired=True)
    both = all(b is not None for b in bt)
    return {"test": (f"{'paired ' if both else ''}percentile bootstrap over the {n} timed batches "
                     f"{'both sides were timed on ' if both else ''}(a ratio of sums; {stats.N_RESAMPLES:,} "
                     f"resamples, seed {stats.SEED}); the interval decides"),
            "n": n, "ci_low": lo, "ci_high": hi}


def evidence(claim: Mapping[str, Any], values: list[float], found: list[Found | None]) -> dict[str, Any]:
    """The statistical evidence of one claim (before Holm): which test applies, its n, the mean
    difference ``lhs - (factor * rhs + offset)`` with its 95% interval, p and the minimum
    detectable difference. Paired over the queries both sides share where both are evaluations
    with per-query values (a constant side is a vector of that constant)."""
    factor, offset = claim.get("factor", 1.0), claim.get("offset", 0.0)
    out: dict[str, Any] = {"diff": values[0] - (factor * values[1] + offset)}
    units = {f.unit for f in found if f is not None and f.unit}
    if units and units <= {"B"}:
        return {**out, "test": "exact: sizes in bytes are deterministic", "n": ""}
    bt = [timed_batches(f) for f in found]
    if any(b is not None for b in bt) and all(b is not None or f is None for b, f in zip(bt, found, strict=True)):
        return {**out, **batch_interval(claim, values, bt)}
    pq = [per_query(f, claim[side].get("measure")) for f, side in zip(found, ("lhs", "rhs"), strict=True)]
    metric = [f is not None and f.path is not None and "/metrics/" in str(f.path) for f in found]
    if any(m and p is None for m, p in zip(metric, pq, strict=True)):
        return {**out, "test": "none: a figure without per-query values or timed batches (one index build each; an "
                               "analysis figure of the whole corpus, whose uncertainty is the training seed's; "
                               "a per-question timing is tested paired, a throughput over its batches)", "n": ""}
    if any(f is not None and p is None for f, p in zip(found, pq, strict=True)):
        return {**out, "test": "none: no per-query values (an evaluation written before they were kept)", "n": ""}
    if pq[0] is not None and pq[1] is not None and set(pq[0]) != set(pq[1]):
        if any(isinstance(q, tuple) for p in pq for q in p):   # a pooled test would weigh the sets unlike their mean
            return {**out, "test": "none: the two sides hold different queries of the sets they average", "n": ""}
        a, b = list(pq[0].values()), [factor * v + offset for v in pq[1].values()]
        lo, hi = stats.bootstrap_ci((a, b), lambda u, v, axis: u.mean(axis) - v.mean(axis))
        return {**out, "test": "unpaired bootstrap: the two sides are measured on different queries",
                "n": f"{len(a)}/{len(b)}", "ci_low": lo, "ci_high": hi}
    qids = sorted(pq[0] or pq[1] or {})
    x = [pq[0][q] if pq[0] is not None else values[0] for q in qids]
    y = [factor * pq[1][q] + offset if pq[1] is not None else factor * values[1] + offset for q in qids]
    if qids and isinstance(qids[0], tuple):   # a mean over sets: (set, query id)
        return {**out, **stratified(x, y, [q[0] for q in qids])}
    d = [u - v for u, v in zip(x, y, strict=True)]
    lo, hi = stats.bootstrap_ci(d)
    import numpy as np

    # the difference the test and the interval are about: the mean of the per-query differences (an
    # evaluation's aggregate is that mean; a timing's trimmed mean over all samples is not)
    out["diff"] = float(np.mean(d))
    return {**out, "test": f"paired sign-flip permutation ({stats.N_RESAMPLES:,} resamples, seed {stats.SEED}); "
                           "95% percentile bootstrap", "n": len(qids), "ci_low": lo, "ci_high": hi,
            "p": stats.paired_test(x, y), "mdd": stats.min_detectable_difference(float(np.std(d, ddof=1)), len(qids))}


def stratified(x: list[float], y: list[float], strata: list[str]) -> dict[str, Any]:
    """The evidence of a difference between two means over sets (each set weighted equally, as a paper
    averages BEIR's): ``x``, ``y`` paired per query, ``strata`` each query's set. The difference is the
    mean over sets of each set's mean paired difference; the sign-flip permutation test flips each
    query's difference weighted 1 / (sets x its set's queries), so its statistic is that difference; the
    interval resamples the queries within each set (a stratified bootstrap); the minimum detectable
    difference reads the stratified standard error."""
    import numpy as np

    a, b, s = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(strata)
    sets = sorted(set(strata))
    d = a - b
    parts = tuple(d[s == k] for k in sets)
    if min(len(p) for p in parts) < 2:
        return {"test": "none: a set with fewer than 2 queries (a stratified interval needs 2 per set)", "n": len(d)}
    w = np.array([1.0 / (len(sets) * int(np.sum(s == k))) for k in strata]) * len(d)   # mean(w * d) = the difference
    lo, hi = stats.bootstrap_ci(parts, lambda *xs, axis: np.mean([v.mean(axis) for v in xs], axis=0))
    se = math.sqrt(sum(float(np.var(p, ddof=1)) / len(p) for p in parts)) / len(sets)
    return {"diff": float(np.mean(w * d)), "n": len(d), "ci_low": lo, "ci_high": hi, "p": stats.paired_test(a * w, b * w),
            "mdd": stats.min_detectable_difference(se * math.sqrt(len(d)), len(d)),
            "test": f"paired sign-flip permutation stratified by set ({stats.N_RESAMPLES:,} resamples, seed "
                    f"{stats.SEED}): the mean over {len(sets)} sets, each weighted equally (a query's difference "
                    "weighted 1 / (sets x its set's queries)); 95% percentile bootstrap within each set"}


def verdicts(rows: list[dict[str, Any]], claims: list[Mapping[str, Any]]) -> None:
    """Holm's correction over the tested claims of each paper, then each row's verdict (in place)."""
    ops = {c["id"]: c["op"] for c in claims}
    for paper in sorted({r["paper"] for r in rows}):  # a side that did not learn is no evidence: not tested
        tested = [r for r in rows if r["paper"] == paper and r.get("p") not in (None, "") and not r.get("unlearned")]
        for r, adj in zip(tested, stats.holm([r["p"] for r in tested]), strict=True):
            r["p_holm"] = adj
    for r in rows:
        if r["holds"] == "not run":
            r["verdict"] = "not run"
            continue
        if r.get("unlearned"):
            r["verdict"] = "did not learn"
            continue
        word = "holds" if r["holds"] == "true" else "fails"
        test = str(r.get("test", ""))
        if test.startswith("exact"):
            r["verdict"] = f"{word} (exact)"
        elif r.get("p_holm") not in (None, ""):
            claimed_up = ops[r["claim_id"]] in (">", ">=")
            right_way = (r["diff"] > 0) == claimed_up and r["diff"] != 0
            significant = r["p_holm"] < ALPHA
            r["verdict"] = ("holds" if right_way else "fails") + ("" if significant else " (not significant)")
        elif r.get("ci_low") not in (None, ""):  # unpaired: whether the interval excludes 0 decides
            r["verdict"] = word if (r["ci_low"] > 0 or r["ci_high"] < 0) else f"{word} (not significant)"
        else:
            r["verdict"] = f"{word} (untested)"


def required_inputs(cfg: Mapping[str, Any]) -> list[str]:
    """The claims' measurements, and the learning check's evaluations of the models behind them."""
    from harness.learning import required

    out = set()
    for claim in load_claims():
        for side in ("lhs", "rhs"):
            for key in side_keys(cfg, claim[side]) or []:
                if available(cfg, key) is None:
                    out.update(str(o) for o in outputs(cfg, key))
                    dataset, system, _ = parse_key(key)
                    out.update(str(o) for o in required(cfg, system, dataset))
    return sorted(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness claims", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    claims = load_claims()
    rows = [evaluate(cfg, c) for c in claims]
    verdicts(rows, claims)
    for r in rows:
        for k in ("diff", "ci_low", "ci_high", "p", "p_holm", "mdd", "er", "dri", "published_diff"):
            if isinstance(r.get(k), float):
                r[k] = f"{r[k]:.6g}"
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n", restval="")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(args.out, buf.getvalue())
    for r in rows:
        ev = f" [n {r['n']}, diff {r['diff']}, 95% CI {r['ci_low']}..{r['ci_high']}, p_holm {r['p_holm']}]" if r.get("p_holm") else ""
        print(f"{r['claim_id']}: {r['verdict']} — {r['measured'] or r['detail']}{ev}")
    return 0
