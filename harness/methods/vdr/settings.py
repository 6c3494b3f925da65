"""Settings of methods.svdr / methods.vdr: defaults (written once, in schema.yaml), ablations, and
the key lists that decide which jobs a config change reaches."""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from harness.settings import fragment_defaults
from harness.errors import ConfigError
from harness.recording import merged
from harness.methods.base import model_fields, schema_fields

SCHEMA = "schema.yaml"
#: keys that change the binary token index T(D) (x-affects lists index.token)
TOKEN_INDEX_KEYS = schema_fields(__file__, SCHEMA, "index.token")
#: settings that change a trained model (x-affects lists model; its identity: variants equal to another model share it)
TRAIN_KEYS = model_fields(__file__, SCHEMA)
#: defaults of methods.svdr / methods.vdr and of their ``synthetic`` and ``scale`` blocks
DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA)
SYNTHETIC_DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA, "synthetic")
SCALE_DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA, "scale")


def settings(mcfg: Mapping[str, Any], ablation: str | None = None, method: str = "svdr") -> dict[str, Any]:
    """The method section with defaults filled in; with ``ablation``: plus ``variant_overrides``
    (every ablation model) and ``variants.<name>`` (this one's change)."""
    out = merged(DEFAULTS, mcfg)
    for key in ("variants", "variant_overrides"):  # the ablation machinery: DEFAULTS' value, never the section's
        if key in DEFAULTS:
            dict.__setitem__(out, key, merged({"v": DEFAULTS[key]})["v"])
        else:
            dict.pop(out, key, None)
    if ablation is not None:
        known = mcfg.get("variants", {})
        if ablation not in known:
            close = difflib.get_close_matches(ablation, list(known), n=1)
            raise ConfigError(
                f"unknown ablation {ablation!r} of methods.{method}" + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; config key methods.{method}.variants defines: {', '.join(known) or 'none'}")
        out = merged(out, mcfg.get("variant_overrides"), known[ablation])
    # checked without reading them (dict.get): a job that never uses them (the token index) does not
    # depend on them, and its hash leaves them out
    if dict.get(out, "loss") not in ("paper", "code-mean4"):
        raise ConfigError(f"methods.{method}.loss must be 'paper' or 'code-mean4', got {dict.get(out, 'loss')!r}")
    if dict.get(out, "projection") not in ("vsearch", "mlm-head"):
        raise ConfigError(f"methods.{method}.projection must be 'vsearch' or 'mlm-head', "
                          f"got {dict.get(out, 'projection')!r}")
    return out


def synthetic_defaults() -> dict[str, Any]:
    """Table 5 settings used where ``methods.svdr.synthetic`` leaves a key out."""
    return dict(SYNTHETIC_DEFAULTS)


def scale_settings(mcfg: Mapping[str, Any]) -> dict[str, Any]:
    """``methods.<m>.scale`` with its schema defaults."""
    return {**SCALE_DEFAULTS, **(mcfg.get("scale") or {})}


def train_signature(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: s.get(k) for k in TRAIN_KEYS}
