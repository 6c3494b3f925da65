"""LightRetriever's settings: defaults from schema.yaml, variants, the config checks the schema cannot
make, and the system ids of a model (main or variant)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.settings import fragment_defaults
from harness.errors import ConfigError
from harness.methods.base import model_fields
from harness.recording import merged

DEFAULTS = fragment_defaults(__file__, "schema.yaml")
NAME = "lightretriever"
#: what a model's info file records of its settings: the fields that change it (x-affects lists
#: model) but the instructions, one entry per training set, which its train job's hash covers
MODEL_SETTINGS = tuple(k for k in model_fields(__file__, "schema.yaml") if k != "instructions")
SYSTEM_KINDS = ("base", "dense", "sparse", "hybrid")


def settings(cfg: Mapping[str, Any], variant: str | None = None) -> dict[str, Any]:
    """methods.lightretriever with defaults; a variant: ``variant_overrides`` then its own settings."""
    sec = cfg["methods"][NAME]
    s = merged(DEFAULTS, sec)
    s["speed"] = merged(DEFAULTS["speed"], sec.get("speed"))
    if variant is None:
        return s
    if variant not in (s["variants"] or {}):
        raise ConfigError(f"unknown LightRetriever variant {variant!r}; methods.{NAME}.variants defines: "
                          f"{', '.join(s['variants'] or {}) or '(none)'}")
    return merged(s, s["variant_overrides"], s["variants"][variant])


def instruction_for(s: Mapping[str, Any], dataset: str) -> str | None:
    """The task instruction of ``dataset`` (None when the model is trained without instructions)."""
    return _instruction(s, dataset) if s["instruction"] else None


def _instruction(s: Mapping[str, Any], dataset: str) -> str:
    try:
        return s["instructions"][dataset]
    except KeyError:
        raise ConfigError(f"methods.{NAME}.instructions has no instruction for dataset {dataset!r}",
                          fix=f"add methods.{NAME}.instructions.{dataset}: '<task>' (App. A.4 lists the paper's)") from None


def check(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    """Config errors that the schema cannot see: every training and evaluation set known and
    instructed, on the right side of ``decontam``, a variant's systems possible."""
    from harness.decontam import report as hdecontam

    where = f"methods.{NAME}"
    evals = list(s["datasets"]) + list(s["variant_datasets"] or [])
    for key in list(s["train_datasets"]) + evals:
        if key not in cfg["datasets"]:
            raise ConfigError(f"{where}: unknown dataset {key!r}; config key datasets defines: {', '.join(cfg['datasets'])}")
        _instruction(s, key)
    train, test = hdecontam.plan(cfg)
    on_train = {(cfg["datasets"][q.key]["id"], q.split) for q in train}
    on_test = {(cfg["datasets"][q.key]["id"], q.split) for q in test}
    for key in s["train_datasets"]:
        if (cfg["datasets"][key]["id"], "train") not in on_train:
            raise ConfigError(f"{where}.train_datasets: {key} (train split) is not on the training side of config key "
                              "decontam; LightRetriever trains on decontaminated sets only",
                              fix=f"add {key}:train to decontam.train")
    for key in dict.fromkeys(evals):
        if (cfg["datasets"][key]["id"], "test") not in on_test:
            raise ConfigError(f"{where}: evaluation set {key} is not on the test side of config key decontam",
                              fix=f"add {key} to decontam.test")
    for v, kinds in (s["variant_systems"] or {}).items():
        if v not in (s["variants"] or {}):
            raise ConfigError(f"{where}.variant_systems: {v!r} is not a variant ({', '.join(s['variants'] or {})})")
        if "hybrid" in kinds and not {"dense", "sparse"} <= set(kinds):
            raise ConfigError(f"{where}.variant_systems.{v}: hybrid needs dense and sparse")
    w = s["hybrid_weights"]
    if not sum(w) > 0:
        raise ConfigError(f"{where}.hybrid_weights: {w} sum to 0", fix="e.g. [0.7, 0.3]")


def train_signature(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: s[k] for k in MODEL_SETTINGS if k in s}


# --------------------------------------------------------------------------------------------
# models and their system ids


def variants(s: Mapping[str, Any]) -> list[str]:
    return list(s["variants"] or {})


def model_id(v: str | None) -> str:
    return NAME if v is None else f"{NAME}.{v}"


def systems_of(s: Mapping[str, Any], v: str | None) -> dict[str, str]:
    """kind -> system id of one model's search job (hybrid: the fusion job's system)."""
    if v is None:
        return {"dense": NAME, "base": f"{NAME}.base", "sparse": f"{NAME}.sparse", "hybrid": f"{NAME}.hybrid"}
    kinds = (s["variant_systems"] or {}).get(v, list(SYSTEM_KINDS))
    p = f"{NAME}.{v}"
    ids = {"dense": p, "base": f"{p}-base", "sparse": f"{p}-sparse", "hybrid": f"{p}-hybrid"}
    return {k: ids[k] for k in SYSTEM_KINDS if k in kinds}


def eval_datasets(s: Mapping[str, Any], variant: bool) -> list[str]:
    """The evaluation sets of the main model (``datasets``) or of a variant (``variant_datasets``, else ``datasets``)."""
    if not variant or s["variant_datasets"] is None:
        return list(s["datasets"])
    return list(s["variant_datasets"])


def needs_sparse(s: Mapping[str, Any], v: str | None) -> bool:
    return "sparse" in systems_of(s, v)
