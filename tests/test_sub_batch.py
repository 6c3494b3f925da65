"""GradCache sub-batches for the bi-encoders (``methods.<m>.grad_cache_chunk``, harness.train.sub_batch_step):
the paper's batch in sub-batches gives the one-graph step's loss and gradients (DPR, BPR, VDR/SVDR
trained end to end both ways), under fp16's loss scale too, and the settings it cannot serve are refused."""
from __future__ import annotations

import csv

import pytest

from harness.errors import ConfigError
from harness.train import TrainSettings, rows, sub_batch_step

torch = pytest.importorskip("torch")


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 4)), \
        torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 4))


def _loss(a, b):
    scores = a @ b.T
    return torch.nn.functional.cross_entropy(scores, torch.arange(len(a))), {}


def test_sub_batches_give_the_one_graph_loss_and_gradients_with_one_encoder_per_group():
    qnet, pnet = _net()
    qb = {"x": torch.randn(5, 6)}
    pb = {"x": torch.randn(10, 6)}
    towers = [(lambda b: qnet(b["x"]), qb), (lambda b: pnet(b["x"]), pb)]
    loss, _ = sub_batch_step(towers, _loss, 0)
    assert loss.requires_grad  # one graph: the loop back-propagates it (fp16 scaling, grad_accum)
    loss.backward()
    full = [p.grad.clone() for p in [*qnet.parameters(), *pnet.parameters()]]
    for p in [*qnet.parameters(), *pnet.parameters()]:
        p.grad = None
    cached, _ = sub_batch_step(towers, _loss, 3)  # 2 + 4 sub-batches, the last ones short
    assert not cached.requires_grad and cached.item() == pytest.approx(loss.item(), abs=1e-6)
    for a, p in zip(full, [*qnet.parameters(), *pnet.parameters()]):
        assert torch.allclose(a, p.grad, atol=1e-6) and float(a.abs().sum()) > 0
    # a chunk that holds every group is the one-graph step
    assert sub_batch_step(towers, _loss, 10)[0].requires_grad


def test_rows_are_the_batchs_own_rows_with_its_padding():
    batch = {"input_ids": torch.arange(12).view(4, 3), "attention_mask": torch.ones(4, 3)}
    part = rows(batch, range(1, 3))
    assert part["input_ids"].tolist() == [[3, 4, 5], [6, 7, 8]] and part["attention_mask"].shape == (2, 3)


def test_a_gradcache_step_carries_the_loops_loss_scale_into_every_sub_batch(monkeypatch):
    """fp16: the loop's backward (accelerate's: the loss times the GradScaler's scale) is the one the
    cached step's loss goes through (:func:`harness.train.backward`), so the gradients each sub-batch
    passes on, and so every parameter's, are the scaled ones that the scaler unscales before clipping
    and its step: the one-graph step's under the same scale, and scale x the unscaled step's. Outside
    a training loop the backward is plain."""
    import harness.train as loop

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    qnet, pnet = _net()
    params = [*qnet.parameters(), *pnet.parameters()]
    towers = [(lambda b: qnet(b["x"]), {"x": torch.randn(5, 6)}), (lambda b: pnet(b["x"]), {"x": torch.randn(10, 6)})]

    def grads(chunk, scaled):
        for p in params:
            p.grad = None
        monkeypatch.setattr(loop, "_BACKWARD", [(lambda x: scaler.scale(x).backward()) if scaled else None])
        loss, _ = sub_batch_step(towers, _loss, chunk)
        if loss.requires_grad:  # one graph: the loop back-propagates it through its own backward
            loop.backward(loss)
        return [p.grad.clone() for p in params]

    plain, one_graph, cached = grads(3, False), grads(0, True), grads(3, True)
    for a, b, c in zip(plain, one_graph, cached):
        assert torch.allclose(b, c, rtol=1e-5, atol=1e-4) and torch.allclose(c, a * 2.0 ** 10, rtol=1e-5, atol=1e-4)
    assert any(float(a.abs().max()) > 1e-3 for a in plain)


def test_the_training_loop_lends_its_backward_to_a_step_function(tmp_path):
    """While ``train_loop`` runs a step function, :func:`harness.train.backward` is the loop's
    accelerator's; after it (and outside any loop) it is plain ``loss.backward()``."""
    import harness.train as loop

    lin = torch.nn.Linear(3, 1)
    seen = []

    def step_fn(batch, step, rng):
        seen.append(loop._BACKWARD[0])
        loss = lin(torch.stack([x for x in batch])).pow(2).mean()
        loop.backward(loss)
        return loss.detach(), {}

    loop.train_loop([torch.randn(3) for _ in range(4)], step_fn, list(lin.parameters()),
                    settings=TrainSettings(batch_size=2, epochs=1, log_every=10), seed=0, out=tmp_path)
    assert len(seen) == 2 and all(callable(b) and getattr(b, "__name__", "") == "backward" for b in seen)
    assert loop._BACKWARD[0] is None


def test_settings_a_gradcache_step_cannot_serve_are_refused():
    assert TrainSettings.from_config({"grad_cache_chunk": 8, "precision": "fp16"}).grad_cache_chunk == 8  # scaled: above
    with pytest.raises(ConfigError, match="grad_accum"):
        TrainSettings.from_config({"grad_cache_chunk": 8, "grad_accum": 2})
    with pytest.raises(ConfigError, match="grad_cache_chunk"):
        TrainSettings.from_config({"grad_cache_chunk": -1})
    assert TrainSettings.from_config({"grad_cache_chunk": 8, "precision": "bf16"}).grad_cache_chunk == 8


@pytest.fixture
def no_dropout(monkeypatch):
    """Every module stays in eval mode: without dropout, the one-graph step and GradCache's
    sub-batches see the same network (GradCache replays its own masks, not the one graph's)."""
    orig = torch.nn.Module.train
    monkeypatch.setattr(torch.nn.Module, "train", lambda self, mode=True: orig(self, False))


def _losses(folder):
    with open(folder / "loss.tsv", encoding="utf-8") as fh:
        return [float(r["loss"]) for r in csv.DictReader(fh, delimiter="\t")]


@pytest.mark.parametrize("method", ["dpr", "bpr", "svdr"])
def test_a_method_trained_in_sub_batches_trains_as_in_one_graph(method, tmp_path, no_dropout, smoke_context,
                                                                  train_on_smoke):
    """The method's own train job, 2 optimizer steps at batch 8 (16 passages), once in one graph and
    once in sub-batches of 3: the first step's loss agrees (the same weights, batch and loss: the
    wiring of groups and loss), the second's too (the update came from the same gradients), and the
    trained passage encoders agree."""
    tiny = {"epochs": 1, "batch_size": 8, "max_train_questions": 16, "p_max_len": 48, "q_max_len": 16, "lr": 5e-4,
            "log_every": 1}
    if method == "svdr":
        tiny.update(topk=64, retrieval_start=0.5)  # the second step's negative from the token index
    out = {}
    for chunk in (0, 3):
        root = tmp_path / f"c{chunk}"
        ctx = smoke_context(root, method, {**tiny, "grad_cache_chunk": chunk})
        model, info = train_on_smoke(ctx, root)
        assert info["steps"] == 2
        out[chunk] = model
    one, cached = _losses(out[0]), _losses(out[3])
    assert cached[0] == pytest.approx(one[0], rel=1e-5)
    assert cached[1] == pytest.approx(one[1], rel=1e-3)
    from safetensors.torch import load_file

    files = sorted(out[0].rglob("*.safetensors"))
    assert files, f"no saved weights under {out[0]}"
    for f in files:  # Adam's first steps move a weight by up to lr (5e-4) whatever its gradient's size, so a
        # near-zero gradient that differs in its rounding may move one weight apart (7.8e-5 seen); on average
        # they agree to 1e-9
        a, b = load_file(f), load_file(out[3] / f.relative_to(out[0]))
        diff = torch.cat([(a[k] - b[k]).abs().flatten() for k in a])
        assert float(diff.mean()) < 1e-7 and float(diff.max()) < 5e-4, (f.relative_to(out[0]), diff.mean(), diff.max())
