"""The toy's settings: ``methods.toy`` over its schema's defaults; the keys that never change its model."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.config import fragment_defaults
from harness.recording import merged

SCHEMA = "schema.yaml"
#: defaults of methods.toy: written once, in the schema
DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA)
#: keys of methods.toy that never change a trained model (besides harness.methods.base.NOT_TRAINING)
NOT_MODEL = ("rrf_with", "rrf_k")


def settings(section: Mapping[str, Any]) -> dict[str, Any]:
    """``methods.toy`` with its defaults. ``merged`` reads nothing itself: only the keys a step then
    reads land in its meta.json's ``settings_read`` (``{**DEFAULTS, **section}`` would read them all)."""
    return merged(DEFAULTS, section)
