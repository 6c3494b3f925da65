"""`python -m harness bench qcr-loss`: QCR's training loss (Eq. 3 late interaction + the code entropy,
:func:`harness.methods.qcr.model.qcr_loss`), forward and backward, at the paper's schedule shapes
(§4.3: batch 256 -> 2,048, K 150 -> 250; FSQ levels [5]*5, so 5 dimensions and 3,125 codes), two ways
in one run on the same tensors: the exact-difference ``cdist`` (QCR's CPU path, kept for its bits)
and the CUDA path (squared exact differences, the minimum before the square root). Prints seconds
and peak memory per shape and whether both give the same loss.

Target (issue "Paper rehearsal"): on a GPU, the CUDA path at least 10x the ``cdist`` path at batch
256, K 150 (on an H200 the ``cdist`` path took the whole training step). A benchmark prints, it
does not assert. Shapes past ``--cdist-max-batch`` skip the slow path.

On a CPU the paper's shapes take hours (the distances grow as B^2 K^2: 128 x 150 took 13.6 s through
``cdist`` on a 2-core AVX2 EPYC, 4.1x its 64 x 150, and the CUDA path's form 50 s), so the CPU's default is two small shapes,
and the paper's stages are projected from the largest shape's ``cdist`` seconds (QCR's CPU path) at
B^2 K^2, labelled projected.

    python -m harness bench qcr-loss --device cuda
    python -m harness bench qcr-loss                           # on a CPU: 64x150,128x150, the paper's projected
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

TARGET = 10.0
PAPER_SHAPES = "256x150,512x183,1024x217,2048x250"
#: the CPU's default: the paper's shapes take hours there (projected from these instead)
CPU_SHAPES = "64x150,128x150"


def projected_seconds(seconds: float, b: int, k: int, to_b: int, to_k: int) -> float:
    """``seconds`` measured at batch ``b`` and K ``k`` projected to ``to_b`` x ``to_k``: Eq. 3's
    distances are B queries x K codes against B passages x K codes, so the work grows as B^2 K^2."""
    return seconds * (to_b / b) ** 2 * (to_k / k) ** 2


def _shapes(text: str) -> list[tuple[int, int]]:
    from harness.errors import ConfigError

    try:
        return [(int(b), int(k)) for b, k in (s.split("x") for s in text.split(","))]
    except ValueError:
        raise ConfigError(f"--shapes {text!r}: expected BATCHxK[,BATCHxK...], e.g. 256x150,2048x250") from None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness bench qcr-loss", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--shapes", default=None, help=f"BATCHxK list (default the paper's stages on CUDA, {PAPER_SHAPES}; "
                                                   f"on a CPU {CPU_SHAPES}, the paper's projected)")
    ap.add_argument("--cdist-max-batch", type=int, default=256, help="largest batch the cdist path runs (default 256)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    import torch

    from harness.methods.qcr import model as qm

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    shapes = _shapes(a.shapes or (PAPER_SHAPES if cuda else CPU_SHAPES))
    codebook = torch.cartesian_prod(*[torch.linspace(-1, 1, 5)] * 5).to(dev)  # FSQ [5]*5: 3,125 codes

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def run(b: int, k: int, which: str) -> dict[str, float]:
        g = torch.Generator().manual_seed(0)
        q = torch.tanh(torch.randn(b, k, 5, generator=g)).to(dev).requires_grad_()
        d = torch.tanh(torch.randn(b, k, 5, generator=g)).to(dev).requires_grad_()
        saved = qm._fast_path
        qm._fast_path = (lambda x: False) if which == "cdist" else (lambda x: True)  # on any device
        try:
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            sync()
            t = time.perf_counter()
            loss, _ = qm.qcr_loss(q, d, codebook, temperature=0.05, entropy_weight=0.1)
            loss.backward()
            sync()
            s = time.perf_counter() - t
        finally:
            qm._fast_path = saved
        return {"seconds": s, "loss": float(loss.detach()),
                "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}

    out = []
    print(f"QCR loss (Eq. 3 + entropy, temperature 0.05, entropy weight 0.1), forward + backward on {dev}"
          + (f" ({torch.cuda.get_device_name()})" if cuda else ""))
    for b, k in shapes:
        row: dict[str, object] = {"batch": b, "K": k}
        if cuda:
            run(b, k, "fast")  # warm-up: kernels, allocator
        row["fast"] = run(b, k, "fast")
        if b <= a.cdist_max_batch:
            row["cdist"] = run(b, k, "cdist")
        f, c = row["fast"], row.get("cdist")
        line = f"  B={b:5d} K={k:4d}: fast path {f['seconds']:7.2f} s" + (f" (peak {f['peak_gib']:.1f} GiB)" if cuda else "")
        if c:
            same = abs(c["loss"] - f["loss"]) <= 1e-4 * max(1.0, abs(c["loss"]))
            row["ratio"], row["same_loss"] = c["seconds"] / f["seconds"], same
            line += f"   cdist {c['seconds']:7.2f} s   ratio {row['ratio']:.1f}x   same loss: {same}"
        else:
            line += "   cdist not run (past --cdist-max-batch)"
        print(line, flush=True)
        out.append(row)
    timed = [r for r in out if "cdist" in r]
    if not cuda and timed:   # QCR's CPU path at the paper's stages, from the largest shape it ran
        big = max(timed, key=lambda r: (r["batch"] ** 2 * r["K"] ** 2))
        proj = [(b, k, projected_seconds(big["cdist"]["seconds"], big["batch"], big["K"], b, k))
                for b, k in _shapes(PAPER_SHAPES)]
        print(f"  projected (cdist, QCR's CPU path; from B={big['batch']} K={big['K']} at B^2 K^2): "
              + ", ".join(f"B={b} K={k} {s / 3600:,.2f} h" for b, k, s in proj) + " per training step's loss")
        for b, k, s in proj:
            out.append({"batch": b, "K": k, "projected_cdist_seconds": s})
    first = next((r for r in out if "ratio" in r), None)
    if first is None:
        print("target: not judged (no shape ran both paths)")
    elif not cuda:
        print(f"target: not judged on {dev} (the target is the CUDA path on a GPU)")
    else:
        ok = first["ratio"] >= TARGET
        print(f"target: fast path >= {TARGET:.0f}x cdist at B={first['batch']} K={first['K']} -> {first['ratio']:.1f}x "
              f"{'met' if ok else 'NOT met'}")
    if a.json:
        a.json.write_text(json.dumps({"device": str(dev), "shapes": out, "target": TARGET}, indent=1))
    return 0

