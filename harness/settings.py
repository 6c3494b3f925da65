"""The config's plain pieces, below every layer that registers a config section.

``harness.config`` loads and validates the *whole* config: it needs the schema fragment of every
registered method, dataset family and index backend, so it sits above them (the layer test,
tests/test_imports.py). What those layers themselves read from a config lives here, importing
nothing of theirs: where results go (:func:`results_root`), the data mirrors (:func:`mirror_dirs`),
a section's hash and dotted lookup, a method's defaults from its schema fragment
(:func:`fragment_defaults`), the merge rule, and validation of a document against a plain schema
file of workflow/schemas (:func:`validate`; the config's own schema, composed of the registered
fragments, is ``harness.config.load_schema``). ``harness.config`` re-exports all of it.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from harness import REPO
from harness.errors import ConfigError
from harness.io import read_yaml

DEFAULT_CONFIG = REPO / "configs" / "default.yaml"
SCHEMA_DIR = REPO / "workflow" / "schemas"


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; values of ``over`` win, dicts are merged key by key."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_schema(name: str) -> dict[str, Any]:
    return _parsed(SCHEMA_DIR / f"{name}.schema.yaml")


def read_schema_file(path: str | Path) -> dict[str, Any]:
    """A schema YAML file (a method's fragment), parsed once per process while the file is unchanged
    (a config load reads each fragment several times: its schema, its defaults); a copy."""
    return copy.deepcopy(_parsed(Path(path)))


def _parsed(path: Path) -> Any:
    """``read_yaml(path)``, cached per file state (a file that changes on disk is read again)."""
    p = path.resolve()
    try:
        st = p.stat()
    except FileNotFoundError:
        return read_yaml(p)  # its error names the file
    return _parsed_at(p, st.st_mtime_ns, st.st_size)


@cache
def _parsed_at(path: Path, mtime_ns: int, size: int) -> Any:
    return read_yaml(path)


def read_schema(name: str) -> dict[str, Any]:
    """workflow/schemas/<name>.schema.yaml as written (a copy; the config's schema, which gets the
    registered fragments grafted in, is ``harness.config.load_schema("config")``)."""
    return copy.deepcopy(_read_schema(name))


def _allowed_keys(schema: Mapping[str, Any], root: Mapping[str, Any]) -> list[str]:
    if "$ref" in schema:
        ref = schema["$ref"].split("/")[-1]
        schema = root["$defs"][ref]
    return sorted(schema.get("properties", {}))


def fragment_defaults(module_file: str | Path, schema_file: str, *under: str) -> dict[str, Any]:
    """``{key: default}`` of a method's schema fragment (the file beside its module), optionally of
    the object property ``under`` it: a method's defaults are written once, in its schema."""
    node = read_schema_file(Path(module_file).parent / schema_file)
    for key in under:
        node = node["properties"][key]
    return {k: copy.deepcopy(v["default"]) for k, v in node.get("properties", {}).items() if "default" in v}


def _owners(schema: Mapping[str, Any], key: str) -> list[str]:
    """The method sections whose schema has ``key`` (for "a key that belongs to another method")."""
    methods = schema.get("properties", {}).get("methods", {}).get("properties", {})
    return [f"methods.{m}" for m, frag in methods.items() if key in frag.get("properties", {})]


def validate(data: Any, schema_name: str, source: str = "config", schema: Mapping[str, Any] | None = None) -> None:
    """Validate ``data`` against workflow/schemas/<schema_name>.schema.yaml (or ``schema``, the
    composed config schema ``harness.config.validate`` passes).

    The first error is reported with its key path; an unknown key lists the allowed keys and
    the closest match.
    """
    import jsonschema

    if schema is None:
        if schema_name == "config":
            raise ConfigError("the config schema needs the registered methods' fragments",
                              fix="validate a config with harness.config.validate (or load_config)")
        schema = _read_schema(schema_name)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.path), list(map(str, e.path))))
    if not errors:
        return
    err = errors[0]
    path = ".".join(str(p) for p in err.absolute_path) or "<top>"
    if err.validator == "additionalProperties":
        allowed = _allowed_keys(err.schema, schema)
        extra = sorted(set(err.instance) - set(allowed)) if isinstance(err.instance, dict) else []
        hints = []
        renamed = err.schema.get("x-renamed") or {}   # a section's old spellings -> the new ones
        for key in extra:
            if key in renamed:
                hints.append(f"{key!r} (renamed: write {renamed[key]!r}; every method spells its variants "
                             "variants / variant_overrides / variant_datasets)")
                continue
            close = difflib.get_close_matches(key, allowed, n=1)
            owners = _owners(schema, key) if path.startswith("methods.") else []
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                         + (f" ({key!r} is a key of {', '.join(owners)})" if owners else ""))
        raise ConfigError(
            f"{source}: unknown key {', '.join(hints)} under {path}; allowed keys: {', '.join(allowed)}"
        )
    if err.validator == "type":
        raise ConfigError(f"{source}: {path}: {err.message}",
                          fix=f"give {path} a value of that type; --config KEY=VALUE reads a number, true/false, null or "
                              "a string, so write lists, mappings and other complex values in a YAML file "
                              "(snakemake --configfile FILE; python -m harness ... --config FILE)")
    raise ConfigError(f"{source}: {path}: {err.message}")


def lookup_key(cfg: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted config key (``methods.dpr.epochs``); None where the path ends early."""
    node: Any = cfg
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def section_hash(cfg: Mapping[str, Any], *keys: str) -> str:
    """Short stable hash of config sections (dotted keys), stored in meta.json and used as a
    Snakemake param so that a changed setting re-runs exactly the rules that depend on it."""
    blob = json.dumps({key: lookup_key(cfg, key) for key in keys}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def results_root(cfg: Mapping[str, Any]) -> Path:
    return Path(cfg["results_dir"]) / cfg["profile"]


def mirror_dirs(cfg: Mapping[str, Any]) -> list[Path]:
    """Mirror folders: env HARNESS_DATA_MIRROR (os.pathsep-separated) first, then data.mirror."""
    dirs = [Path(p) for p in os.environ.get("HARNESS_DATA_MIRROR", "").split(os.pathsep) if p]
    if cfg["data"].get("mirror"):
        dirs.append(Path(cfg["data"]["mirror"]))
    return dirs
