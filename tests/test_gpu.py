"""The harness's GPU paths on a real CUDA device: bf16 training through the one training loop,
SVDR's torch.sparse f(q, D) in fp16, the timing protocol's synchronised stopwatch, and a faiss GPU
copy where faiss-gpu is installed (LightRetriever's projection under bf16 autocast on cuda is the
cuda case of tests/test_lr_ops.py, marker gpu too). Each is compared with the same computation on
the CPU. Skipped where torch sees no GPU (CI); run them on a GPU machine with
``python -m pytest -m gpu tests/``."""
from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")]


def _regression_task(seed: int = 0, n: int = 256, d: int = 32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    return [(x[i], (x[i] @ w).item()) for i in range(n)]


def _train(precision: str, device: str) -> tuple[dict, torch.nn.Module, list[str]]:
    from harness.train import TrainSettings, set_seed, train_loop

    set_seed(0)
    examples = _regression_task()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    seen: list[str] = []

    def step_fn(batch, step, rng):
        x = torch.stack([b[0] for b in batch]).to(device)
        y = torch.tensor([b[1] for b in batch], device=device)
        h = model[0](x)
        seen.append(str(h.dtype))  # the autocast dtype of a matmul inside the step
        pred = model[2](model[1](h)).squeeze(-1)
        return torch.nn.functional.mse_loss(pred.float(), y), {}

    ts = TrainSettings(batch_size=16, epochs=20, lr=1e-2, warmup_ratio=0.0, grad_clip=None, device=device, precision=precision,
                       log_every=1000)
    info = train_loop(examples, step_fn, list(model.parameters()), settings=ts, seed=0, out=None,
                      modules=[model])
    return info, model, seen


def test_bf16_training_on_cuda_learns_like_fp32():
    info, model, seen = _train("bf16", "cuda")
    ref, _, ref_seen = _train("fp32", "cuda")
    assert set(seen) == {"torch.bfloat16"} and set(ref_seen) == {"torch.float32"}
    assert all(p.device.type == "cuda" and p.dtype == torch.float32 for p in model.parameters())  # master weights
    assert info["steps"] == ref["steps"] == 320
    first, last = np.mean(info["loss_first"]), np.mean(info["loss_last"])
    assert last < 0.2 * first, f"bf16 did not learn: loss {first:.3f} -> {last:.3f}"
    assert abs(last - np.mean(ref["loss_last"])) < 0.1 * first  # bf16 ends where fp32 does, to 10% of the start


def test_svdr_sparse_search_on_cuda_matches_the_cpu():
    import scipy.sparse as sp

    from harness.methods.vdr.measure import _torch_search, _torch_sparse

    index = sp.random(2000, 1000, density=0.02, random_state=1, format="csr", dtype=np.float32)
    queries = sp.random(8, 1000, density=0.05, random_state=2, format="csr", dtype=np.float32)
    cpu = _torch_search(_torch_sparse(index, "cpu"), queries, 10, "cpu")
    gpu = _torch_search(_torch_sparse(index, "cuda"), queries, 10, "cuda")
    assert gpu.values.dtype == torch.float16 and gpu.values.device.type == "cuda"
    torch.testing.assert_close(gpu.values.float().cpu(), cpu.values, atol=2e-2, rtol=1e-2)
    top1 = (gpu.indices[0].cpu() == cpu.indices[0]).float().mean().item()
    assert top1 >= 0.75, f"only {top1:.0%} of top-1 passages agree (fp16 ties aside)"


def test_timing_stopwatch_waits_for_the_gpu():
    from harness import timing

    proto = timing.Protocol(name="t", source="test", batch_size=2, warmup=0, repeats=2, trim="none",
                            dtype={"cpu": "float32", "cuda": "float16"}, max_length=8,
                            inside_timer={"search": "20 matmuls"}, timed=("search",))
    a = torch.randn(4096, 4096, device="cuda")

    def search(encoded, k, opts):
        for _ in range(20):  # ~2.7 TFLOP: far longer than a launch; without the sync the timer would miss it
            encoded = a @ a
        return encoded

    res = timing.run_protocol(proto, ["q1", "q2"], encode=lambda texts, opts: None, search=search, k=1, device="cuda")
    assert res.device == "cuda" and res.hardware["name"] == torch.cuda.get_device_name(0)
    launch = []  # the same work timed without a sync: the launches only
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(20):
            a @ a
        launch.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    assert min(res.samples["search"]) > min(launch), (res.samples, launch)


def test_faiss_gpu_flat_matches_the_cpu_index():
    faiss = pytest.importorskip("faiss")
    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() < 1:
        pytest.skip("faiss here is faiss-cpu (no GPU index): install faiss-gpu for the GPU cells")
    rng = np.random.default_rng(0)
    xb, xq = rng.standard_normal((5000, 64), dtype=np.float32), rng.standard_normal((16, 64), dtype=np.float32)
    cpu = faiss.IndexFlatIP(64)
    cpu.add(xb)
    gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, cpu)
    d0, i0 = cpu.search(xq, 10)
    d1, i1 = gpu.search(xq, 10)
    np.testing.assert_allclose(d1, d0, rtol=1e-4, atol=1e-3)
    assert (i1[:, 0] == i0[:, 0]).mean() >= 0.9


def test_init_checkpoint_keeps_the_weights_under_bf16_on_cuda():
    """The learning check's control (harness.train.init_checkpoint) on a GPU in bf16: one step at
    learning rate 0 leaves every float32 master weight exactly as it was."""
    from harness.train import TrainSettings, init_checkpoint, set_seed, train_loop

    set_seed(0)
    examples = _regression_task()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    before = [p.detach().clone() for p in model.parameters()]

    def step_fn(batch, step, rng):
        x = torch.stack([b[0] for b in batch]).to("cuda")
        y = torch.tensor([b[1] for b in batch], device="cuda")
        return torch.nn.functional.mse_loss(model(x).squeeze(-1).float(), y), {}

    ts = TrainSettings(batch_size=16, epochs=20, lr=1e-2, warmup_ratio=0.0, grad_clip=1.0, device="cuda",
                       precision="bf16", log_every=1000)
    with init_checkpoint():
        info = train_loop(examples, step_fn, list(model.parameters()), settings=ts, seed=0, out=None, modules=[model])
    assert info["steps"] == 1
    assert all(p.device.type == "cuda" and torch.equal(p.detach().cpu(), b) for p, b in zip(model.parameters(), before))


def test_fp16_gradcache_on_cuda_trains_as_one_graph_under_the_loss_scale():
    """fp16 on CUDA (accelerate's GradScaler): a two-tower in-batch step in GradCache sub-batches of 4
    (harness.train.sub_batch_step; its loss back-propagated through the loop's scaled backward) logs the
    one-graph run's losses and ends at its weights; a sub-batch that bypassed the scale would hand
    the scaler unscaled gradients, which it divides again (the update then differs wherever Adam's
    eps matters, and the inf check sees the wrong numbers)."""
    from harness.train import TrainSettings, set_seed, sub_batch_step, train_loop

    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(16, generator=g), torch.randn(16, generator=g)) for _ in range(64)]

    def run(chunk):
        set_seed(0)
        q, p = torch.nn.Linear(16, 32), torch.nn.Linear(16, 32)

        def step_fn(batch, step, rng):
            qb = {"x": torch.stack([a for a, _ in batch]).cuda()}
            pb = {"x": torch.stack([b for _, b in batch]).cuda()}

            def loss_fn(a, b):
                return torch.nn.functional.cross_entropy((a @ b.T).float(), torch.arange(len(a), device=a.device)), {}

            return sub_batch_step([(lambda b: q(b["x"]), qb), (lambda b: p(b["x"]), pb)], loss_fn, chunk)

        ts = TrainSettings(batch_size=16, epochs=3, lr=1e-3, warmup_ratio=0.0, grad_clip=1.0, device="cuda",
                           precision="fp16", log_every=1000)
        info = train_loop(data, step_fn, [*q.parameters(), *p.parameters()], settings=ts, seed=0, out=None,
                          modules=[q, p])
        return info, [t.detach().cpu() for t in (*q.parameters(), *p.parameters())]

    (one, w1), (cached, w2) = run(0), run(4)
    assert one["steps"] == cached["steps"] == 12
    np.testing.assert_allclose(cached["losses"], one["losses"], rtol=1e-2)
    diff = torch.cat([(a - b).abs().flatten() for a, b in zip(w1, w2)])
    # Adam moves a weight by up to lr (1e-3) a step whatever its gradient's size, so a near-zero gradient
    # rounded apart may move one weight apart; on average they agree (fp32 on the CPU: 1.1e-5 after 12 steps)
    assert float(diff.mean()) < 2e-4, (float(diff.mean()), float(diff.max()))


def test_fp16_gradcache_gradients_are_the_scaled_one_graph_gradients_on_cuda():
    """accelerate's fp16 backward on CUDA lent to a GradCache step (harness.train.backward): the
    parameters' gradients are the one-graph step's under the same GradScaler, and scale x the
    unscaled fp32 step's (to fp16's rounding)."""
    import harness.train as loop
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    acc = Accelerator(mixed_precision="fp16")
    assert acc.scaler is not None
    torch.manual_seed(0)
    q, p = torch.nn.Linear(16, 32).cuda(), torch.nn.Linear(16, 32).cuda()
    params = [*q.parameters(), *p.parameters()]
    qb, pb = {"x": torch.randn(16, 16, device="cuda")}, {"x": torch.randn(16, 16, device="cuda")}

    def loss_fn(a, b):
        return torch.nn.functional.cross_entropy((a @ b.T).float(), torch.arange(len(a), device=a.device)), {}

    def grads(chunk, scaled):
        for t in params:
            t.grad = None
        loop._BACKWARD[0] = acc.backward if scaled else None
        try:
            with acc.autocast() if scaled else torch.autocast("cuda", enabled=False):
                loss, _ = loop.sub_batch_step([(lambda b: q(b["x"]), qb), (lambda b: p(b["x"]), pb)], loss_fn, chunk)
            if loss.requires_grad:
                loop.backward(loss)
        finally:
            loop._BACKWARD[0] = None
        return torch.cat([t.grad.float().flatten() for t in params])

    scale = float(acc.scaler.get_scale())
    plain, one_graph, cached = grads(4, False), grads(0, True), grads(4, True)
    assert torch.allclose(cached, one_graph, rtol=1e-2, atol=1e-3 * scale * float(plain.abs().max()))
    rel = float((cached / scale - plain).norm() / plain.norm())
    assert rel < 1e-2, rel
