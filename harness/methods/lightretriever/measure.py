"""LightRetriever's measure jobs: Figure 5 (nDCG@10 against the dense dims and sparse terms kept) and
Table 1 (query-encoding speed of the trained model and of random paper-sized shapes; the timers are
in ``speed.py``)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import figures
from harness.datasets import store
from harness.errors import ConfigError
from harness.methods.lightretriever.model import LightModel
from harness.methods.lightretriever.settings import NAME, instruction_for, settings
from harness.models.runtime import torch_for
from harness.recording import merged

#: Table 1's values of one row: (value name, row key, unit, what, device)
SPEED_VALUES = (
    ("tokenize_seconds", "tokenize_s", "s", "tokenising all queries in batches (padding, tensors)", "cpu"),
    ("full_cpu_seconds", "full_cpu_s", "s", "full-size encoder ({shape}): forward + EOS pooling, "
                                             "tokenisation outside the timer", "cpu"),
    ("full_gpu_seconds", "full_gpu_s", "s", "full-size encoder ({shape}) on the GPU", "cuda"),
    ("light_cpu_seconds", "light_cpu_s", "s", "EmbeddingBag(mean) over pre-tokenised ids", "cpu"),
    ("light_gpu_seconds", "light_gpu_s", "s", "EmbeddingBag(mean) on the GPU", "cuda"),
    ("speedup_cpu", "speedup_cpu", "x", "full-size CPU seconds / lookup CPU seconds", "cpu"),
    ("speedup_gpu", "speedup_gpu", "x", "full-size GPU seconds / lookup GPU seconds", "cuda"),
    ("speedup_gpu_vs_cpu_lookup", "speedup_gpu_vs_light_cpu", "x",
     "full-size GPU seconds / lookup CPU seconds (the paper's No-GPU speedup)", "cuda"),
    ("bandwidth_bound_seconds", "bound_s", "s", "bytes of token vectors read / measured copy bandwidth", "cpu"),
    ("light_over_bound", "light_over_bound", "ratio", "lookup CPU seconds / bandwidth bound", "cpu"),
)


def fig5(cfg: Mapping[str, Any], job: Any, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Figure 5: nDCG@10 against the dense dims kept (MRL variant) and the sparse terms kept per
    document (top-k of the main model), evaluated as the evaluate stage does; points smallest first
    (``lightretriever.fig5-dense-<i>``, ``-sparse-<i>``) and ``fig5.png``."""
    from harness.evaluate.run import evaluate_run

    measure, d = "nDCG@10", str(job.dataset)
    curves: dict[str, list[tuple[int, float]]] = {}
    for kind, pts in job.params["points"].items():
        for i, (k, sid) in enumerate(pts):
            res = evaluate_run(cfg, d, inputs[f"run_{sid}"] / f"{sid}.trec")
            if measure not in res["measures"]:
                raise ConfigError(f"Figure 5 needs {measure} in evaluate.ir_measures (dataset {d})")
            size = int(k) if k else None
            v = res["measures"][measure]
            curves.setdefault(kind, []).append((size or 0, v))
            what = (f"{measure} of {sid}: " + (f"first {size} dims (MRL)" if kind == "dense" and size else
                                               "all dims" if kind == "dense" else f"top {size} terms per document"))
            figures.write(out / f"{NAME}.fig5-{kind}-{i}.json", f"{NAME}.fig5-{kind}-{i}", d, {
                "ndcg10": (v, "ratio", what), "topk": (float(size or 0), "count", "dims or terms kept (0: all dims)")},
                source_system=sid)
    _plot_fig5(curves, measure, f"LightRetriever Figure 5, {cfg['profile']}, {d}", out / "fig5.png")
    return {"figures": ["fig5.png"]}


def _plot_fig5(curves: Mapping[str, list[tuple[int, float]]], measure: str, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for kind, pts in curves.items():
        xs = [k for k, _ in pts if k] or []
        ys = [v for k, v in pts if k]
        if xs:
            ax.plot(xs, ys, marker="o", label=f"light {kind} (top-k {'dims' if kind == 'dense' else 'terms'})")
        full = [v for k, v in pts if not k]
        if full:
            ax.axhline(full[0], ls="--", lw=0.8, color="grey", label="light dense, all dims")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("top-k")
    ax.set_ylabel(measure)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _write_speed(path: Path, system: str, row: Mapping[str, Any], shape: str, *, dataset: str, note: str,
                 gpu: bool, no_gpu: str) -> None:
    """One Table 1 row as a measure file: its values, and why the others were not run."""

    vals: dict[str, Any] = {}
    not_run: dict[str, str] = {}
    for name, key, unit, what, dev in SPEED_VALUES:
        what = what.format(shape=shape)
        value = row.get(key)
        if value is None:
            kind = row.get("full_gpu_kind") if "gpu" in key else None
            not_run[name] = ("out of GPU memory" if kind == "OOM" else no_gpu if dev == "cuda" and not gpu
                             else "not measured")
            continue
        cpu_projected = (key.startswith("full_cpu") or key == "speedup_cpu") and row.get("full_cpu_kind") == "projected"
        if cpu_projected:
            sub = row.get("full_sub_batch")
            what += (f" (timed on {row.get('full_cpu_queries_timed')} of {row.get('queries')} queries"
                     + (f", the first {sub} of a batch: per-query cost at {sub}" if sub else "")
                     + ", scaled linearly)")
        projected = cpu_projected or (key.startswith(("full_gpu", "speedup_gpu"))
                                      and row.get("full_gpu_kind") == "projected")
        vals[name] = figures.value(float(value), unit, what, device=dev, projected=projected,
                                   batches=row.get(f"{key}_batches"))
    figures.write(path / f"{system}.json", system, dataset, vals, not_run=not_run, queries_note=note, shape=shape,
                  batch_size=row.get("batch_size"), tokens=row.get("tokens"), bytes_read=row.get("bytes_read"),
                  bandwidth_bytes_per_s=row.get("bandwidth"))


def speed(cfg: Mapping[str, Any], job: Any, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Table 1 on this machine: tokenisation, the full-size encoder and the cached lookup of the trained
    model over the dataset's test queries cycled to ``speed.queries``, per batch size; then the same
    for randomly initialised paper-sized shapes (``speed.shapes``) where memory allows. What each timer
    holds: harness/methods/lightretriever/speed.py."""
    from harness.meta import resolve_device
    from harness.methods.lightretriever import speed as lq

    s = settings(cfg)
    sp = s["speed"]
    torch = torch_for(s)
    texts = [q.text for q in store.read_queries(inputs["data"], "test")]
    n = int(sp["queries"])
    model = LightModel.load(inputs["model"])
    instr = instruction_for(merged(s, {"instruction": model.s["instruction"]}), str(job.dataset))
    table, rows = timed_table(model, instr, texts)
    d = str(job.dataset)
    note = (f"{len(texts):,} test queries of {d} cycled to {n:,}" if len(texts) < n else f"first {n:,} test queries of {d}")
    dev, why = resolve_device("cuda")
    gpu = dev != "cpu"
    where = {"dataset": d, "note": note, "gpu": gpu, "no_gpu": why or "no GPU"}
    bandwidth = lq.copy_bandwidth()
    kw = {"batch_sizes": tuple(sp["batch_sizes"]), "n_queries": n, "max_len": int(s["q_max_len"]) + 32,
          "full_budget_s": sp["full_budget_s"], "full_sub_batch": sp.get("full_sub_batch"), "gpu": gpu,
          "bandwidth": bandwidth}
    for row in lq.speed_table(texts, tokenizer=model.tok, full_model=model.base, table=table, **kw):
        _write_speed(out, f"{NAME}.speed-bs{row['batch_size']}", row, s["backbone"], **where)
        print(f"batch {row['batch_size']}: tokenise {row['tokenize_s']:.3f} s, full {row['full_cpu_s']:.3f} s "
              f"({row['full_cpu_kind']}), lookup {row['light_cpu_s']:.4f} s, x{row['speedup_cpu']:.0f}")
    skipped = {}
    for shape in sp["shapes"]:
        ok, why = lq.fits_in_memory(lq.PAPER_SHAPES[shape], torch.float32)
        if not ok:
            skipped[shape] = why
            for b in sp["shape_batch_sizes"]:
                _write_speed(out, f"{NAME}.speed-{shape}-bs{b}", {"batch_size": b}, f"{shape}: not run, {why}", **where)
            continue
        conf = lq.PAPER_SHAPES[shape]
        big = lq.random_model(shape)
        rtable = lq.random_table(conf.vocab_size, conf.hidden_size)
        for row in lq.speed_table(texts, tokenizer=model.tok, full_model=big, table=rtable,
                                  **{**kw, "batch_sizes": tuple(sp["shape_batch_sizes"])}):
            _write_speed(out, f"{NAME}.speed-{shape}-bs{row['batch_size']}", row, f"{shape} shape, random weights",
                         **where)
        del big, rtable
    return {"queries": n, "queries_note": note, "shapes_not_run": skipped, "bandwidth_bytes_per_s": bandwidth,
            "table_rows_computed": rows, "table_rows": int(table.num_embeddings)}


def timed_table(model: LightModel, instruction: str | None, texts: list[str]) -> tuple[Any, int]:
    """The cached table Table 1's lookups read: all V rows of ``instruction`` (what serving holds, its
    size and layout), of which the rows the tokens of ``texts`` index are computed, each its own forward
    pass of the full-size encoder (:meth:`LightModel.cache_table`), and the rest left zero: no query of
    ``texts`` reads them, so the timed lookups read the same rows with the same values as from the
    whole table, whose 128,256 forward passes (hours of a 1B model on a CPU) are serving's offline
    step, not Table 1's figure. Returns the table and the rows computed."""
    import torch

    from harness.methods.lightretriever import ops
    from harness.methods.lightretriever.speed import light_token_ids

    touched = sorted({t for ids in light_token_ids(model.tok, texts, model.vocab) for t in ids})
    rows = model.cache_table(instruction, tokens=touched).weight
    full = torch.zeros(model.vocab, rows.shape[1], dtype=rows.dtype)
    full[touched] = rows
    return ops.build_table(full), len(touched)
