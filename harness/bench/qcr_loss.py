"""`python -m harness bench qcr-loss`: QCR's training loss (Eq. 3 late interaction + the code entropy,
:func:`harness.methods.qcr.model.qcr_loss`), forward and backward, at the paper's schedule shapes
(§4.3: batch 256 -> 2,048, K 150 -> 250; FSQ levels [5]*5, so 5 dimensions and 3,125 codes), two ways
in one run on the same tensors: the exact-difference ``cdist`` (QCR's CPU path below the loss budget,
``LOSS_CHUNK_ELEMENTS``, kept for its bits, and its only CPU path before the fused kernel) against the
path the device takes past the budget: on CUDA the CUDA path (squared exact differences, the minimum
before the square root), on a CPU the fused one-pass kernel (:mod:`harness.methods.qcr.fused`).
Prints seconds and peak memory per shape and whether both give the same loss.

Target (issue "Paper rehearsal"): the device's path at least 10x the ``cdist`` path, on a GPU at
batch 256, K 150 (on an H200 the ``cdist`` path took the whole training step), on a CPU at the largest
shape both ran. A benchmark prints, it does not assert. Shapes past ``--cdist-max-batch`` skip the
slow path.

On a CPU the paper's shapes take hours through ``cdist`` (the distances grow as B^2 K^2: 128 x 150 took
13.6 s on a 2-core AVX2 EPYC, 4.1x its 64 x 150), so the CPU's default is two small shapes, and the
paper's stages are projected from the largest shape each path ran at B^2 K^2, labelled projected
(the entropy term grows as B K only: the projection is high for the fused path). The fused path runs
the paper's last stage itself: ``--shapes 2048x250 --cdist-max-batch 0``.

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

    from harness.methods.qcr import fused
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
        # each path forced at every shape, on any device: "fast" the CUDA form, "cdist" the exact-
        # difference cdist (in chunks past the budget), "fused" the CPU's one-pass kernel
        saved = qm._fast_path, qm._late_interaction, fused.supports
        qm._fast_path = (lambda x: which == "fast")
        if which == "fused":
            qm._late_interaction = fused.late_interaction
        elif which == "cdist":
            fused.supports = lambda q, d: False
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
            qm._fast_path, qm._late_interaction, fused.supports = saved
        return {"seconds": s, "loss": float(loss.detach()),
                "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}

    new = "fast" if cuda else "fused"   # the path past the budget on this device
    out = []
    print(f"QCR loss (Eq. 3 + entropy, temperature 0.05, entropy weight 0.1), forward + backward on {dev}"
          + (f" ({torch.cuda.get_device_name()})" if cuda else "") + f": the {new} path against cdist")
    if not cuda:
        run(8, 4, "fused")  # warm-up: the kernel's compilation (or its cache's load)
    for b, k in shapes:
        row: dict[str, object] = {"batch": b, "K": k}
        if cuda:
            run(b, k, "fast")  # warm-up: kernels, allocator
        row[new] = run(b, k, new)
        if b <= a.cdist_max_batch:
            row["cdist"] = run(b, k, "cdist")
        f, c = row[new], row.get("cdist")
        line = f"  B={b:5d} K={k:4d}: {new} path {f['seconds']:8.2f} s" + (f" (peak {f['peak_gib']:.1f} GiB)" if cuda else "")
        if c:
            same = abs(c["loss"] - f["loss"]) <= 1e-4 * max(1.0, abs(c["loss"]))
            row["ratio"], row["same_loss"] = c["seconds"] / f["seconds"], same
            line += f"   cdist {c['seconds']:8.2f} s   ratio {row['ratio']:.1f}x   same loss: {same}"
        else:
            line += "   cdist not run (past --cdist-max-batch)"
        print(line, flush=True)
        out.append(row)
    if not cuda:   # the paper's stages, from the largest shape each path ran, at B^2 K^2
        ran = {(r["batch"], r["K"]) for r in out}
        for path in ("cdist", "fused"):
            timed = [r for r in out if path in r]
            if not timed:
                continue
            big = max(timed, key=lambda r: (r["batch"] ** 2 * r["K"] ** 2))
            size = big["batch"] ** 2 * big["K"] ** 2   # the fused path: only the stages past what it ran
            proj = [(b, k, projected_seconds(big[path]["seconds"], big["batch"], big["K"], b, k))
                    for b, k in _shapes(PAPER_SHAPES) if path == "cdist" or ((b, k) not in ran and b * b * k * k > size)]
            if not proj:
                continue
            what = "QCR's CPU path below the budget, and before" if path == "cdist" else "QCR's CPU path past the budget"
            print(f"  projected ({path}, {what}; from B={big['batch']} K={big['K']} at B^2 K^2): "
                  + ", ".join(f"B={b} K={k} {s / 3600:,.2f} h" for b, k, s in proj) + " per training step's loss")
            for b, k, s in proj:
                out.append({"batch": b, "K": k, f"projected_{path}_seconds": s})
    first = next((r for r in out if "ratio" in r), None)
    if first is None:
        print("target: not judged (no shape ran both paths)")
    else:
        best = max((r for r in out if "ratio" in r), key=lambda r: r["batch"] ** 2 * r["K"] ** 2) if not cuda else first
        ok = best["ratio"] >= TARGET
        print(f"target: {new} path >= {TARGET:.0f}x cdist at B={best['batch']} K={best['K']} -> {best['ratio']:.1f}x "
              f"{'met' if ok else 'NOT met'}" + ("" if cuda else " (on the CPU: the largest shape both ran)"))
    if a.json:
        a.json.write_text(json.dumps({"device": str(dev), "shapes": out, "target": TARGET}, indent=1))
    return 0

