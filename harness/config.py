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
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from harness import REPO
from harness.errors import ConfigError
from harness.io import read_yaml  # noqa: F401 (re-exported: callers read YAML through config)
from harness.settings import (  # noqa: F401 (re-exported: the config's plain pieces, harness/settings.py)
    DEFAULT_CONFIG,
    SCHEMA_DIR,
    _owners,
    deep_merge,
    fragment_defaults,
    lookup_key,
    mirror_dirs,
    read_schema,
    results_root,
    section_hash,
)
from harness.settings import validate as _validate


def load_schema(name: str) -> dict[str, Any]:
    """workflow/schemas/<name>.schema.yaml; the config schema gets every registered method's
    fragment under ``methods`` and each step's (the reader) at the top level (cached per set of
    registered methods, so a plugin registered later is seen)."""
    from harness.methods import METHODS, STEPS

    return _load_schema(name, tuple(METHODS.items()), tuple(STEPS.items()))


@cache
def _load_schema(name: str, methods: tuple[tuple[str, str], ...], steps: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    schema = read_schema(name)
    if name == "config":
        from harness.methods import METHODS, STEPS, schema_fragment, step_schema

        for m in METHODS:
            schema["properties"]["methods"]["properties"][m] = _graft(schema, f"methods.{m}", schema_fragment(m))
        for step in STEPS:
            schema["properties"][step] = _graft(schema, step, step_schema(step))
    return schema


load_schema.cache_clear = _load_schema.cache_clear  # type: ignore[attr-defined]


def _graft(root: dict[str, Any], prefix: str, fragment: dict[str, Any]) -> dict[str, Any]:
    """A fragment's own ``$defs`` moved into the root's under ``<prefix>.<name>``, refs rewritten."""
    defs = fragment.pop("$defs", {}) or {}

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (f"#/$defs/{prefix}.{v.rsplit('/', 1)[1]}" if k == "$ref" and str(v).startswith("#/$defs/")
                        and v.rsplit("/", 1)[1] in defs else fix(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [fix(x) for x in node]
        return node

    for name, d in defs.items():
        root.setdefault("$defs", {})[f"{prefix}.{name}"] = fix(d)
    return fix(fragment)


def validate(data: Any, schema_name: str = "config", source: str = "config") -> None:
    """Validate ``data`` against workflow/schemas/<schema_name>.schema.yaml, the config's with every
    registered method's and step's fragment grafted in (:func:`harness.settings.validate`)."""
    _validate(data, schema_name, source, schema=load_schema(schema_name))


# ----------------------------------------------------------------------------- dotted overrides
# A schema node is walked with its "bases": the schemas its local $refs may point into, innermost
# first (a method's fragment may carry its own $defs), the root schema last.
Bases = tuple[Mapping[str, Any], ...]


def _resolve(node: Any, bases: Bases) -> tuple[Any, Bases]:
    """Follow ``$ref`` ("#/$defs/name") to the schema it names; {} (anything) if it names nothing."""
    seen = 0
    while isinstance(node, Mapping) and "$ref" in node and seen < 32:
        seen += 1
        for base in bases:
            target: Any = base
            try:
                for part in node["$ref"].removeprefix("#/").split("/"):
                    target = target[part]
            except (KeyError, TypeError):
                continue
            node = target
            break
        else:
            return {}, bases
    if isinstance(node, Mapping) and "$defs" in node:
        bases = (node, *bases)
    return node, bases


def _child_schema(node: Any, key: str, bases: Bases) -> tuple[Any, Bases] | None:
    """The schema of ``key`` inside object schema ``node``; None when the schema forbids the key."""
    node, bases = _resolve(node, bases)
    if not isinstance(node, Mapping):
        return {}, bases
    if key in node.get("properties", {}):
        return _resolve(node["properties"][key], bases)
    extra = node.get("additionalProperties", True)
    if extra is False:
        return None
    return ({}, bases) if extra is True else _resolve(extra, bases)


def _typed_scalar(value: str, types: set[str]) -> Any:
    """``value`` read as the number, boolean or null the schema wants (YAML 1.1: ``3``, ``true``,
    ``null``; also ``1e-4``, which YAML 1.1 leaves a string); the string itself otherwise."""
    import math

    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = value
    if isinstance(parsed, bool):
        return parsed if "boolean" in types else value
    if parsed is None:
        return None if "null" in types else value
    if isinstance(parsed, int) and types & {"integer", "number"}:
        return parsed
    if types & {"integer", "number"}:
        try:
            number = float(value)
        except ValueError:
            return value
        if math.isfinite(number) and "number" in types:
            return number
        if math.isfinite(number) and number.is_integer():
            return int(number)
    return value


def _coerce(node: Any, schema: Any, bases: Bases) -> Any:
    """Type the string scalars of ``node`` where the schema wants a number, boolean or null."""
    schema, bases = _resolve(schema, bases)
    if not isinstance(schema, Mapping):
        return node
    if isinstance(node, dict):
        for key, value in node.items():
            child = _child_schema(schema, key, bases)
            if child is not None:
                node[key] = _coerce(value, *child)
        return node
    if isinstance(node, list):
        items = schema.get("items")
        return [_coerce(v, items, bases) for v in node] if isinstance(items, Mapping) else node
    t = schema.get("type")
    types = {t} if isinstance(t, str) else set(t or ())
    if isinstance(node, str) and types and "string" not in types:
        return _typed_scalar(node, types)
    return node


def expand_dotted(cfg: dict[str, Any], *, source: str = "config") -> None:
    """Move every top-level dotted key (``methods.dpr.epochs: 3``) to its nested place, in place.

    Overrides come flat, one ``KEY=VALUE`` each (``python -m harness config --set``, a
    ``load_config`` override, a dotted key in a YAML file); a dotted key wins over the nested
    value it replaces. A path the schema does not allow fails here, naming the dotted key as typed
    and the closest allowed one. Then string scalars are typed where the schema wants a number,
    boolean or null: Snakemake's ``--config 'methods={dpr: {epochs: 3}}'`` hands nested values
    over as strings (and ``true`` at the top level too), and YAML 1.1 reads ``1e-4`` as a string.
    """
    root: Bases = (load_schema("config"),)
    for dotted in [k for k in cfg if isinstance(k, str) and "." in k]:
        parts = dotted.split(".")
        if not all(parts):
            raise ConfigError(f"{source}: config key {dotted!r} has an empty part",
                              fix="write the path as section.subsection.key, e.g. methods.dpr.epochs")
        schema: tuple[Any, Bases] = (root[0], root)
        node: dict[str, Any] = cfg
        for i, part in enumerate(parts):
            child = _child_schema(schema[0], part, schema[1])
            if child is None:
                parent = _resolve(*schema)[0]
                allowed = sorted(parent.get("properties", {}))
                close = difflib.get_close_matches(part, allowed, n=1)
                hint = f" (did you mean {'.'.join([*parts[:i], close[0], *parts[i + 1:]])!r}?)" if close else ""
                owners = _owners(root[0], part) if parts[0] == "methods" and i == 2 else []
                hint += f" ({part!r} is a key of {', '.join(owners)})" if owners else ""
                raise ConfigError(f"{source}: unknown config key {dotted!r}{hint}: {'.'.join(parts[:i]) or '<top>'} "
                                  f"has no key {part!r}; allowed keys: {', '.join(allowed) or '(none)'}")
            schema = child
            if i == len(parts) - 1:  # a mapping merges into the section it names, as --config does
                value = cfg[dotted]
                both = isinstance(value, Mapping) and isinstance(node.get(part), Mapping)
                node[part] = deep_merge(node[part], value) if both else copy.deepcopy(value)
                break
            resolved = _resolve(*schema)[0]
            kind = resolved.get("type", "object") if isinstance(resolved, Mapping) else "object"
            if "object" not in ([kind] if isinstance(kind, str) else kind):
                raise ConfigError(f"{source}: unknown config key {dotted!r}: {'.'.join(parts[:i + 1])} is a setting "
                                  f"of type {kind}, not a section", fix=f"set {'.'.join(parts[:i + 1])} itself")
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                raise ConfigError(f"{source}: config key {dotted!r}: {'.'.join(parts[:i + 1])} holds a "
                                  f"{type(node[part]).__name__}, not a mapping")
            node = node[part]
        del cfg[dotted]
    _coerce(cfg, root[0], root)


def load_config(paths: Iterable[Path | str] = (), overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """configs/default.yaml merged with ``paths`` in order and ``overrides``, validated."""
    cfg = read_yaml(DEFAULT_CONFIG)
    sources = [str(DEFAULT_CONFIG)]
    for p in paths:
        part = read_yaml(Path(p))
        if not isinstance(part, Mapping):
            raise ConfigError(f"{p}: expected a mapping at the top level")
        part = dict(part)
        expand_dotted(part, source=str(p))
        cfg = deep_merge(cfg, part)
        sources.append(str(p))
    if overrides:
        over = copy.deepcopy(dict(overrides))  # dotted keys (methods.dpr.epochs) go to their nested place
        expand_dotted(over, source="overrides")
        cfg = deep_merge(cfg, over)
        sources.append("overrides")
    paths = [Path(p) for p in paths]
    if len(paths) == 1 and not overrides and _stamp_matches(cfg, paths[0]):
        return cfg  # the resolved config a workflow run validated already (mark_validated)
    validate(cfg, "config", source=" + ".join(sources))
    check_references(cfg)
    return cfg


def _stamp(cfg: Mapping[str, Any]) -> str:
    """Digest of a merged config and of every schema that judges it (the workflow's, the methods'
    fragments, the plugins named in HARNESS_PLUGINS)."""
    h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    fragments = {f for pattern in ("*.schema.yaml", "schema.yaml") for f in REPO.joinpath("harness").rglob(pattern)}
    for f in sorted([SCHEMA_DIR / "config.schema.yaml", *fragments]):  # a method package's is schema.yaml
        h.update(f.read_bytes())
    h.update(os.environ.get("HARNESS_PLUGINS", "").encode())
    return h.hexdigest()


def mark_validated(cfg: Mapping[str, Any], path: Path) -> None:
    """Note beside the resolved config file (results/<profile>/config.yaml) that it passed
    validation, so that each job's `python -m harness ... --config <it>` need not validate it again
    (about 1 s a job: the schema, the faiss spec checks). Any change to the file, to
    configs/default.yaml or to a schema changes the digest, and the config is validated again."""
    from harness.io import atomic_write_text

    merged = deep_merge(read_yaml(DEFAULT_CONFIG), read_yaml(Path(path)))
    atomic_write_text(Path(f"{path}.validated"), _stamp(merged) + "\n")


def _stamp_matches(cfg: Mapping[str, Any], path: Path) -> bool:
    stamp = Path(f"{path}.validated")
    try:
        return stamp.read_text(encoding="utf-8").strip() == _stamp(cfg)
    except OSError:
        return False


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
    check_index_specs(cfg)
    check_names(cfg)
    # a label set to null withdraws what an earlier config file gave it (the files merge key by key, so a
    # profile cannot delete a key): the paper profile drops the smoke fixture's stand-ins for SQuAD and BEIR
    unavailable = {label for label, why in (cfg["tables"].get("unavailable") or {}).items() if why is not None}
    for label, key in cfg["substitutions"].items():
        if key is None:
            continue
        where = f"substitutions.{label}" + (".mean_of" if isinstance(key, Mapping) else "")
        for k in key["mean_of"] if isinstance(key, Mapping) else [key]:
            if k not in datasets:
                raise ConfigError(f"config key {where}: unknown dataset {k!r}",
                                  fix=f"name one of datasets: {', '.join(sorted(datasets))}")
        if label in unavailable:
            raise ConfigError(f"config key substitutions.{label} gives {label} the stand-in {key!r}, and "
                              f"tables.unavailable.{label} says this profile has none",
                              fix=f"set substitutions.{label}: null to drop a stand-in an earlier config file "
                                  f"gave it, or tables.unavailable.{label}: null")


def check_names(cfg: Mapping[str, Any]) -> None:
    """Names the schema leaves to the registries that define them: each dataset's answer rule
    (harness.datasets.answers.ANSWER_RULES) and each paper of ``paper_settings`` (harness.published.PAPERS)."""
    from harness.datasets.answers import ANSWER_RULES
    from harness.published import PAPERS

    for key, dcfg in cfg["datasets"].items():
        if "answer_rule" in dcfg and dcfg["answer_rule"] not in ANSWER_RULES:
            close = difflib.get_close_matches(str(dcfg["answer_rule"]), ANSWER_RULES.names(), n=1)
            raise ConfigError(f"config key datasets.{key}.answer_rule: unknown answer rule {dcfg['answer_rule']!r}"
                              + (f" (did you mean {close[0]!r}?)" if close else ""),
                              fix=f"use one of: {', '.join(ANSWER_RULES.names())}")
    for paper in cfg.get("paper_settings") or {}:
        if paper not in PAPERS:
            close = difflib.get_close_matches(str(paper), PAPERS, n=1)
            raise ConfigError(f"config key paper_settings.{paper}: unknown paper {paper!r}"
                              + (f" (did you mean {close[0]!r}?)" if close else ""),
                              fix=f"use one of: {', '.join(PAPERS)}")


def check_index_specs(cfg: Mapping[str, Any]) -> None:
    """Every config value whose schema says ``x-index-spec: true`` must name a known index variant
    (``faiss:Flatt`` fails here, before any job, with the closest valid spec)."""
    from harness.indexes import check_spec

    def walk(node: Any, sch: Any, bases: Bases, where: str) -> None:
        sch, bases = _resolve(sch, bases)
        if isinstance(sch, Mapping) and sch.get("x-index-spec") and isinstance(node, str):
            check_spec(node, where=f"config key {where}")
        if isinstance(node, Mapping):
            for k, v in node.items():
                child = _child_schema(sch, k, bases)
                if child is not None:
                    walk(v, *child, f"{where}.{k}" if where else str(k))

    root = load_schema("config")
    walk(cfg, root, (root,), "")


#: the option that names config files: ``--config``, or Snakemake's own ``--configfile`` (so that a
#: command line copied from a Snakemake call works here as it stands)
CONFIG_OPTIONS = ("--config", "--configfile")


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        *CONFIG_OPTIONS, dest="config", nargs="*", default=[], metavar="YAML",
        help="config files merged onto configs/default.yaml in order (e.g. configs/profiles/small.yaml); "
             "--configfile is the same option, as Snakemake spells it",
    )


def names_config(argv: Iterable[str]) -> bool:
    """Whether a command line names config files (either spelling of :data:`CONFIG_OPTIONS`)."""
    return any(a in CONFIG_OPTIONS or a.startswith(tuple(f"{o}=" for o in CONFIG_OPTIONS)) for a in argv)


def dump(cfg: Mapping[str, Any], path: Path) -> None:
    from harness.io import atomic_write_text

    atomic_write_text(Path(path), yaml.safe_dump(dict(cfg), sort_keys=False))


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings -> {dotted key: value}, values read as YAML (``3``, ``true``, ``[a, b]``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not KEY=VALUE", fix="write e.g. --set methods.dpr.epochs=3")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key.strip()] = text
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness config", description=__doc__)
    add_config_argument(parser)
    parser.add_argument("--write", type=Path, help="write the resolved config here (only if changed)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one key, dotted for nested ones (methods.dpr.epochs=3); VALUE is read as YAML")
    args = parser.parse_args(argv)
    cfg = load_config(args.config, parse_overrides(args.set))
    text = yaml.safe_dump(cfg, sort_keys=False)
    if args.write:
        if not args.write.exists() or args.write.read_text() != text:
            dump(cfg, args.write)
    else:
        print(text, end="")
    return 0
