"""BPR's settings: ``methods.bpr`` with its schema defaults, train variants, search variants, the
DPR baselines and the scale overlay's ``methods.bpr.scale``."""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from harness.settings import fragment_defaults
from harness.errors import ConfigError
from harness.methods.base import Context, model_fields, variant_model_id
from harness.recording import merged

#: the schema fragment beside this package (harness.methods.bpr.SCHEMA)
SCHEMA = "schema.yaml"
#: defaults of methods.bpr: written once, in the schema
DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA)
#: defaults of methods.bpr.scale (Table 1 at the paper's scale from a synthetic payload)
SCALE_DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA, "scale")
#: settings that change a trained model (x-affects lists model; its identity: variants equal to another model share it)
TRAIN_KEYS = model_fields(__file__, SCHEMA)
#: search variants of the trained main model: name -> (index kind, rerank)
SEARCH_VARIANTS = {
    "bflat": ("flat", True),
    "bhash": ("hash", True),
    "no-rerank": ("hash", False),
    "no-cand": (None, True),
}
_L_VARIANT = re.compile(r"^l(\d+)$")


def settings(cfg: Mapping[str, Any], variant: str | None = None) -> dict[str, Any]:
    """methods.bpr with defaults; for a train variant, ``variant_overrides`` and the
    variant's own settings on top (the variant's scale and its change)."""
    base = merged(DEFAULTS, cfg["methods"]["bpr"])
    if variant is None:
        return base
    variants = base["variants"] or {}
    if variant not in variants:
        raise ConfigError(f"unknown BPR train variant {variant!r}; methods.bpr.variants defines: "
                          f"{', '.join(variants) or '(none)'}")
    return merged(base, base["variant_overrides"], variants[variant])


def variant_context(cfg: Mapping[str, Any], variant: str | None, dataset: str | None = None) -> Context:
    """A Context whose ``mcfg`` is the (variant's) effective methods.bpr section."""
    cfg2 = merged(cfg, {"methods": merged(cfg["methods"], {"bpr": settings(cfg, variant)})})
    return Context(cfg2, "bpr", dataset)


def train_signature(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: s.get(k) for k in TRAIN_KEYS}


def train_hash(cfg: Mapping[str, Any], variant: str | None = None) -> str:
    """Hash of what a BPR training reads: its effective settings, the seed, the training data's config."""
    s = settings(cfg, variant)
    blob = {"train": train_signature(s), "seed": cfg["seed"], "data": cfg["datasets"].get(s["train_dataset"])}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:12]


def model_source(cfg: Mapping[str, Any], variant: str) -> str:
    """Folder name under models/ of a train variant: ``bpr`` when its settings equal the main
    model's (e.g. ``ref`` with empty ``variant_overrides``), else ``bpr-variant/<name>``."""
    if train_signature(settings(cfg, variant)) == train_signature(settings(cfg)):
        return "bpr"
    return f"bpr-variant/{variant}"


def model_id(cfg: Mapping[str, Any], variant: str | None) -> str:
    """``bpr`` for the main model and for a train variant whose settings equal it, else ``bpr.<variant>``."""
    return variant_model_id("bpr", variant, lambda v: train_signature(settings(cfg, v)))


def search_variants(cfg: Mapping[str, Any]) -> list[str]:
    """Search variants of the main model: bflat, bhash, no-rerank, no-cand and l<n> (Table 8)."""
    return list(SEARCH_VARIANTS) + [f"l{n}" for n in settings(cfg)["candidate_grid"]]


def train_variants(cfg: Mapping[str, Any]) -> list[str]:
    return list(settings(cfg)["variants"] or {})


def dpr_baselines(cfg: Mapping[str, Any]) -> dict[str, str]:
    """DPR baselines on the same passages: variant -> dense index spec (e.g. hnsw -> faiss:HNSW512)."""
    return {name: dpr_baseline(cfg, name) for name in settings(cfg)["dpr_baselines"] or {}}


def dpr_baseline(cfg: Mapping[str, Any], name: str) -> str:
    """The dense index spec of the DPR baseline ``name``, reading that entry alone: its index job
    depends on no other baseline's spec (and its hash covers only its own)."""
    spec = settings(cfg)["dpr_baselines"][name]
    if not str(spec).startswith("faiss:"):
        raise ConfigError(f"methods.bpr.dpr_baselines.{name}: {spec!r} is not a faiss:<factory> spec")
    return str(spec)


def efficiency_systems(cfg: Mapping[str, Any]) -> list[str]:
    """Systems whose index size and query time the efficiency rule measures (Tables 1 and 2)."""
    return ["dpr"] + [f"dpr.{v}" for v in dpr_baselines(cfg)] + [f"bpr.{v}" for v in SEARCH_VARIANTS]


def _variant_search(cfg: Mapping[str, Any], variant: str) -> tuple[str | None, bool, int | None]:
    """(index kind: flat | hash | None, rerank, l) of a search variant."""
    s = settings(cfg)
    m = _L_VARIANT.match(variant)
    if m:
        return "flat", True, int(m.group(1))
    if variant not in SEARCH_VARIANTS:
        raise ConfigError(f"unknown BPR search variant {variant!r}; known: {', '.join(search_variants(cfg))}")
    kind, rerank = SEARCH_VARIANTS[variant]
    return kind, rerank, (None if kind is None else int(s["n_candidates"]))


def _check(s: Mapping[str, Any]) -> None:
    if s["cand_loss"] not in ("ranking", "ce"):
        raise ConfigError(f"methods.bpr.cand_loss must be 'ranking' or 'ce', got {s['cand_loss']!r}")
    if s["cand_reduction"] not in ("sum", "mean"):
        raise ConfigError(f"methods.bpr.cand_reduction must be 'sum' or 'mean', got {s['cand_reduction']!r}")
    if s["gamma"] < 0:
        raise ConfigError(f"methods.bpr.gamma must be >= 0, got {s['gamma']}")


def scale_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``methods.bpr.scale`` with its schema defaults (fractions merged key by key)."""
    sc = dict(cfg["methods"]["bpr"].get("scale") or {})
    return {**SCALE_DEFAULTS, **sc, "fractions": {**SCALE_DEFAULTS["fractions"], **(sc.get("fractions") or {})}}
