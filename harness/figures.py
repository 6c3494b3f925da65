"""The figure record a measure job writes (``metrics/<dataset>/<job>/<system>.json``), written once.

A record is ``{system, dataset, values: {name: {value, unit, device?, what?, kind?, batches?}}, not_run:
{name: why}, ...extra, hardware, versions, git_commit}``: every figure with its unit, the device
it was measured on and what it is; a figure scaled from a measured fraction says ``kind:
projected`` (rendered as projected, never as measured); a figure that could not be measured here
is absent from ``values`` and named in ``not_run`` with the reason. A throughput or a ratio of timings
measured batch by batch keeps its ``batches``: ``{num: [...], den: [...]}``, one pair per timed batch
(queries and seconds; the full encoder's and the lookup's seconds), the value being ``sum(num) /
sum(den)`` in its unit: a claim on it gets a bootstrap interval over the batches
(:func:`harness.claims.evidence`). The tables
(:mod:`harness.tables`) and the regression (``metric:<name>`` keys, :mod:`harness.measured`) read
these files.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.io import write_json
from harness.meta import git_commit, hardware, versions


def value(v: float, unit: str, what: str | None = None, *, device: str | None = None,
          projected: bool = False, batches: tuple[Sequence[float], Sequence[float]] | None = None) -> dict[str, Any]:
    """One figure. ``projected``: scaled from a measured fraction (timed batches x the test set's
    batches, a corpus sample x the corpus). ``batches``: ``(num, den)`` per timed batch of a figure
    that is ``sum(num) / sum(den)`` (checked here against ``v``)."""
    out: dict[str, Any] = {"value": v, "unit": unit}
    if batches is not None:
        num, den = [float(x) for x in batches[0]], [float(x) for x in batches[1]]
        if len(num) != len(den) or not num or sum(den) <= 0:
            raise ValueError(f"batches of {what or unit!r}: {len(num)} numerators and {len(den)} denominators "
                             "(one pair per timed batch, the denominators' sum > 0)")
        if not math.isclose(sum(num) / sum(den), v, rel_tol=1e-6):
            raise ValueError(f"batches of {what or unit!r}: sum(num) / sum(den) = {sum(num) / sum(den)!r}, "
                             f"not the value {v!r}")
        out["batches"] = {"num": num, "den": den}
    if device:
        out["device"] = device
    if what:
        out["what"] = what
    if projected:
        out["kind"] = "projected"
    return out


def record(system: str, dataset: str | None, values: Mapping[str, Any], device: str = "cpu",
           not_run: Mapping[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A record of ``system`` on ``dataset``. ``values`` maps a name to a :func:`value` dict or to a
    ``(value, unit, what)`` tuple measured on ``device``."""
    vals = {k: (v if isinstance(v, Mapping) else value(v[0], v[1], v[2], device=device)) for k, v in values.items()}
    return {"system": system, "dataset": dataset, "values": vals, "not_run": dict(not_run or {}), **extra,
            "hardware": hardware(), "versions": versions(), "git_commit": git_commit()}


def per_question(record: Mapping[str, Any], name: str) -> dict[str, float]:
    """Each question's value of figure ``name`` where the record lists them (``predictions``:
    ``{"id": ..., "<name>": ...}``, e.g. the reader's or DensePhrases' EM and F1); empty otherwise.
    The claims' paired tests and the learning check's comparison of a measure job read them."""
    preds = record.get("predictions") or []
    return {str(r["id"]): float(r[name]) for r in preds if isinstance(r, Mapping) and "id" in r and name in r}


def write(path: Path, system: str, dataset: str | None, values: Mapping[str, Any], device: str = "cpu",
          not_run: Mapping[str, str] | None = None, **extra: Any) -> Path:
    """:func:`record` written to ``path`` (atomically)."""
    write_json(path, record(system, dataset, values, device, not_run, **extra))
    return path
