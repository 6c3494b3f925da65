"""DensePhrases' settings: defaults from schema.yaml, variants, system ids, the config check, and
the question as the model reads it."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.methods.base import model_fields, variant_model_id
from harness.settings import fragment_defaults
from harness.errors import ConfigError
from harness.recording import merged

SCHEMA = "schema.yaml"
DEFAULTS = fragment_defaults(__file__, SCHEMA)
#: sections merged key by key over their own defaults (read once: parsing the schema costs ~3 ms)
NESTED = ("loss_weights", "filter", "search", "qs", "timing", "dsmall")
NESTED_DEFAULTS = {key: fragment_defaults(__file__, SCHEMA, key) for key in NESTED}
NAME = "densephrases"
MODEL_FIELDS = model_fields(__file__, SCHEMA)
ENCODERS = ("phrase_encoder", "question_start", "question_end")
HEADS_FILE = "filter.pt"
INFO_FILE = "densephrases.json"
DUMP_DIR = "dump"
ANSWERS = ".answers.jsonl"


def settings(cfg: Mapping[str, Any], variant: str | None = None) -> dict[str, Any]:
    """methods.densephrases with defaults; a variant: ``variant_overrides`` then its own settings."""
    sec = cfg["methods"][NAME]
    s = merged(DEFAULTS, sec)
    for key in NESTED:
        s[key] = merged(NESTED_DEFAULTS[key], sec.get(key))
    if variant is None:
        return s
    if variant not in (s["variants"] or {}):
        raise ConfigError(f"unknown DensePhrases variant {variant!r}; methods.{NAME}.variants defines: "
                          f"{', '.join(s['variants'] or {}) or '(none)'}")
    s = merged(s, s["variant_overrides"])
    return merged(s, s["variants"][variant], depth=1)


def variants(s: Mapping[str, Any]) -> list[str]:
    """The variants the plan trains: none when no dataset evaluates them (``variant_datasets`` empty)."""
    return list(s.get("variants") or {}) if s.get("variant_datasets") else []


def model_id(v: str | None) -> str:
    """System id of a model (and job id of the model it trains where it trains its own, :func:`model_of`):
    ``densephrases`` or ``densephrases.<variant>``."""
    return NAME if v is None else f"{NAME}.{v}"


def train_signature(s: Mapping[str, Any]) -> dict[str, Any]:
    """What a model's training reads: the fields whose ``x-affects`` lists ``model``."""
    return {k: s.get(k) for k in MODEL_FIELDS}


def model_of(cfg: Mapping[str, Any], v: str | None) -> str:
    """The model variant ``v``'s jobs read: its own (``model_id(v)``), or that of the first variant
    declared before it whose training settings equal its own (one model trained once: on small,
    ``nodistill`` and ``pb-c2`` are the same settings). A variant never reuses the main model: its
    index is D_small's, not the main dump."""
    if v is None:
        return NAME
    vs = variants(settings(cfg))
    earlier = vs[:vs.index(v)] if v in vs else []
    return variant_model_id(NAME, v, lambda u: {"variant": u is not None, **train_signature(settings(cfg, u))}, earlier)


def _sys(mid: str, suffix: str) -> str:
    """A system of model ``mid``: ``densephrases.<suffix>`` for the main model, ``densephrases.<v>-<suffix>``."""
    return f"{mid}.{suffix}" if mid == NAME else f"{mid}-{suffix}"


def check(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    m = f"methods.{NAME}"
    for key in [s["train_dataset"], *s["datasets"], *s["rc_datasets"]]:
        if key not in cfg["datasets"]:
            raise ConfigError(f"{m}: unknown dataset {key!r}; config key datasets defines: {', '.join(cfg['datasets'])}",
                              fix=f"add datasets.{key} or remove it from {m}")
    if s["distill"] and not (cfg.get("reader") and cfg["reader"].get("enabled", True)):
        raise ConfigError(f"{m}.distill is true but the config has no enabled reader section (the distillation "
                          "teacher is the harness's extractive reader)", fix=f"set {m}.distill: false or add reader:")
    unused = [d for d in s["variant_datasets"] if d not in (*s["datasets"], *s["rc_datasets"])]
    if unused:
        raise ConfigError(f"{m}.variant_datasets: {', '.join(unused)} is in neither {m}.datasets nor "
                          f"{m}.rc_datasets, so no variant would be evaluated there",
                          fix=f"add it to {m}.datasets or {m}.rc_datasets, or remove it from {m}.variant_datasets")
    if s["negatives"] not in ("none", "inbatch", "prebatch"):
        raise ConfigError(f"{m}.negatives: {s['negatives']!r} is not one of none, inbatch, prebatch")


def prepare(s: Mapping[str, Any], text: str) -> str:
    """The question as the model reads it: one trailing '?' removed, truecased when all lower-case."""
    from harness.evaluate.qa import prepare_question

    return prepare_question(text, strip_qmark=bool(s["strip_question_mark"]), truecase=bool(s["truecase"]))


def em_of(pred: str, answers: Sequence[str], rule: str) -> bool:
    from harness.evaluate.qa import answer_em

    return bool(answer_em(pred, list(answers), rule))
