"""Look up measured values by name: ``<dataset>/<system>/<measure>`` from the eval JSONs (or, for
``metric:<name>``, the metrics JSONs)."""
from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.io import read_json

METRIC_NAME = re.compile(r"[A-Za-z0-9_]+")
MEASURE_FORMS = "an ir_measures string (e.g. nDCG@10, Success@20, R@100, RR@10) or metric:<name>"


def split_system(system: str) -> tuple[str, str | None]:
    """A system id is ``<method>`` or ``<method>.<variant>`` (e.g. ``svdr.beta-m20``, ``bpr.hash``)."""
    method, _, variant = system.partition(".")
    return method, variant or None


def locate(cfg: Mapping[str, Any], system: str, dataset: str, measure: str) -> tuple[list[Path], list[Path], str | None]:
    """Where this profile measures ``measure`` of ``system`` on ``dataset``, from the plan: the files
    that may hold it (an eval file, or the metrics files of every measure job that writes the system),
    the rule outputs (folders) they live in, and None — or ([], [], why it is not measured)."""
    from harness import plan as hplan

    name, _ = split_system(system)
    if dataset not in cfg["datasets"]:
        if cfg["tables"].get("unavailable", {}).get(dataset):  # a paper's label the profile has no stand-in for
            return [], [], no_stand_in(cfg, dataset)
        return [], [], f"dataset {dataset!r} is not in profile {cfg['profile']}"
    p = hplan.get(cfg)
    if measure.startswith("metric:"):
        jobs = p.metric_jobs(system, dataset)
        if not jobs:
            return [], [], _why(cfg, name, system, dataset, "no measure job writes figures of")
        dirs = [hplan.output(cfg, j) for j in jobs]
        return [d / f"{system}.json" for d in dirs], dirs, None
    job = p.systems().get((system, dataset))
    if job is None:
        return [], [], _why(cfg, name, system, dataset, "no search job writes")
    folder = hplan.path(cfg, hplan.Ref("eval", job.id, dataset))
    return [folder / f"{system}.json"], [folder], None


def stand_in(cfg: Mapping[str, Any], label: str) -> tuple[list[str], str | None]:
    """The profile's datasets that stand in for a paper dataset ``label`` (config key ``substitutions``):
    ``([key], None)`` for one, ``(keys, None)`` for a mean over several (``{mean_of: [keys]}``: the
    paper's average over sets of which the profile wires some; each set weighted equally), ``([], why)``
    where none does."""
    sub = cfg["substitutions"].get(label)
    if sub is None:
        return [], no_stand_in(cfg, label)
    if isinstance(sub, Mapping):
        return [str(k) for k in sub["mean_of"]], None
    return [str(sub)], None


def mean_of(cfg: Mapping[str, Any], label: str) -> list[str]:
    """The datasets a mean stands in for ``label`` over (:func:`stand_in`); [] where one dataset (or none) does."""
    keys, _ = stand_in(cfg, label)
    return keys if len(keys) > 1 else []


def no_stand_in(cfg: Mapping[str, Any], label: str) -> str:
    """Why a paper dataset ``label`` has no measured cell here: no substitution, and the profile's
    ``tables.unavailable`` reason where it gives one."""
    why = cfg["tables"].get("unavailable", {}).get(label)
    return f"no dataset of profile {cfg['profile']} stands in for {label}" + (f": {why}" if why else "")


def _why(cfg: Mapping[str, Any], name: str, system: str, dataset: str, what: str) -> str:
    from harness.methods.base import section

    method = section(cfg, name)
    if method is None:
        return f"system {system!r} has no methods.{name} section in profile {cfg['profile']}"
    if not method.get("enabled", True):
        return f"methods.{name}.enabled is false in profile {cfg['profile']}"
    if dataset not in method.get("datasets", []):
        return f"{name} is not run on {dataset} in profile {cfg['profile']} (methods.{name}.datasets)"
    return f"{what} system {system!r} on {dataset} in profile {cfg['profile']} (`python -m harness plan` lists the jobs)"


def _closest_measure(name: str) -> str | None:
    """The ir_measures string nearest to ``name``: its measure name corrected, its parameters kept."""
    import ir_measures

    head = name.split("@", 1)[0].split("(", 1)[0]
    known = sorted(ir_measures.measures.registry)
    by_lower = {k.lower(): k for k in known}
    close = [by_lower[head.lower()]] if head.lower() in by_lower else difflib.get_close_matches(head, known, n=1)
    if not close:
        return None
    guess = close[0] + name[len(head):]
    try:
        return str(ir_measures.parse_measure(guess))
    except (NameError, ValueError, SyntaxError, TypeError):  # how ir_measures refuses a name
        return close[0]


def check_measure(name: str, where: str) -> None:
    """Refuse an unknown measure name, so that a typo in configs/expected or configs/claims.yaml
    fails at load time as "unknown measure" (with the closest known name) rather than reading as
    a missing measured value later. ``where`` names the file and the entry."""
    if name.startswith("metric:"):
        if METRIC_NAME.fullmatch(name.removeprefix("metric:")):
            return
        raise ConfigError(f"{where}: unknown measure {name!r}: a metric:<name> has letters, digits and '_' only",
                          fix=f"write the measure as {MEASURE_FORMS}")
    import ir_measures

    try:
        canonical = str(ir_measures.parse_measure(name))
    except (NameError, ValueError, SyntaxError, TypeError):  # how ir_measures refuses a name
        canonical = None
    if canonical == name:
        return
    if canonical is not None:  # an alias (MRR@10, NDCG@10): the eval files key measures by the printed form
        raise ConfigError(f"{where}: measure {name!r} is written {canonical!r} by ir_measures, and the evaluation "
                          f"files name it so", fix=f"write {canonical!r}")
    close = _closest_measure(name)
    raise ConfigError(f"{where}: unknown measure {name!r}" + (f" (did you mean {close!r}?)" if close else ""),
                      fix=f"write the measure as {MEASURE_FORMS}")


def parse_key(key: str) -> tuple[str, str, str]:
    parts = key.split("/", 2)
    if len(parts) != 3:
        raise ConfigError(f"measured key {key!r} must read <dataset>/<system>/<measure>, e.g. squad-open/dpr/Success@20")
    return parts[0], parts[1], parts[2]


@dataclass
class Found:
    """A measured value (eval measures as stored, fractions; ``metric:`` figures in their dimension's
    base unit: seconds, bytes), where it came from, and how it was obtained."""

    value: float | None
    unit: str = ""                 # base unit of a metric figure (s, B, ratio, count)
    raw: dict[str, Any] | None = None   # the metrics entry as written (value, unit, device, kind, ...)
    path: Path | None = None
    reason: str | None = None      # why there is no value (not measured, or the file's not_run note)
    parts: dict[str, Found] | None = None   # a mean's sets (find_mean): dataset -> its value, each weighted equally


def outputs(cfg: Mapping[str, Any], key: str) -> list[Path]:
    """The rule outputs (folders) a key's value lives in ([] when the profile does not measure it)."""
    dataset, system, measure = parse_key(key)
    return locate(cfg, system, dataset, measure)[1]


def find(cfg: Mapping[str, Any], system: str, dataset: str, measure: str) -> Found:
    """The one lookup of a measured value, used by tables, claims and the regression check."""
    from harness.units import UNITS

    files, _, why = locate(cfg, system, dataset, measure)
    if why:
        return Found(None, reason=why)
    not_run = None
    for path in files:
        if not path.exists():
            continue
        doc = read_json(path)
        if not measure.startswith("metric:"):
            v = doc.get("measures", {}).get(measure)
            return Found(v, path=path, reason=None if v is not None else f"{path} has no measure {measure}")
        name = measure.removeprefix("metric:")
        entry = doc.get("values", {}).get(name)
        if entry is not None:
            dim, factor = UNITS[entry["unit"]]
            return Found(float(entry["value"]) * factor, _BASE_UNIT.get(dim, ""), entry, path)
        not_run = not_run or doc.get("not_run", {}).get(name)
    missing = [str(f) for f in files if not f.exists()]
    return Found(None, path=files[0] if files else None,
                 reason=not_run or (f"not measured ({', '.join(missing)} missing)" if missing
                                    else f"{', '.join(map(str, files))} has no {measure}"))


_BASE_UNIT = {"time": "s", "bytes": "B"}


def find_mean(cfg: Mapping[str, Any], system: str, datasets: list[str], measure: str) -> Found:
    """:func:`find` on each of ``datasets``, and their mean (each dataset weighted equally, as the papers
    average BEIR's sets): the first dataset's file and entry (``kind`` projected where any part is), or
    no value and the first missing part's reason, naming its dataset."""
    parts = [find(cfg, system, d, measure) for d in datasets]
    for d, f in zip(datasets, parts, strict=True):
        if f.value is None:
            return Found(None, path=f.path, reason=f"{d}: {f.reason}")
    mean = sum(float(f.value) for f in parts) / len(parts)   # base units (s, B); every part has a value here
    raw = dict(parts[0].raw) if parts[0].raw is not None else None
    if raw is not None:   # a metrics entry: the mean in the first entry's unit
        from harness.units import UNITS

        raw["value"] = mean / UNITS[raw["unit"]][1]
        if any((f.raw or {}).get("kind") == "projected" for f in parts):
            raw["kind"] = "projected"
    return Found(mean, parts[0].unit, raw, parts[0].path, parts=dict(zip(datasets, parts, strict=True)))


def find_key(cfg: Mapping[str, Any], key: str) -> Found:
    """:func:`find` by key ``<dataset>/<system>/<measure>``."""
    dataset, system, measure = parse_key(key)
    return find(cfg, system, dataset, measure)


def lookup(cfg: Mapping[str, Any], key: str) -> float | None:
    """A measured value by key; ``metric:<name>`` values in their dimension's base unit (bytes, seconds)."""
    return find_key(cfg, key).value


def available(cfg: Mapping[str, Any], key: str) -> str | None:
    """None if the profile measures ``key``, else why not."""
    dataset, system, measure = parse_key(key)
    return locate(cfg, system, dataset, measure)[2]
