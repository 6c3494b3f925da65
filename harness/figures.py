"""The figure record a measure job writes (``metrics/<dataset>/<job>/<system>.json``), written once.

A record is ``{system, dataset, values: {name: {value, unit, device?, what?, kind?}}, not_run:
{name: why}, ...extra, hardware, versions, git_commit}``: every figure with its unit, the device
it was measured on and what it is; a figure scaled from a measured fraction says ``kind:
projected`` (rendered as projected, never as measured); a figure that could not be measured here
is absent from ``values`` and named in ``not_run`` with the reason. The tables
(:mod:`harness.tables`) and the regression (``metric:<name>`` keys, :mod:`harness.measured`) read
these files.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.io import write_json
from harness.meta import git_commit, hardware, versions


def value(v: float, unit: str, what: str | None = None, *, device: str | None = None,
          projected: bool = False) -> dict[str, Any]:
    """One figure. ``projected``: scaled from a measured fraction (timed batches x the test set's
    batches, a corpus sample x the corpus)."""
    out: dict[str, Any] = {"value": v, "unit": unit}
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


def write(path: Path, system: str, dataset: str | None, values: Mapping[str, Any], device: str = "cpu",
          not_run: Mapping[str, str] | None = None, **extra: Any) -> Path:
    """:func:`record` written to ``path`` (atomically)."""
    write_json(path, record(system, dataset, values, device, not_run, **extra))
    return path
