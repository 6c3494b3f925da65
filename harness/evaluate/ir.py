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
             names: Sequence[str]) -> dict[str, float]:
    """Aggregate values keyed by the measure's ir_measures string (printed as parsed)."""
    import ir_measures

    measures = parse_measures(names)
    agg = ir_measures.calc_aggregate(measures, dict(qrels), {q: dict(d) for q, d in run.items()})
    return {str(m): float(agg[m]) for m in measures}
