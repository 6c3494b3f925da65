"""QCR's settings: ``methods.qcr`` with its schema's defaults, variants and Figure 3 grid models, the
file names of its artifacts, and the keys that make a model's identity."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.settings import fragment_defaults
from harness.errors import ConfigError
from harness.recording import merged
from harness.methods.base import model_fields

SCHEMA = "schema.yaml"             # beside this file (harness.methods.qcr.SCHEMA names the same file)
DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA)
CODES_FILE = "codes.npy"
MODEL_FILE = "qcr.pt"              # projection weights and settings beside the backbone's files
ENCODER_DIR = "encoder"
CENTROIDS = "centroids.npy"
KMEANS_OFFSETS = "offsets.npy"       # a k-means index: row i's centroid ids are codes.npy[offsets[i]:offsets[i + 1]]
FSQ_VERSION = "vector-quantize-pytorch==1.32.0"
#: settings that change a trained model (x-affects lists model; its identity: variants equal to another model share it)
TRAIN_KEYS = model_fields(__file__, SCHEMA)
_NESTED = ("crop", "generator", "grid", "kmeans", "analysis")


def settings(cfg: Mapping[str, Any], variant: str | None = None) -> dict[str, Any]:
    """methods.qcr with defaults (nested sections merged key by key); for a variant, the
    ``variant_overrides`` and the variant's settings on top; for a grid model ``g<B>x<K>`` one stage
    of ``grid.steps`` steps at batch B and K codes."""
    sec = cfg["methods"]["qcr"]
    s = merged(DEFAULTS, sec)
    for k in _NESTED:
        s[k] = merged(DEFAULTS.get(k, {}), sec.get(k))
    if variant is None:
        return s
    s = merged(s, s["variant_overrides"])
    if variant.startswith("grid-") and variant not in (s["variants"] or {}):
        b, k = grid_point(s, variant)
        steps = s["grid"].get("steps") or sum(st["steps"] for st in s["schedule"])
        s["schedule"] = [{"steps": int(steps), "batch_size": b, "codes": k}]
        return s
    if variant not in (s["variants"] or {}):
        raise ConfigError(f"unknown QCR variant {variant!r}; methods.qcr.variants defines: "
                          f"{', '.join(s['variants'] or {}) or '(none)'}")
    return merged(s, s["variants"][variant])


def train_signature(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: s.get(k) for k in TRAIN_KEYS}


def codes_k(s: Mapping[str, Any]) -> int:
    """K at inference: the last stage's representation length."""
    return int(s["schedule"][-1]["codes"])


def max_codes(s: Mapping[str, Any]) -> int:
    return max(int(st["codes"]) for st in s["schedule"])


def codebook_size(levels: Sequence[int]) -> int:
    return int(np.prod([int(x) for x in levels]))


def grid_models(s: Mapping[str, Any]) -> list[str]:
    """Figure 3 models ``grid-b<i>k<j>``: batch_sizes[i] x codes[j] (indexes, so that table rows
    such as "smallest batch, shortest K" name the same system in every profile)."""
    return [f"grid-b{i}k{j}" for j in range(len(s["grid"]["codes"])) for i in range(len(s["grid"]["batch_sizes"]))]


def grid_point(s: Mapping[str, Any], name: str) -> tuple[int, int]:
    """(batch size, K) of grid model ``grid-b<i>k<j>``."""
    m = re.fullmatch(r"grid-b(\d+)k(\d+)", name)
    g = s["grid"]
    if not m or int(m.group(1)) >= len(g["batch_sizes"]) or int(m.group(2)) >= len(g["codes"]):
        raise ConfigError(f"unknown QCR grid model {name!r}; methods.qcr.grid defines {grid_models(s)}")
    return int(g["batch_sizes"][int(m.group(1))]), int(g["codes"][int(m.group(2))])


def check(s: Mapping[str, Any], where: str = "methods.qcr") -> None:
    """The section's consistency (the plan checks it once): the model's settings and the variants."""
    check_model(s, where)
    unknown = set(s["full_variants"] or []) - set(s["variants"] or {})
    if unknown:
        raise ConfigError(f"{where}.full_variants names {sorted(unknown)}, which methods.qcr.variants does not define")


def check_model(s: Mapping[str, Any], where: str = "methods.qcr") -> None:
    """One model's settings (a training checks these only: they are what its hash covers)."""
    for i, st in enumerate(s["schedule"]):
        if int(st["codes"]) + int(s["p_max_len"]) + 3 > 512:
            raise ConfigError(f"{where}.schedule[{i}]: K = {st['codes']} codes + p_max_len {s['p_max_len']} "
                              "text tokens exceed BERT's 512 positions", fix="lower codes or p_max_len")
    c = s["crop"]
    if c["min_ratio"] > c["max_ratio"]:
        raise ConfigError(f"{where}.crop: min_ratio {c['min_ratio']} > max_ratio {c['max_ratio']}")
