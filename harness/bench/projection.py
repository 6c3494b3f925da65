"""`python -m harness bench projection`: the max-pooled vocabulary projection (VDR/SVDR's E_θ,
LightRetriever's sparse side) under ``numerics: portable``, two ways in one run on the same tensors:
torch's product (MKL on its portable SSE2 branch) then ``max``, and the shared kernel of
:mod:`harness.models.projection` (numpy's OpenBLAS, Haswell kernels, blocks side by side). Prints
GFLOP/s and ms per batch for 1 and 2 threads, the ratio, and that both give the same maxima (to
float rounding) and arg-max rows (ties aside).

Target (issue "Speed of the tool itself"): the shared kernel at least 1.5x torch's portable product
a thread on an AVX2 CPU. A benchmark prints, it does not assert.

    python -m harness bench projection                    # splade-tiny's head: 29,523 x 128, 8 x 128 tokens
    python -m harness bench projection --vocab 30522 --hidden 768 --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

TARGET = 1.5


def main(argv: list[str]) -> int:
    from harness import numerics

    ap = argparse.ArgumentParser(prog="python -m harness bench projection", description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=29_523)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--rows", type=int, default=8, help="segments (passages) per batch (default 8)")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per segment (default 128)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    numerics.apply("portable")  # before torch loads (the bench command imports nothing heavy first)
    import numpy as np
    import torch

    from harness.models import projection
    from harness.timing import time_calls

    g = torch.Generator().manual_seed(0)
    w = torch.randn(a.vocab, a.hidden, generator=g) / a.hidden ** 0.5
    b = torch.randn(a.vocab, generator=g)
    h = torch.randn(a.rows * a.tokens, a.hidden, generator=g)
    starts = np.arange(0, a.rows * a.tokens + 1, a.tokens)
    flop = 2.0 * a.vocab * a.hidden * a.rows * a.tokens

    def timed(fn) -> float:
        return statistics.median(time_calls(fn, a.repeats, warmup=1))

    out = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        torch_s = timed(lambda: projection.segment_max_torch_product(h, w, b, starts))
        numpy_s = timed(lambda: projection.segment_max_torch(h, w, b, starts))
        out[threads] = {"torch_ms": torch_s * 1e3, "kernel_ms": numpy_s * 1e3, "ratio": torch_s / numpy_s,
                        "torch_gflops": flop / torch_s / 1e9, "kernel_gflops": flop / numpy_s / 1e9}
    tv, ta = projection.segment_max_torch_product(h, w, b, starts)
    kv, ka = projection.segment_max_torch(h, w, b, starts)
    max_diff = float((tv - kv).abs().max())
    same_arg = float((ta == ka).float().mean())
    print(f"max-pooled projection [{a.vocab} x {a.hidden}] over {a.rows} x {a.tokens} tokens "
          f"({flop / 1e9:.1f} GFLOP a batch), numerics portable, median of {a.repeats}")
    for threads, r in out.items():
        print(f"  {threads} thread{'s' if threads > 1 else ' '}: torch product + max {r['torch_ms']:8.1f} ms "
              f"({r['torch_gflops']:5.1f} GFLOP/s)   shared kernel {r['kernel_ms']:8.1f} ms "
              f"({r['kernel_gflops']:5.1f} GFLOP/s)   ratio {r['ratio']:.2f}x")
    print(f"  same maxima to {max_diff:.1e}; same arg-max row for {same_arg:.4%} of (segment, dimension)")
    one = out[1]["ratio"]
    print(f"target: kernel >= {TARGET}x torch's portable product a thread -> {one:.2f}x "
          f"{'met' if one >= TARGET else 'NOT met'}")
    if a.json:
        a.json.write_text(json.dumps({"threads": out, "max_diff": max_diff, "same_arg": same_arg,
                                      "target": TARGET, "met": one >= TARGET}, indent=1))
    return 0
