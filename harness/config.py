"""Load, merge and validate the harness configuration.

The same schema (workflow/schemas/config.schema.yaml) is used by the Snakefile and by every
`python -m harness` command, so a misspelled key fails at once, wherever the run starts.
Merge order: configs/default.yaml (the `smoke` profile) <- profile files <- overrides.
"""
from __future__ import annotations

import argparse
import copy
import difflib
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "configs" / "default.yaml"
SCHEMA_DIR = REPO / "workflow" / "schemas"


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; a syntax error names the file and line."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; values of ``over`` win, dicts are merged key by key."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    return read_yaml(SCHEMA_DIR / f"{name}.schema.yaml")


def _allowed_keys(schema: Mapping[str, Any], root: Mapping[str, Any]) -> list[str]:
    if "$ref" in schema:
        ref = schema["$ref"].split("/")[-1]
        schema = root["$defs"][ref]
    return sorted(schema.get("properties", {}))


def validate(data: Any, schema_name: str = "config", source: str = "config") -> None:
    """Validate ``data`` against workflow/schemas/<schema_name>.schema.yaml.

    The first error is reported with its key path; an unknown key lists the allowed keys and
    the closest match.
    """
    import jsonschema

    schema = load_schema(schema_name)
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
        for key in extra:
            close = difflib.get_close_matches(key, allowed, n=1)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(
            f"{source}: unknown key {', '.join(hints)} under {path}; allowed keys: {', '.join(allowed)}"
        )
    raise ConfigError(f"{source}: {path}: {err.message}")


def load_config(paths: Iterable[Path | str] = (), overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """configs/default.yaml merged with ``paths`` in order and ``overrides``, validated."""
    cfg = read_yaml(DEFAULT_CONFIG)
    sources = [str(DEFAULT_CONFIG)]
    for p in paths:
        part = read_yaml(Path(p))
        if not isinstance(part, Mapping):
            raise ConfigError(f"{p}: expected a mapping at the top level")
        cfg = deep_merge(cfg, part)
        sources.append(str(p))
    if overrides:
        cfg = deep_merge(cfg, overrides)
        sources.append("overrides")
    validate(cfg, "config", source=" + ".join(sources))
    check_references(cfg)
    return cfg


def check_references(cfg: Mapping[str, Any]) -> None:
    """Cross-references the schema cannot express: names of datasets and backbones."""
    from harness.datasets import FAMILIES

    datasets = cfg["datasets"]
    for key, dcfg in datasets.items():
        if dcfg["family"] not in FAMILIES:
            close = difflib.get_close_matches(dcfg["family"], FAMILIES.names(), n=1)
            raise ConfigError(
                f"config key datasets.{key}.family: unknown dataset family {dcfg['family']!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "") + f"; known: {', '.join(FAMILIES.names())}"
            )
    for mname, m in cfg["methods"].items():
        for key in m.get("datasets", []):
            if key not in datasets:
                raise ConfigError(
                    f"config key methods.{mname}.datasets names unknown dataset {key!r}; "
                    f"defined datasets: {', '.join(datasets)}"
                )
        if "train_dataset" in m and m["train_dataset"] not in datasets:
            raise ConfigError(f"config key methods.{mname}.train_dataset: unknown dataset {m['train_dataset']!r}")
        if "backbone" in m and m["backbone"] not in cfg["backbones"]:
            close = difflib.get_close_matches(m["backbone"], list(cfg["backbones"]), n=1)
            raise ConfigError(
                f"config key methods.{mname}.backbone: unknown backbone {m['backbone']!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; defined: {', '.join(cfg['backbones'])}"
            )
    for label, key in cfg["substitutions"].items():
        if key not in datasets:
            raise ConfigError(f"config key substitutions.{label}: unknown dataset {key!r}")


def section_hash(cfg: Mapping[str, Any], *keys: str) -> str:
    """Short stable hash of config sections (dotted keys), stored in meta.json and used as a
    Snakemake param so that a changed setting re-runs exactly the rules that depend on it."""
    parts = {}
    for key in keys:
        node: Any = cfg
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        parts[key] = node
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def results_root(cfg: Mapping[str, Any]) -> Path:
    return Path(cfg["results_dir"]) / cfg["profile"]


def mirror_dirs(cfg: Mapping[str, Any]) -> list[Path]:
    """Mirror folders: env HARNESS_DATA_MIRROR (os.pathsep-separated) first, then data.mirror."""
    dirs = [Path(p) for p in os.environ.get("HARNESS_DATA_MIRROR", "").split(os.pathsep) if p]
    if cfg["data"].get("mirror"):
        dirs.append(Path(cfg["data"]["mirror"]))
    return dirs


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", nargs="*", default=[], metavar="YAML",
        help="config files merged onto configs/default.yaml in order (e.g. configs/profiles/small.yaml)",
    )


def dump(cfg: Mapping[str, Any], path: Path) -> None:
    from harness.io import atomic_write_text

    atomic_write_text(Path(path), yaml.safe_dump(dict(cfg), sort_keys=False))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness config", description=__doc__)
    add_config_argument(parser)
    parser.add_argument("--write", type=Path, help="write the resolved config here (only if changed)")
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    text = yaml.safe_dump(cfg, sort_keys=False)
    if args.write:
        if not args.write.exists() or args.write.read_text() != text:
            dump(cfg, args.write)
    else:
        print(text, end="")
    return 0
