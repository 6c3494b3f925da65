"""What every method step receives: the config, the method's section, the dataset folder."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import results_root
from harness.errors import ConfigError


def section(cfg: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The config section of a method (``methods.<name>``) or of a step (top-level ``<name>``,
    e.g. the reader); None if the config has neither."""
    methods = cfg["methods"]
    present = dict.__contains__(methods, name) if isinstance(methods, dict) else name in methods  # not a read
    return methods[name] if present else cfg.get(name)


@dataclass(frozen=True)
class Context:
    cfg: Mapping[str, Any]
    method: str
    dataset: str | None = None

    @property
    def mcfg(self) -> Mapping[str, Any]:
        found = section(self.cfg, self.method)
        if found is None:
            raise ConfigError(f"config has no methods.{self.method} section")
        return found

    @property
    def root(self) -> Path:
        return results_root(self.cfg)

    def data_dir(self, key: str | None = None) -> Path:
        key = key or self.dataset
        if key not in self.cfg["datasets"]:
            raise ConfigError(f"unknown dataset {key!r}; config key datasets defines: {', '.join(self.cfg['datasets'])}")
        return self.root / "data" / key


#: settings of a method section (or a step's) that say how a job runs, not what it computes: no
#: hash covers them (a different machine may need other values for the same artifact)
RUNTIME_KEYS = ("enabled", "device", "torch_threads", "threads", "encode_batch_size", "log_every")

#: keys of a method section that never change a trained model: the runtime ones and what it is
#: evaluated on, searched with, and varied by
NOT_TRAINING = (*RUNTIME_KEYS, "datasets", "variants", "index")


def runtime_key(dotted: str) -> bool:
    """Whether a dotted config key is a runtime setting of a method or step section."""
    parts = dotted.split(".")
    if parts[0] == "methods":
        return len(parts) >= 3 and parts[2] in RUNTIME_KEYS
    return len(parts) >= 2 and parts[1] in RUNTIME_KEYS


def model_fields(module_file: str | Path, schema_file: str, exclude: tuple[str, ...]) -> tuple[str, ...]:
    """The fields of a method's section that change its trained model: every property of its schema
    fragment but :data:`NOT_TRAINING` and ``exclude`` (the method's NOT_MODEL). The same rule as
    :func:`training_keys`, so that a variant is found equal to another model (and reuses it) exactly
    when the two train jobs' hashes would agree; a hand-written list drifted (grad_accum, grad_clip
    and precision were hashed but missing from it, so a variant at another precision reused the main model)."""
    from harness.io import read_yaml

    props = read_yaml(Path(module_file).parent / schema_file).get("properties", {})
    skip = set(NOT_TRAINING) | set(exclude)
    return tuple(sorted(k for k in props if k not in skip))


def section_keys(cfg: Mapping[str, Any], name: str, exclude: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Dotted keys of ``methods.<name>`` minus ``NOT_TRAINING`` and ``exclude`` (what a model's hash covers)."""
    skip = set(NOT_TRAINING) | set(exclude)
    return tuple(f"methods.{name}.{k}" for k in sorted(cfg["methods"][name]) if k not in skip)


def training_keys(cfg: Mapping[str, Any], name: str, exclude: tuple[str, ...] = ()) -> tuple[str, ...]:
    """A model's hash: its section's training keys, the seed, and the backbone's definition."""
    backbone = cfg["methods"][name].get("backbone")
    return (*section_keys(cfg, name, exclude), "seed", *((f"backbones.{backbone}",) if backbone else ()))


def wants_gpu(cfg: Mapping[str, Any], name: str) -> bool:
    """A job of method ``name`` asks a cluster for a GPU when its section says ``device: cuda``."""
    return (section(cfg, name) or {}).get("device", "cpu") == "cuda"
