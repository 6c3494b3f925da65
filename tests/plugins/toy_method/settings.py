"""The toy's settings: ``methods.toy`` over its schema's defaults; which artifacts each field changes is in the schema (x-affects)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.config import fragment_defaults
from harness.recording import merged

SCHEMA = "schema.yaml"
#: defaults of methods.toy: written once, in the schema
DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA)


def settings(section: Mapping[str, Any]) -> dict[str, Any]:
    """``methods.toy`` with its defaults. ``merged`` reads nothing itself: only the keys a step then
    reads land in its meta.json's ``settings_read`` (``{**DEFAULTS, **section}`` would read them all)."""
    return merged(DEFAULTS, section)
