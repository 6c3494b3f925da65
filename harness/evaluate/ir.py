"""qrels-based evaluation with ir_measures; measures are named by their ir_measures strings."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.errors import ConfigError


def parse_measures(names: Sequence[str]) -> list:
    import ir_measures

    out = []
    for name in names:
        try:
            out.append(ir_measures.parse_measure(name))
        except Exception as exc:  # ir_measures raises NameError/ValueError/SyntaxError
            raise ConfigError(f"config key evaluate.ir_measures: {name!r} is not an ir_measures measure ({exc})") from None
    return out


def evaluate(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
             names: Sequence[str], per_query: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """Aggregate values keyed by the measure's ir_measures string (printed as parsed); with
    ``per_query`` (a dict), also each query's value, ``{qid: {measure: value}}`` (one pass:
    ir_measures' ``calc`` returns the aggregates and the per-query values they are the mean of)."""
    import ir_measures

    measures = parse_measures(names)
    qrels, run = dict(qrels), {q: dict(d) for q, d in run.items()}
    if per_query is None:
        agg = ir_measures.calc_aggregate(measures, qrels, run)
    else:
        agg, metrics = ir_measures.calc(measures, qrels, run)
        for m in metrics:
            per_query.setdefault(m.query_id, {})[str(m.measure)] = float(m.value)
    return {str(m): float(agg[m]) for m in measures}
