"""Trained model folders are plain transformers folders: the README's two blocks ("DPR without
Snakemake", "LightRetriever without Snakemake") run on freshly saved tiny models with nothing but
transformers and give the vectors the harness's own encoders give (to 1e-5); every encoder folder a
method saves opens with AutoModel/AutoTokenizer.from_pretrained (DensePhrases' question encoders
included: without tokenizer files AutoTokenizer built a 5-token vocabulary there)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from harness.config import load_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUERY = "Who founded Kanmor Works?"
TITLE, TEXT = "Kanmor Works", "Kanmor Works was founded in 1871."


def readme_block(repo, marker: str, folder) -> dict:
    """Run the README's python block whose first line holds ``marker`` with the model path replaced
    by ``folder``; its variables."""
    text = (repo / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if marker in b.splitlines()[0]]
    assert len(blocks) == 1, f"README.md has {len(blocks)} python blocks marked {marker!r}"
    code = re.sub(r'm = "results/smoke/models/[^"]+"', f"m = {str(folder)!r}", blocks[0])
    assert str(folder) in code, "the block names its model folder as m = \"results/smoke/models/...\""
    env: dict = {}
    exec(compile(code, f"README.md ({marker})", "exec"), env)  # noqa: S102 (the README's own code)
    return env


def as_np(t) -> np.ndarray:
    return t.detach().float().numpy()


# ---- DPR ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dpr_model(tmp_path_factory):
    """A DPR model trained for two steps on the smoke fixture (its two encoders then differ)."""
    from harness.datasets import prepare
    from harness.io import write_jsonl
    from harness.methods import dpr
    from harness.methods.base import Context

    root = tmp_path_factory.mktemp("dpr-interop")
    cfg = load_config([], overrides={"results_dir": str(root / "results"), "methods": {"dpr": {
        "epochs": 1, "batch_size": 8, "max_train_questions": 16, "p_max_len": 128, "lr": 5e-4}}})
    ctx = Context(cfg, "dpr", "smoke")
    ctx.data_dir().mkdir(parents=True)
    prepare("smoke", cfg["datasets"]["smoke"], cfg, ctx.data_dir())
    write_jsonl(root / "negs.jsonl", [])
    dpr.train(ctx, root / "model", root / "negs.jsonl")
    return ctx, root / "model"


def test_dpr_readme_block_gives_the_harness_vectors(dpr_model, repo):
    from harness.methods import dpr

    ctx, folder = dpr_model
    ours = dpr.BiEncoder.load(ctx, folder)
    q_h, p_h = ours.encode_questions([QUERY]), ours.encode_passages([TITLE], [TEXT])
    env = readme_block(repo, "DPR without Snakemake", folder)
    np.testing.assert_allclose(as_np(env["q"]), q_h, atol=1e-5, rtol=0)
    np.testing.assert_allclose(as_np(env["p"]), p_h, atol=1e-5, rtol=0)
    # trained: the question and passage encoders differ, so opening the wrong folder would show
    assert not np.allclose(ours.encode_passages([""], [QUERY]), q_h, atol=1e-3)


def test_dpr_encoder_folders_open_with_from_pretrained_and_subfolder(dpr_model):
    from transformers import AutoModel, AutoTokenizer

    _, folder = dpr_model
    for sub in ("question_encoder", "passage_encoder"):
        model, info = AutoModel.from_pretrained(folder, subfolder=sub, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], sub
        assert AutoTokenizer.from_pretrained(folder, subfolder=sub).vocab_size == model.config.vocab_size


# ---- LightRetriever -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def light_model(tmp_path_factory):
    """A LightRetriever model from the smoke backbone with its weights moved off the backbone's
    (seeded noise: a stand-in for training), saved as the train job saves it."""
    import torch

    from harness.methods import lightretriever as lr

    cfg = load_config()
    m = lr.LightModel.from_backbone(cfg, lr.settings(cfg))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.lm.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=gen))
    folder = tmp_path_factory.mktemp("lightretriever-interop") / "model"
    folder.mkdir()
    m.save(folder)
    return cfg, folder


def test_lightretriever_readme_block_gives_the_harness_vectors(light_model, repo):
    import torch

    from harness.methods import lightretriever as lr
    from harness.methods.lightretriever.index import encode_corpus
    from harness.methods.lightretriever.model import doc_text
    from harness.methods.lightretriever.ops import query_vector
    from harness.recording import merged
    from harness.datasets import Doc

    cfg, folder = light_model
    s = lr.settings(cfg)
    model = lr.LightModel.load(folder)
    assert model.s["dense_query"] == "light" and model.s["dense_doc"] == "full"
    instr = cfg["methods"]["lightretriever"]["instructions"]["smoke"]
    # the query as the search stage encodes it: the cached vectors of its tokens, their mean, normalised
    rows = model.ids([QUERY], int(s["q_max_len"]))
    uniq = sorted({t for r in rows for t in r})
    table = model.cache_table(instr, tokens=uniq)
    local = {t: i for i, t in enumerate(uniq)}
    with torch.inference_mode():
        q_h = torch.nn.functional.normalize(query_vector(table, [[local[t] for t in r] for r in rows]).float(), dim=-1)
    # the passage as the index job encodes it (full-size encoder, EOS pooling)
    p_h, _, _ = encode_corpus(model, merged(s, {"p_max_len": 128}), [doc_text(Doc("d", TITLE, TEXT))], sparse=False)
    env = readme_block(repo, "LightRetriever without Snakemake", folder)
    np.testing.assert_allclose(as_np(env["q"]), as_np(q_h), atol=1e-5, rtol=0)
    np.testing.assert_allclose(as_np(env["p"]), p_h, atol=1e-5, rtol=0)


def test_lightretriever_lm_folder_keeps_its_mlm_head(light_model):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    _, folder = light_model
    mlm, info = AutoModelForMaskedLM.from_pretrained(folder, subfolder="lm", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert AutoTokenizer.from_pretrained(folder, subfolder="lm").vocab_size == mlm.config.vocab_size


# ---- DensePhrases ---------------------------------------------------------------------------------


def test_densephrases_every_encoder_folder_has_its_tokenizer(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    from harness.methods.densephrases.model import PhraseModel
    from harness.methods.densephrases.settings import ENCODERS, settings

    cfg = load_config()
    s = settings(cfg)
    assert not s["shared_encoder"]
    m = PhraseModel.from_backbone(cfg, s)
    m.save(tmp_path)
    for sub in ENCODERS:
        model = AutoModel.from_pretrained(tmp_path, subfolder=sub)
        tok = AutoTokenizer.from_pretrained(tmp_path, subfolder=sub)
        assert tok.vocab_size == model.config.vocab_size, sub
        assert tok(QUERY)["input_ids"] == m.tok(QUERY)["input_ids"], sub
