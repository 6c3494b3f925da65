"""What every method step receives: the config, the method's section, the dataset folder."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import results_root, section_hash
from harness.errors import ConfigError


@dataclass(frozen=True)
class Context:
    cfg: Mapping[str, Any]
    method: str
    dataset: str | None = None

    @property
    def mcfg(self) -> Mapping[str, Any]:
        try:
            return self.cfg["methods"][self.method]
        except KeyError:
            raise ConfigError(f"config has no methods.{self.method} section") from None

    @property
    def root(self) -> Path:
        return results_root(self.cfg)

    def data_dir(self, key: str | None = None) -> Path:
        key = key or self.dataset
        if key not in self.cfg["datasets"]:
            raise ConfigError(f"unknown dataset {key!r}; config key datasets defines: {', '.join(self.cfg['datasets'])}")
        return self.root / "data" / key

    def model_dir(self) -> Path:
        return self.root / "models" / self.method

    def config_hash(self) -> str:
        return section_hash(self.cfg, f"methods.{self.method}", "seed")
