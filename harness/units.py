"""Unit conversion between what the harness records (SI base units) and what papers print."""
from __future__ import annotations

from harness.errors import ConfigError

# unit -> (dimension, factor to the dimension's base unit)
UNITS = {
    "ns": ("time", 1e-9), "us": ("time", 1e-6), "ms": ("time", 1e-3), "s": ("time", 1.0),
    "m": ("time", 60.0), "h": ("time", 3600.0),
    "B": ("bytes", 1.0), "KB": ("bytes", 1e3), "MB": ("bytes", 1e6), "GB": ("bytes", 1e9),
    "ratio": ("fraction", 1.0), "%": ("fraction", 0.01),
    "count": ("count", 1.0), "Q/s": ("rate", 1.0), "x": ("factor", 1.0), "none": ("none", 1.0),
}


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """``value`` in ``from_unit`` expressed in ``to_unit`` (GB are 10^9 bytes, m are minutes)."""
    try:
        dim_a, fa = UNITS[from_unit]
        dim_b, fb = UNITS[to_unit]
    except KeyError as exc:
        raise ConfigError(f"unknown unit {exc.args[0]!r}; known: {', '.join(UNITS)}") from None
    if dim_a != dim_b:
        raise ConfigError(f"cannot convert {from_unit!r} ({dim_a}) to {to_unit!r} ({dim_b})")
    return value * fa / fb
