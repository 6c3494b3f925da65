"""Index and search jobs encode on their method's device (harness.models.runtime.encode_device): a
section with ``device: cuda`` books a GPU for every job of the method, and its index jobs encode the
corpus there (the paper profile's 21M passages); without a GPU they fail naming the setting, or, under
``device_fallback`` (the rehearsal), run on the CPU with the fallback recorded. With a GPU, the
encodings equal the CPU's."""
from __future__ import annotations

import numpy as np
import pytest

from harness import cost
from harness.config import load_config
from harness.datasets import prepare, store
from harness.errors import ConfigError
from harness.methods import dpr, vdr
from harness.methods.base import Context
from harness.models.runtime import encode_device

torch = pytest.importorskip("torch")
TINY = {"epochs": 1, "batch_size": 4, "max_train_questions": 4, "p_max_len": 32, "q_max_len": 16}


@pytest.fixture(scope="module")
def models(tmp_path_factory, smoke_context, train_on_smoke):
    """A DPR and an SVDR model of one optimizer step on the smoke fixture: {method: (context, model)}."""
    out = {}
    for name, settings in (("dpr", TINY), ("svdr", {**TINY, "topk": 32, "retrieval_start": 1.0})):
        root = tmp_path_factory.mktemp(f"encdev-{name}")
        ctx = smoke_context(root, name, settings)
        out[name] = ctx, train_on_smoke(ctx, root)[0]
    return out


def _with_device(cfg, device):
    import copy

    c = copy.deepcopy(cfg)
    for m in ("dpr", "svdr"):
        c["methods"][m]["device"] = device
    return c


def test_encode_device_follows_the_section_and_falls_back_only_where_allowed():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: nothing to fall back from")
    assert encode_device({"device": "cpu"}) == "cpu" and encode_device({}) == "cpu" and encode_device(None) == "cpu"
    assert encode_device({"device": "auto"}) == "cpu"
    cost.allow_fallbacks(False)
    with pytest.raises(ConfigError, match="device_fallback"):
        encode_device({"device": "cuda"})
    cost.allow_fallbacks(True)
    try:
        assert encode_device({"device": "cuda"}) == "cpu"
        assert cost.fallbacks() == ["device cuda -> cpu: torch sees no CUDA device"]
    finally:
        cost.allow_fallbacks(False)


@pytest.mark.parametrize("method", ["dpr", "svdr"])
def test_an_index_job_encodes_on_its_sections_device(models, tmp_path, method):
    """The index job of a ``device: cuda`` section asks for CUDA: on a CPU machine it fails naming the
    setting, and under the rehearsal's fallback it runs here and records the fallback (before this, every
    index job encoded on the CPU whatever the section said, beside the GPU the plan booked for it)."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the job runs there (test_encodings_on_the_gpu_equal_the_cpus)")
    trained_ctx, model = models[method]
    ctx = Context(_with_device(trained_ctx.cfg, "cuda"), method, "smoke")

    def build(folder):
        folder.mkdir()
        if method == "dpr":
            return dpr.build_index(ctx, folder, model)
        return vdr.write_emb_index(ctx, ctx.data_dir(), model, folder)

    cost.allow_fallbacks(False)
    with pytest.raises(ConfigError, match="device: cuda"):
        build(tmp_path / "strict")
    cost.allow_fallbacks(True)
    try:
        info = build(tmp_path / "fallback")
        assert info["documents"] > 0 and cost.fallbacks() == ["device cuda -> cpu: torch sees no CUDA device"]
    finally:
        cost.allow_fallbacks(False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_encodings_on_the_gpu_equal_the_cpus(models):
    ctx, model = models["dpr"]
    docs = list(store.iter_corpus(ctx.data_dir()))[:64]
    titles, texts = [d.title for d in docs], [d.text for d in docs]
    cpu = dpr.BiEncoder.load(ctx, model).encode_passages(titles, texts)
    gpu = dpr.BiEncoder.load(ctx, model, "cuda").encode_passages(titles, texts)
    assert gpu.dtype == np.float32 and np.allclose(cpu, gpu, atol=1e-3)
    cpu_s = vdr.VDRModel.load(models["svdr"][1]).encode_passages(docs)
    gpu_s = vdr.VDRModel.load(models["svdr"][1], device="cuda").encode_passages(docs)
    assert abs(cpu_s - gpu_s).max() < 1e-3


@pytest.mark.parametrize("stage,method,dataset", [("index", "lightretriever", "smoke-ir"),
                                                  ("search", "lightretriever", "smoke-ir"),
                                                  ("index", "densephrases", "smoke"),
                                                  ("search", "densephrases", "smoke")])
def test_lightretrievers_and_densephrases_jobs_ask_for_their_sections_device(tmp_path, stage, method, dataset):
    """LightRetriever's and DensePhrases' index and search jobs load their model on the section's device
    too: with ``device: cuda`` on a machine without one, the job fails naming the setting before it
    loads anything (the model folder here does not exist), instead of encoding on the CPU."""
    import importlib

    from harness import plan as hplan

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the job would run there")
    cfg = load_config([], overrides={"results_dir": str(tmp_path / "results"), "methods": {method: {"device": "cuda"}}})
    ctx = Context(cfg, method, dataset)
    ctx.data_dir().mkdir(parents=True)
    prepare(dataset, cfg["datasets"][dataset], cfg, ctx.data_dir())
    job = hplan.get(cfg).job(stage, method, dataset)
    step = getattr(importlib.import_module(job.module), job.step)
    inputs = {"data": ctx.data_dir(), "model": tmp_path / "no-model", "index": tmp_path / "no-index"}
    (tmp_path / "out").mkdir()
    cost.allow_fallbacks(False)
    with pytest.raises(ConfigError, match="device: cuda"):
        step(ctx, job, inputs, tmp_path / "out")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_lightretriever_and_densephrases_encodings_on_the_gpu_equal_the_cpus(tmp_path):
    """The untrained models of the default profile, saved and loaded on each device: the corpus
    vectors LightRetriever's index job writes, and DensePhrases' question vectors, agree."""
    from harness.methods import densephrases as dp
    from harness.methods import lightretriever as lr
    from harness.methods.lightretriever.index import encode_corpus

    cfg = load_config([])
    texts = ["the cat sat on the mat", "a dense retriever for open-domain questions", "phrases index"]
    s = lr.settings(cfg)
    lr.LightModel.from_backbone(cfg, s).save(tmp_path / "lr")
    dense = {}
    for device in ("cpu", "cuda"):
        model = lr.LightModel.load(tmp_path / "lr", device)
        d, sp, _ = encode_corpus(model, s, texts, sparse=True)
        dense[device] = (d, sp.toarray())
    assert np.allclose(dense["cpu"][0], dense["cuda"][0], atol=1e-3)
    assert np.allclose(dense["cpu"][1], dense["cuda"][1], atol=1e-2)
    s = dp.settings(cfg)
    dp.PhraseModel.from_backbone(cfg, s).save(tmp_path / "dp")
    qs = {d: dp.PhraseModel.load(s, tmp_path / "dp", d).index_queries(texts, 2) for d in ("cpu", "cuda")}
    assert all(np.allclose(a, b, atol=1e-3) for a, b in zip(qs["cpu"], qs["cuda"]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_lightretriever_encodes_under_bf16_autocast_on_the_gpu_close_to_fp32():
    """``encode_precision: bf16`` on CUDA (the paper profile's): the corpus vectors are the fp32 ones
    to bf16's rounding, float32 on the way out."""
    from harness.methods import lightretriever as lr
    from harness.methods.lightretriever.index import encode_corpus
    from harness.models.runtime import encode_autocast

    cfg = load_config([])
    texts = ["the cat sat on the mat", "a dense retriever for open-domain questions", "phrases index"]
    s = lr.settings(cfg)
    model = lr.LightModel.from_backbone(cfg, s)
    model.lm.eval().to("cuda")
    got = {}
    for precision in ("fp32", "bf16"):
        ctx, used = encode_autocast({"encode_precision": precision}, "cuda")
        assert used == precision
        with ctx:
            got[precision] = encode_corpus(model, s, texts, sparse=False)[0]
    a, b = got["fp32"], got["bf16"]
    assert b.dtype == np.float32 and not np.array_equal(a, b)
    assert ((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min() > 0.98
