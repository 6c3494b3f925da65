"""harness/train.py, the one training loop: batching, seeding, subsampling, schedule, clipping,
gradient accumulation, loss log, checkpoints; and DPR's port, step for step equal to the old loop."""
from __future__ import annotations

import inspect
import math
import random

import pytest

from harness.errors import ConfigError
from harness.train import LOSS_LOG, TrainSettings, lr_lambda, set_seed, subsample, total_steps, train_loop

torch = pytest.importorskip("torch")


def _data(n: int = 24, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1
    return [(x[i], y[i]) for i in range(n)]


def _step(model, seen: list | None = None):
    def step_fn(batch, step, rng):
        if seen is not None:
            seen.append((step, [id(b) for b in batch], rng))
        x = torch.stack([b[0] for b in batch])
        y = torch.stack([b[1] for b in batch])
        err = model(x).squeeze(-1) - y
        return (err ** 2).mean(), {"mae": float(err.abs().mean().detach())}
    return step_fn


def _run(out, data, seed: int = 3, dropout: float = 0.0, **kw):
    set_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Dropout(dropout), torch.nn.Linear(8, 1))
    settings = TrainSettings(**{"epochs": 2, "batch_size": 8, "lr": 1e-2, "warmup_ratio": 0.25, **kw})
    info = train_loop(data, _step(model), model.parameters(), settings=settings, seed=seed, out=out,
                      modules=[model])
    return info, [p.detach().clone() for p in model.parameters()]


def test_seeded_runs_repeat_exactly(tmp_path):
    data = _data()
    a, pa = _run(tmp_path / "a", data, dropout=0.3)
    b, pb = _run(tmp_path / "b", data, dropout=0.3)
    assert a["losses"] == b["losses"] and len(a["losses"]) == a["steps"] == 6
    assert all(torch.equal(x, y) for x, y in zip(pa, pb))
    c, _ = _run(tmp_path / "c", data, seed=4, dropout=0.3)
    assert c["losses"] != a["losses"]
    assert a["loss_first"] == a["losses"][:5] and a["loss_last"] == a["losses"][-5:]
    assert a["mae_first"] and len(a["mae_last"]) == 5


def test_batching_shuffles_with_one_rng_and_skips_single_example_batches(tmp_path):
    data = _data(9)
    seen: list = []
    rng = random.Random(11)
    model = torch.nn.Linear(3, 1)
    info = train_loop(data, _step(model, seen), model.parameters(), seed=11, out=None, rng=rng,
                      settings=TrainSettings(epochs=2, batch_size=4))
    # reference: per epoch shuffle 0..n-1 with the same rng, consecutive batches, drop those < 2, stop at total
    ref_rng, want = random.Random(11), []
    total = total_steps(9, 4, 2)
    assert total == 6 and info["steps"] == total
    while len(want) < total:
        order = list(range(9))
        ref_rng.shuffle(order)
        want += [order[i:i + 4] for i in range(0, 9, 4) if len(order[i:i + 4]) >= 2][:total - len(want)]
    assert [ids for _, ids, _ in seen] == [[id(data[j]) for j in b] for b in want]
    assert [s for s, _, _ in seen] == list(range(total))
    assert all(r is rng for _, _, r in seen)  # the method draws its random negatives from the loop's rng
    # the reader's rule: a group of one question is a step
    seen.clear()
    train_loop(data, _step(model, seen), model.parameters(), seed=11, out=None,
               settings=TrainSettings(epochs=1, batch_size=4, min_batch=1))
    assert sorted(len(ids) for _, ids, _ in seen) == [1, 4, 4]


def test_grad_accum_equals_one_step_of_the_full_batch(tmp_path):
    data = _data(24)
    full, p_full = _run(tmp_path / "full", data, epochs=1, batch_size=8)
    half, p_half = _run(tmp_path / "half", data, epochs=1, batch_size=4, grad_accum=2)
    assert full["steps"] == half["steps"] == 3
    assert half["losses"] == pytest.approx(full["losses"], rel=1e-5)
    for a, b in zip(p_full, p_half):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    lines = (tmp_path / "half" / LOSS_LOG).read_text().splitlines()
    assert len(lines) == 1 + 3


def test_clipping_bounds_the_gradient_norm(tmp_path):
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    norms: list[float] = []

    def hook(opt, args, kwargs):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))

    data = [(x * 1000, y * 1000) for x, y in _data()]
    handle = register_optimizer_step_pre_hook(hook)
    try:
        _run(tmp_path / "c", data, grad_clip=0.5)
        clipped, norms[:] = list(norms), []
        _run(tmp_path / "u", data, grad_clip=None)
    finally:
        handle.remove()
    assert len(clipped) == 6 and max(clipped) <= 0.5 * (1 + 1e-5)
    assert max(norms) > 10


def test_schedule_and_loss_log(tmp_path):
    info, _ = _run(tmp_path, _data(), epochs=3, batch_size=6, warmup_ratio=0.2, lr=0.1)
    total = total_steps(24, 6, 3)
    assert total == info["steps"] == 12
    warm = int(total * 0.2)

    def old(s):  # the factor every method used before the loop was shared
        return (s + 1) / max(1, warm) if s < warm else max(0.0, (total - s) / max(1, total - warm))

    f = lr_lambda(total, 0.2)
    assert [f(s) for s in range(total + 1)] == [old(s) for s in range(total + 1)]
    rows = [line.split("\t") for line in (tmp_path / LOSS_LOG).read_text().splitlines()]
    assert rows[0] == ["step", "loss", "mae", "lr", "seconds"]
    assert [int(r[0]) for r in rows[1:]] == list(range(1, total + 1))
    assert [float(r[1]) for r in rows[1:]] == info["losses"]
    assert [float(r[3]) for r in rows[1:]] == pytest.approx([0.1 * old(s) for s in range(total)], rel=1e-12)


def test_checkpoints_and_final_save(tmp_path, capsys):
    saved = []
    set_seed(0)
    model = torch.nn.Linear(3, 1)
    info = train_loop(_data(), _step(model), model.parameters(), seed=0, out=tmp_path, save=saved.append,
                      settings=TrainSettings(epochs=2, batch_size=8, save_every=2, log_every=4))
    assert info["steps"] == 6
    assert saved == [tmp_path / "checkpoints" / "step-2", tmp_path / "checkpoints" / "step-4", tmp_path]
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in printed] == ["4/6", "6/6"]
    assert " loss " in printed[0] and "(mae " in printed[0]


def test_subsample_is_one_seeded_rule():
    items = list(range(100, 150))
    got = subsample(items, 10, 13)
    assert got == [items[i] for i in sorted(random.Random(13).sample(range(50), 10))]
    assert got == subsample(items, 10, 13) and got != subsample(items, 10, 14)
    assert got == sorted(got)  # original order kept
    assert subsample(items, None, 13) == items and subsample(items, 0, 13) == items
    assert subsample(items, 50, 13) == items and subsample(items, 80, 13) == items


def test_every_trained_method_uses_the_shared_loop_and_subsample():
    import importlib

    for name in ("dpr", "bpr", "vdr"):
        src = inspect.getsource(importlib.import_module(f"harness.methods.{name}").train)
        assert "train_loop(" in src and "subsample(" in src and ".sample(" not in src, name
    for path in ("harness.methods.reader", "harness.methods.reader"):
        try:
            mod = importlib.import_module(path)
        except ImportError:
            continue
        assert "train_loop(" in inspect.getsource(mod.train)
        assert "subsample(" in inspect.getsource(mod.training_instances)


def test_settings_from_config_and_checks(tmp_path):
    ts = TrainSettings.from_config({"epochs": 3, "lr": 1e-3, "grad_accum": 2, "precision": "bf16", "backbone": "x",
                                    "min_batch": 7}, log_every=20)
    assert (ts.epochs, ts.lr, ts.grad_accum, ts.precision, ts.log_every, ts.min_batch) == (3, 1e-3, 2, "bf16", 20, 2)
    assert (ts.device, ts.grad_clip, ts.batch_size) == ("cpu", 2.0, 16)
    assert TrainSettings.from_config({"log_every": 5}, log_every=20).log_every == 5
    with pytest.raises(ConfigError, match="precision"):
        TrainSettings.from_config({"precision": "fp8"})
    with pytest.raises(ConfigError, match="device"):
        TrainSettings.from_config({"device": "tpu"})
    model = torch.nn.Linear(3, 1)
    with pytest.raises(ConfigError, match="fp16"):
        train_loop(_data(), _step(model), model.parameters(), seed=0, out=None,
                   settings=TrainSettings(precision="fp16", batch_size=8))
    info = train_loop(_data(), _step(model), model.parameters(), seed=0, out=None,  # bf16 autocast on the CPU
                      settings=TrainSettings(precision="bf16", batch_size=8))
    assert info["steps"] == 3 and all(math.isfinite(x) for x in info["losses"])


# --------------------------------------------------------------------------------------------
# DPR's port against the loop it replaced


def _old_dpr_train(ctx, negatives_file):
    """The DPR training loop before harness/train.py (git 901deaa), trimmed to its losses."""
    from harness.datasets import store
    from harness.methods import dpr
    from harness.methods.base import Context

    torch_ = dpr._torch(ctx)
    m, seed = ctx.mcfg, ctx.cfg["seed"]
    random.seed(seed)
    torch_.manual_seed(seed)
    tctx = Context(ctx.cfg, ctx.method, m["train_dataset"])
    examples = dpr.training_examples(tctx, negatives_file)
    docs = {d.id: d for d in store.iter_corpus(tctx.data_dir())}
    model = dpr.BiEncoder.from_backbone(ctx)
    params = list({id(p): p for p in list(model.q.parameters()) + list(model.p.parameters())}.values())
    opt = torch_.optim.AdamW(params, lr=m["lr"], weight_decay=m.get("weight_decay", 0.0))
    bs = m["batch_size"]
    total = max(1, round(math.ceil(len(examples) / bs) * m["epochs"]))
    warm = int(total * m.get("warmup_ratio", 0.1))
    sched = torch_.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(1, warm) if s < warm else max(0.0, (total - s) / max(1, total - warm)))
    rng, losses, step = random.Random(seed), [], 0
    model.q.train()
    model.p.train()
    while step < total:
        order = list(range(len(examples)))
        rng.shuffle(order)
        for i in range(0, len(order), bs):
            if step >= total:
                break
            batch = [examples[j] for j in order[i:i + bs]]
            if len(batch) < 2:
                continue
            pids = [q.gold[0] for q, _ in batch]
            for q, negs in batch:
                pids += ([d for d in negs if d not in pids] or [rng.choice(list(docs))])[:1]
            qb = model._batch_q([q.text for q, _ in batch])
            pb = model._batch_p([docs[p].title for p in pids], [docs[p].text for p in pids])
            loss = torch_.nn.functional.cross_entropy(model.embed_q(qb) @ model.embed_p(pb).T,
                                                      torch_.arange(len(batch)))
            loss.backward()
            torch_.nn.utils.clip_grad_norm_(params, 2.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(loss.item())
            step += 1
    return losses


def test_dpr_port_gives_the_old_loops_losses_exactly(tmp_path, monkeypatch):
    from harness import numerics
    from harness.config import load_config
    from harness.datasets import prepare, store
    from harness.io import write_jsonl
    from harness.methods import dpr
    from harness.methods.base import Context

    # 187 questions in batches of 62: per epoch 62, 62, 62 and a skipped single; 4 steps cross an epoch
    cfg = load_config([], overrides={"results_dir": str(tmp_path / "results"), "methods": {"dpr": {
        "epochs": 1, "batch_size": 62, "q_max_len": 16, "p_max_len": 32, "lr": 5e-4, "warmup_ratio": 0.5}}})
    ctx = Context(cfg, "dpr", "smoke")
    ctx.data_dir().mkdir(parents=True)
    prepare("smoke", cfg["datasets"]["smoke"], cfg, ctx.data_dir())
    docs = [d.id for d in store.iter_corpus(ctx.data_dir())]
    r = random.Random(5)  # BM25-like negatives for 4 in 5 questions, random passages for the rest
    negs = tmp_path / "negs.jsonl"
    write_jsonl(negs, [{"id": q.id, "negatives": r.sample(docs, 3)}
                       for i, q in enumerate(store.read_queries(ctx.data_dir(), "train")) if i % 5])
    # the old loop's AdamW was torch's default step: so is the loop's outside portable numerics (a test
    # that applied portable numerics in this process before would give the loop the fused step, 1e-6 apart)
    monkeypatch.setattr(numerics, "_active", "native")
    want = _old_dpr_train(ctx, negs)
    info = dpr.train(ctx, tmp_path / "model", negs)
    assert len(want) == info["steps"] == 4
    assert info["loss_first"] == want[:5] and info["loss_last"] == want[-5:]
    assert (tmp_path / "model" / LOSS_LOG).is_file()


def test_a_cost_probe_runs_n_sub_batches_a_pass_and_projects_the_rest(tmp_path, monkeypatch):
    """``probe_sub_batches`` (the rehearsal's, for a step too long for its machine): each GradCache pass
    runs its first n sub-batches, the rest take copies of their representations (the loss sees the
    whole batch's shapes), and each skipped sub-batch is priced at the run ones' mean: worked by hand
    with a clock that advances 1 s per sub-batch encoded (2 groups of 10 items in sub-batches of 3:
    4 sub-batches a pass, 2 run; pass 1 and pass 2 each skip 2 per group, 2 s projected a pass and
    group: 8 s a step); the job's seconds stay as measured and its price carries the projection."""
    from harness import cost
    from harness import train as loop

    clock = [0.0]
    monkeypatch.setattr(loop.time, "perf_counter", lambda: clock[0])
    net = torch.nn.Linear(2, 2)
    calls = []

    def encode(items):
        calls.append(len(items))
        clock[0] += 1.0
        return net(torch.stack(list(items)))

    def loss_fn(q, d):
        assert q.shape == (10, 2) and d.shape == (10, 2)   # the whole batch's shapes
        return (q @ d.T).logsumexp(-1).mean(), {}

    groups = [list(torch.randn(10, 2)), list(torch.randn(10, 2))]
    cost.allow_fallbacks(False)
    loop._PROBE[0] = 2
    try:
        loop.grad_cache_step(encode, groups, loss_fn, chunk=3)
    finally:
        loop._PROBE[0] = 0
    assert calls == [3, 3] * 4   # per group: 2 run in the first pass, then the same 2 re-encoded
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in net.parameters())
    projected = cost.probe_step_done()
    assert projected == pytest.approx(8.0)
    cost.step_timed(10.0, first=True, projected=projected)
    summary = cost.probe_summary()
    assert summary == {"sub_batches_run": 8, "sub_batches": 16, "projected_seconds": 8.0}
    got = cost.record("train", {"steps": 1}, 12.0)
    assert got["seconds"] == 12.0 and got["probe"] == {**summary, "measured_step_seconds": [10.0]}
    assert got["seconds_per_unit"] == pytest.approx(20.0)   # 12 s measured + 8 s projected, one step
    with pytest.raises(ConfigError, match="without grad_cache_chunk"):
        TrainSettings(probe_sub_batches=2).check()
    # off: every sub-batch runs, nothing is projected
    calls.clear()
    cost.allow_fallbacks(False)
    loop.grad_cache_step(encode, groups, loss_fn, chunk=3)
    assert len(calls) == 16 and cost.probe_summary() is None and cost.probe_step_done() == 0.0
