"""The one training loop of every trained method (DPR, BPR, VDR/SVDR, the reader).

A method supplies its examples, a step function ``step_fn(batch, step, rng) -> (loss, parts)``
(the forward pass and loss of one batch; ``step`` = finished optimizer steps, ``rng`` = the
loop's seeded ``random.Random``, from which methods draw random negatives; a step function that
runs its own backward pass through :func:`backward`, as GradCache does, returns the loss detached
and the loop skips ``backward``), the parameters to
train, the modules to place and switch to train mode, and a ``save(folder)`` callback. The loop
owns the rest, the same for every method:

- batching: per epoch ``order = list(range(n))``, ``rng.shuffle(order)``, batches of
  ``batch_size`` consecutive indices; a batch smaller than ``min_batch`` (2: in-batch negatives
  need a second question) is skipped; training stops after ``total`` optimizer steps,
  ``total = round(ceil(n / (batch_size * grad_accum)) * epochs)``;
- AdamW (its fused CPU step under ``numerics: portable``, :func:`harness.numerics.optimizer_options`)
  with a linear warm-up (``warmup_ratio`` of the steps) and linear decay to 0
  (:func:`lr_lambda`), gradient clipping (``grad_clip``, max norm), gradient accumulation
  (``grad_accum`` batches per optimizer step, each loss divided by ``grad_accum``);
- seeding (:func:`set_seed`) and one subsampling rule (:func:`subsample`);
- a tqdm bar (stderr; every 10 s when stderr is not a terminal), ``step i/total loss ...`` lines
  every ``log_every`` steps, ``loss.tsv`` in the output folder (step, loss, the method's loss
  parts, lr, seconds), checkpoints every ``save_every`` steps and ``save(out)`` at the end.

Why accelerate: it is what moves the same loop from the CPU to a GPU and to mixed precision
without a second code path. ``Accelerator`` picks the device (``device: cpu | cuda | auto``),
runs the step function under autocast (``precision: fp32 | fp16 | bf16``), and for fp16 scales
the loss (``accelerator.backward``), unscales before clipping (``clip_grad_norm_``) and skips
the optimizer and scheduler step on overflow; :func:`accelerate.utils.set_seed` seeds random,
numpy and torch (every device). On the CPU in fp32 all of this reduces to ``loss.backward()``,
``clip_grad_norm_``, ``opt.step()``: the losses equal those of the hand-written loops this module
replaced, bit for bit. One process only (no distributed launch).

torch, accelerate and tqdm are imported lazily: the Snakefile imports the method modules.
"""
from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from harness import cost, numerics
from harness.errors import ConfigError

T = TypeVar("T")
StepFn = Callable[[list[Any], int, random.Random], tuple[Any, Mapping[str, float]]]
LOSS_LOG = "loss.tsv"
CHECKPOINTS = "checkpoints"
PRECISIONS = {"fp32": "no", "fp16": "fp16", "bf16": "bf16"}
DEVICES = ("cpu", "cuda", "auto")
_INIT_ONLY = [False]
#: the running loop's backward (its accelerator's: fp16 scales the loss); None outside a loop
_BACKWARD: list[Callable[[Any], None] | None] = [None]
#: the running loop's ``probe_sub_batches`` (0: off): :func:`grad_cache_step` runs that many sub-batches
#: of each pass and projects the rest (a rehearsal's step too long for its machine, priced from a fraction)
_PROBE = [0]


@contextmanager
def init_checkpoint() -> Iterator[None]:
    """Inside, every :func:`train_loop` runs one optimizer step at learning rate 0 and saves: the
    model exactly as it was before training (AdamW with lr 0 moves no weight), written by the
    method's own code with every field its meta.json has. The learning check's control
    (:mod:`harness.learning`: the same architecture before training, searched like the trained one)."""
    _INIT_ONLY[0] = True
    try:
        yield
    finally:
        _INIT_ONLY[0] = False


def initial_only() -> bool:
    """Whether :func:`train_loop` runs inside :func:`init_checkpoint` (lr 0, one step): a method may skip
    what only moves weights (DensePhrases' teacher logits for L_distill: two minutes on small)."""
    return _INIT_ONLY[0]


@dataclass(frozen=True)
class TrainSettings:
    """Loop settings; :meth:`from_config` reads them from a method's config section."""

    epochs: float = 1
    batch_size: int = 16
    lr: float = 2e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1
    grad_accum: int = 1
    precision: str = "fp32"
    device: str = "cpu"
    grad_clip: float | None = 2.0
    log_every: int = 50
    save_every: int | None = None
    grad_cache_chunk: int = 0  # texts per GradCache sub-batch (:func:`sub_batch_step`); 0: the batch in one graph
    #: a rehearsal's cost probe (#28): each GradCache pass runs its first ``probe_sub_batches`` sub-batches and
    #: copies their representations into the rest, whose seconds are projected at the run ones' mean
    #: (:func:`grad_cache_step`); the step's optimizer update is then not the full batch's. 0: off
    probe_sub_batches: int = 0
    min_batch: int = 2  # not a config key: the method's rule (the reader trains on single questions)

    @classmethod
    def from_config(cls, m: Mapping[str, Any], **defaults: Any) -> TrainSettings:
        """Each setting from the method section ``m`` (key = field name), else from ``defaults``
        (the method's own defaults, e.g. ``log_every=20``), else the field's default."""
        keys = [f.name for f in fields(cls) if f.name != "min_batch"]
        ts = replace(cls(), **{**defaults, **{k: m[k] for k in keys if k in m}})
        ts.check()
        return ts

    def check(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.device not in DEVICES:
            raise ConfigError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if int(self.grad_accum) < 1 or int(self.log_every) < 1:
            raise ConfigError(f"grad_accum and log_every must be >= 1, got {self.grad_accum}, {self.log_every}")
        if int(self.batch_size) < max(1, self.min_batch):
            raise ConfigError(f"batch_size must be >= {max(1, self.min_batch)}, got {self.batch_size}")
        if int(self.grad_cache_chunk or 0) < 0:
            raise ConfigError(f"grad_cache_chunk must be >= 0, got {self.grad_cache_chunk}")
        if int(self.probe_sub_batches or 0) < 0:
            raise ConfigError(f"probe_sub_batches must be >= 0, got {self.probe_sub_batches}")
        if int(self.probe_sub_batches or 0) and not int(self.grad_cache_chunk or 0):
            raise ConfigError(f"probe_sub_batches {self.probe_sub_batches} without grad_cache_chunk: a probe runs some "
                              "of a GradCache step's sub-batches and projects the rest",
                              fix="set grad_cache_chunk (texts per sub-batch) or probe_sub_batches: 0")
        if int(self.grad_cache_chunk or 0) and int(self.grad_accum) > 1:
            raise ConfigError(f"grad_cache_chunk {self.grad_cache_chunk} with grad_accum {self.grad_accum}: a GradCache "
                              "step back-propagates the whole batch's loss itself, undivided",
                              fix="set grad_accum: 1 (GradCache already fits the whole batch in sub-batches)")


def set_seed(seed: int) -> None:
    """Seed random, numpy and torch (every device). Call it where the method seeded before
    (ahead of building the model: weights the checkpoint lacks are drawn from torch's generator)."""
    from accelerate.utils import set_seed as _set_seed

    _set_seed(int(seed))


def subsample(examples: Sequence[T], n: int | None, seed: int) -> list[T]:
    """The training-question subsample of every method: ``n`` examples drawn with
    ``random.Random(seed)``, in their original order; all of them when ``n`` is None/0 or >= len."""
    if not n or n >= len(examples):
        return list(examples)
    keep = sorted(random.Random(seed).sample(range(len(examples)), int(n)))
    return [examples[i] for i in keep]


def total_steps(n: int, batch_size: int, epochs: float, grad_accum: int = 1) -> int:
    """Optimizer steps of a run: ``round(ceil(n / (batch_size * grad_accum)) * epochs)``, at least 1."""
    return max(1, round(math.ceil(n / (int(batch_size) * int(grad_accum))) * epochs))


def lr_lambda(total: int, warmup_ratio: float) -> Callable[[int], float]:
    """The LambdaLR factor after ``s`` steps: linear warm-up over ``int(total * warmup_ratio)``
    steps, then linear decay to 0 at ``total``."""
    warm = int(total * warmup_ratio)
    return lambda s: (s + 1) / max(1, warm) if s < warm else max(0.0, (total - s) / max(1, total - warm))


def resolve_device(device: str) -> str:
    """``cpu``, ``cuda`` or ``auto`` (cuda when available) -> the torch device name."""
    import torch

    if device not in DEVICES:
        raise ConfigError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        from harness.cost import fallback

        if fallback("device cuda -> cpu: torch sees no CUDA device"):
            return "cpu"
        raise ConfigError("device: cuda, but torch sees no CUDA device",
                          fix="set device: cpu (or auto), or device_fallback: true to run it on the CPU")
    return device


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (oneDNN's probe: AVX512-BF16 or AMX, not capped below)."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_precision(precision: str, device: str, key: str = "precision") -> str:
    """The precision a job runs at on ``device``: ``precision`` (fp32 | fp16 | bf16), or where the
    machine lacks it and the job may fall back (``device_fallback``, recorded in meta.json) fp32.
    fp16 off CUDA fails naming ``key``; bf16 on a CPU without a bf16 matmul runs (emulated) unless
    the job may fall back."""
    from harness.cost import fallback

    if precision == "fp16" and device != "cuda":
        if not fallback(f"{key} fp16 -> fp32: fp16 needs device cuda"):
            raise ConfigError(f"{key}: fp16 needs device: cuda", fix=f"use {key}: bf16 or fp32 on the CPU")
        return "fp32"
    if precision == "bf16" and device != "cuda" and not cpu_has_bf16():
        # without AVX512-BF16/AMX (an AVX2 CPU, or oneDNN capped at AVX2) a bf16 matmul is emulated: a
        # Llama-shaped linear took 4.5x its fp32 time; where the job may fall back (the rehearsal), fp32
        if fallback(f"{key} bf16 -> fp32: this CPU has no bf16 matmul (oneDNN)"):
            return "fp32"
    return precision


def _accelerator(ts: TrainSettings, device: str):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    precision = resolve_precision(ts.precision, device)
    # accelerate keeps its state in process-wide singletons; each run sets its own device/precision
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    return Accelerator(cpu=device == "cpu", mixed_precision=PRECISIONS[precision])


def _mean_parts(window: list[Mapping[str, float]]) -> dict[str, float]:
    if len(window) == 1:
        return dict(window[0])
    return {k: sum(float(p[k]) for p in window) / len(window) for k in window[0]}


class _LossLog:
    """``loss.tsv``: one row per optimizer step, written as training goes."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.fh, self.keys = path, None, ()

    def row(self, step: int, loss: float, parts: Mapping[str, float], lr: float, seconds: float) -> None:
        if self.path is None:
            return
        if self.fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = self.path.open("w", encoding="utf-8")
            self.keys = tuple(parts)
            self.fh.write("\t".join(("step", "loss", *self.keys, "lr", "seconds")) + "\n")
        cells = [str(step), repr(loss), *(repr(float(parts.get(k, math.nan))) for k in self.keys),
                 repr(float(lr)), f"{seconds:.3f}"]
        self.fh.write("\t".join(cells) + "\n")
        self.fh.flush()

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def loss_check(folder: Path, share: float = 0.1) -> dict[str, Any] | None:
    """Did the training loss fall? The mean loss of the first and of the last ``share`` of the
    optimizer steps in ``folder/loss.tsv`` (at least one step each), their difference, and
    ``fell``: last < first. With at least 3 steps in each window, also the one-sided Mann-Whitney
    p-value that the last window's losses are lower (scipy; steps are not independent draws, so it
    is a guide, not a test of a hypothesis). None where the folder has no loss log (a model that
    is not trained through :func:`train_loop`). A later call of the loop in the same folder (a
    method trained in phases) rewrites the log: the check reads the last phase."""
    path = Path(folder) / LOSS_LOG
    if not path.exists():
        return None
    rows = path.read_text(encoding="utf-8").splitlines()[1:]
    losses = [float(r.split("\t")[1]) for r in rows if r.strip()]
    if not losses:
        return None
    w = max(1, math.ceil(share * len(losses)))
    first, last = losses[:w], losses[-w:]
    out: dict[str, Any] = {"steps": len(losses), "window": w, "first": sum(first) / w, "last": sum(last) / w}
    out["drop"] = out["first"] - out["last"]
    out["fell"] = bool(out["last"] < out["first"])
    if w >= 3:
        from scipy.stats import mannwhitneyu

        out["p_mannwhitney"] = float(mannwhitneyu(last, first, alternative="less").pvalue)
    return out


def train_loop(examples: Sequence[Any], step_fn: StepFn, params: Sequence[Any], *, settings: TrainSettings,
               seed: int, out: Path | None, save: Callable[[Path], None] | None = None,
               modules: Sequence[Any] = (), rng: random.Random | None = None) -> dict[str, Any]:
    """Train ``params`` with ``step_fn`` over ``examples`` (see the module docstring); ``modules``
    (objects with ``.to(device)`` and ``.train()``) are moved to the device and set to train mode;
    ``rng`` defaults to ``random.Random(seed)``. Writes ``out/loss.tsv`` and calls ``save(out)``.
    (Over 80 lines: the one loop every method trains with; its phases, set-up, the step, logging and
    saving, share the accelerator state and read best in order.)

    Returns steps, total, examples, seconds, losses (all), loss_first / loss_last (5 each), and
    ``<part>_first`` / ``<part>_last`` for each loss part the step function reports."""
    import torch
    from tqdm import tqdm

    ts = settings
    ts.check()
    device = resolve_device(ts.device)
    acc = _accelerator(ts, device)
    n, bs, accum = len(examples), int(ts.batch_size), int(ts.grad_accum)
    if n < ts.min_batch:
        raise ConfigError(f"{n} training example(s): a batch needs at least {ts.min_batch}")
    for m in modules:
        m.to(device)
        m.train()
    params = list(params)
    total = 1 if _INIT_ONLY[0] else total_steps(n, bs, ts.epochs, accum)
    lr = 0.0 if _INIT_ONLY[0] else ts.lr  # init_checkpoint(): the weights stay as they were
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=ts.weight_decay, **numerics.optimizer_options())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(total, ts.warmup_ratio))
    opt, sched = acc.prepare_optimizer(opt), acc.prepare_scheduler(sched)
    rng = rng if rng is not None else random.Random(seed)
    log = _LossLog(Path(out) / LOSS_LOG if out is not None else None)
    every = int(ts.log_every)
    tty = sys.stderr.isatty()
    bar = tqdm(total=total, desc="train", unit="step", file=sys.stderr, mininterval=0.5 if tty else 10.0,
               dynamic_ncols=tty)
    losses: list[float] = []
    parts: list[dict[str, float]] = []
    window: list[tuple[float, Mapping[str, float]]] = []
    step, t0 = 0, time.perf_counter()
    t_step = t0
    _BACKWARD[0] = acc.backward
    _PROBE[0] = int(ts.probe_sub_batches or 0)
    try:
        while step < total:
            order = list(range(n))
            rng.shuffle(order)
            for i in range(0, n, bs):
                if step >= total:
                    break
                batch = [examples[j] for j in order[i:i + bs]]
                if len(batch) < ts.min_batch:
                    continue
                with acc.autocast():
                    loss, part = step_fn(batch, step, rng)
                if loss.requires_grad:  # a step function that ran its own backward (GradCache) returns it detached
                    acc.backward(loss / accum if accum > 1 else loss)
                window.append((float(loss.detach()), part))
                if len(window) < accum:
                    continue
                lr = sched.get_last_lr()[0]
                if ts.grad_clip:
                    acc.clip_grad_norm_(params, ts.grad_clip)
                opt.step()
                sched.step()
                opt.zero_grad()
                step_loss = window[0][0] if accum == 1 else sum(x for x, _ in window) / accum
                step_parts = _mean_parts([p for _, p in window]) if window[0][1] else {}
                window.clear()
                losses.append(step_loss)
                parts.append(step_parts)
                step += 1
                bar.update(1)
                now = time.perf_counter()  # after the loss was read: a GPU step has finished
                cost.step_timed(now - t_step, first=step == 1, projected=cost.probe_step_done())
                t_step = now
                log.row(step, step_loss, step_parts, lr, now - t0)
                if step % every == 0 or step == total:
                    _print_progress(step, total, losses[-every:], parts[-every:], time.perf_counter() - t0)
                if save is not None and out is not None and ts.save_every and step % int(ts.save_every) == 0 \
                        and step < total:
                    ckpt = Path(out) / CHECKPOINTS / f"step-{step}"
                    ckpt.mkdir(parents=True, exist_ok=True)
                    save(ckpt)
    finally:
        _BACKWARD[0] = None
        _PROBE[0] = 0
        bar.close()
        log.close()
    if save is not None and out is not None:
        save(Path(out))
    info: dict[str, Any] = {"steps": step, "total": total, "examples": n, "seconds": time.perf_counter() - t0,
                            "losses": losses, "loss_first": losses[:5], "loss_last": losses[-5:]}
    for k in parts[0] if parts else ():
        info[f"{k}_first"] = [p[k] for p in parts[:5]]
        info[f"{k}_last"] = [p[k] for p in parts[-5:]]
    return info


def _print_progress(step: int, total: int, losses: list[float], parts: list[dict[str, float]],
                    seconds: float) -> None:
    from tqdm import tqdm

    line = f"step {step}/{total} loss {sum(losses) / len(losses):.4f}"
    if parts and parts[-1]:
        line += " (" + ", ".join(f"{k} {sum(p[k] for p in parts) / len(parts):.4f}" for k in parts[-1]) + ")"
    tqdm.write(f"{line} {seconds:.0f}s", file=sys.stdout)
    sys.stdout.flush()


def backward(loss) -> None:
    """Back-propagate ``loss`` as the running loop would (``accelerator.backward``: under fp16 the loss
    is scaled by accelerate's GradScaler, which unscales the gradients before clipping and skips a
    step that overflowed), or ``loss.backward()`` outside a loop. A step function that runs its own
    backward (GradCache's loss on the cached representations, the reader's sub-batches) calls this,
    so that it trains in fp16 as the one-graph step does: the gradients it passes on are the scaled ones."""
    (_BACKWARD[0] or (lambda x: x.backward()))(loss)


def rows(batch: Mapping[str, Any], items: Sequence[int]) -> dict[str, Any]:
    """The rows ``items`` (consecutive indices, as :func:`grad_cache_step` hands them out) of a
    tokenized batch: each sub-batch keeps the whole batch's padding, so its inputs are the rows the
    one-graph step encodes."""
    lo, hi = int(items[0]), int(items[-1]) + 1
    return {k: v[lo:hi] for k, v in batch.items()}


def sub_batch_step(towers: Sequence[tuple[Callable[[Mapping[str, Any]], Any], Mapping[str, Any]]], loss_fn,
                   chunk: int):
    """A bi-encoder step at any batch size: ``loss_fn(*reps)`` of each tower's ``encode(batch)`` over its
    tokenized ``batch`` (``towers``: (encode, batch) pairs, e.g. questions and passages). ``chunk`` 0,
    or every batch within one sub-batch: one graph, the loss returned with it (the loop back-propagates
    it: gradient accumulation); else :func:`grad_cache_step` over the batches' rows
    (:func:`rows`; the same gradients to float rounding, the memory of ``chunk`` texts' activations
    instead of the batch's). DPR, BPR and VDR/SVDR train through it (``methods.<m>.grad_cache_chunk``)."""
    sizes = [len(next(iter(batch.values()))) for _, batch in towers]
    if not chunk or all(n <= chunk for n in sizes):
        return loss_fn(*[enc(batch) for enc, batch in towers])
    encs = [lambda items, enc=enc, batch=batch: enc(rows(batch, items)) for enc, batch in towers]
    return grad_cache_step(encs, [range(n) for n in sizes], loss_fn, chunk)


def grad_cache_step(encode, groups: Sequence[Sequence[Any]], loss_fn, chunk: int | Sequence[int]):
    """One GradCache step (Gao et al., 2021): ``encode(items)`` (one callable, or one per group) ->
    a tensor or a tuple of tensors (rows = items) for each group, in sub-batches of ``chunk`` (one size, or one
    per group) without a graph; ``loss_fn(*reps)`` on the
    whole batch (a tuple-valued group is passed as its tuple) and its gradient w.r.t. the
    representations; then every sub-batch re-encoded under the random state of its first pass (the
    CPU's and, where it is in use, the CUDA device's: the same dropout masks) and back-propagated with
    its slice of that gradient (the loss's backward goes through :func:`backward`: under fp16 the
    gradients are the loop's scaled ones). Gradients accumulate in the parameters; returns (detached loss, parts).
    Under a cost probe (``probe_sub_batches`` n, the rehearsal's) each pass over a group runs its first n
    sub-batches only (the others take copies of their representations, so the loss sees the whole batch's
    shapes) and :func:`harness.cost.probe_timed` projects the others' seconds at the run ones' mean.
    With one sub-batch per group nothing is cached: the loss is back-propagated as it is.
    QCR (§3.2), LightRetriever's passages, and DPR, BPR, VDR/SVDR and DensePhrases through
    :func:`sub_batch_step` use it."""
    import torch

    encs = list(encode) if isinstance(encode, (list, tuple)) else [encode] * len(groups)
    chunks = [int(c) for c in chunk] if isinstance(chunk, (list, tuple)) else [int(chunk)] * len(groups)
    if all(len(items) <= c for items, c in zip(groups, chunks)):  # one sub-batch each: the cache would encode twice for nothing
        loss, parts = loss_fn(*[enc(items) for enc, items in zip(encs, groups)])
        backward(loss)
        return loss.detach(), parts
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()

    def state():
        return torch.get_rng_state(), (torch.cuda.get_rng_state() if cuda else None)

    def restore(st) -> None:
        torch.set_rng_state(st[0])
        if st[1] is not None:
            torch.cuda.set_rng_state(st[1])

    probe = _PROBE[0]

    def clock() -> float:   # a probe times sub-batches: a GPU's queued kernels first
        if probe and cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    reps, states, tupled, runs = [], [], [], []
    for enc, items, chunk in zip(encs, groups, chunks):
        outs, st = [], []
        starts = range(0, len(items), chunk)
        run = len(starts) if not probe else min(probe, len(starts))
        t = clock()
        for j, i in enumerate(starts):
            st.append(state())
            if j >= run:   # a probe: the run sub-batches' representations stand in (same shapes)
                outs.append(tuple(o[:len(items[i:i + chunk])] for o in outs[j % run]))
                continue
            with torch.no_grad():
                out = enc(items[i:i + chunk])
            outs.append(out if isinstance(out, tuple) else (out,))
        if run < len(starts):
            cost.probe_timed(clock() - t, run, len(starts))
        runs.append(run)
        tupled.append(isinstance(out, tuple))
        reps.append(tuple(torch.cat(col).detach().requires_grad_() for col in zip(*outs)))
        states.append(st)
    loss, parts = loss_fn(*[r if t else r[0] for r, t in zip(reps, tupled)])
    backward(loss)  # fp16: the loop's loss scale, carried into every sub-batch's gradients below
    for enc, items, rep, st, run, chunk in zip(encs, groups, reps, states, runs, chunks):
        starts = range(0, len(items), chunk)
        t = clock()
        for j, i in enumerate(starts[:run]):
            now = state()
            restore(st[j])
            out = enc(items[i:i + chunk])
            restore(now)
            outs = out if isinstance(out, tuple) else (out,)
            pairs = [(o, r.grad[i:i + chunk]) for o, r in zip(outs, rep) if r.grad is not None]
            if pairs:
                torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        if run < len(starts):
            cost.probe_timed(clock() - t, run, len(starts))
    return loss.detach(), parts
