"""LightRetriever's query-encoding speed (paper Table 1): the timers, the memory-bandwidth bound and
the random paper-shaped models. The method's Table-1 job (``measure.speed``) calls them with the
trained model and its table; ``python -m harness bench lr-query-speed`` (harness/bench/lr_query_speed.py)
with random weights.

LightRetriever (§2.2, "Caching" / "Online serving") replaces the LLM query encoder by a cached
table: every vocabulary token's vector is precomputed, and a query's dense vector is the mean of
its tokens' rows — here ``torch.nn.EmbeddingBag(mode="mean")``. Table 1 times 65,536 MS MARCO
queries at batch sizes 16 ... 8192: tokenization, the full-size encoder (Mistral-7B, EOS pooling)
and the cached lookup without and with GPU.

What is inside each timer (``time.perf_counter``; on CUDA ``torch.cuda.synchronize()`` right
before the start and right before the stop):

* ``time_tokenize``: ``tokenizer(batch, padding=True, truncation=True, max_length=max_len,
  return_tensors="pt")`` for every batch of the query list, nothing else (the paper's
  "Tokenization Time"; special tokens added, as the full-size encoder needs them).
* ``time_full``: per batch, ``model(**inputs)`` (``use_cache=False`` where the model takes it)
  under ``torch.inference_mode()`` followed by ``eos_pool`` (last non-padding hidden state,
  L2-normalised). Tokenisation of the batch and the copy of its tensors to the device happen
  *before* the timer starts; the first
  ``warmup_batches`` batches are run once untimed, then every batch (those included) is timed, so
  a measured figure covers exactly ``len(texts)`` queries. With ``budget_s``, timing stops after
  the first batch that takes the timed total past the budget and the figure is *projected*:
  ``seconds = measured_seconds / queries_timed * len(texts)`` — a linear extrapolation of a
  measured fraction, labelled ``kind="projected"``, never presented as measured.
* ``time_light``: only the calls ``table(input, offsets)`` over all batches, the best (min) of
  ``repeats`` full passes. Token ids come pre-tokenised (tokenisation is reported separately, as
  in the paper) and each batch's flat ``input`` and ``offsets`` tensors are built — and on CUDA
  moved to the device together with the table — before any timer starts.
* ``copy_bandwidth``: one ``dst.copy_(src)`` of ``nbytes`` bytes on the CPU, best of
  ``repeats``; the figure counts the bytes READ (``nbytes`` per copy), not read + written.

The memory-bandwidth bound: a lookup cannot be faster than reading each used token row once from
memory, ``bound_seconds = tokens x H x element_size / copy_bandwidth``. Two caveats, both making
the bound loose rather than tight: a copy also writes what it reads, so bytes-read per second of a
copy is below the machine's pure read bandwidth; and a query set with few distinct tokens keeps
the used rows in cache, where the lookup can beat a DRAM figure (the benchmark therefore also
prints a cache-cold lookup on uniform random ids of the same query lengths, for information).
"""
from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from harness.cost import mem_available
from harness.errors import ConfigError
from harness.methods.lightretriever.ops import eos_pool

PAPER_N_QUERIES = 65_536
PAPER_BATCH_SIZES = (16, 64, 256, 1024, 4096, 8192)
MEMORY_MARGIN = 1.15  # parameter bytes x this + MEMORY_HEADROOM must fit in MemAvailable
MEMORY_HEADROOM = 2 * 2**30  # activations, tokenizer, interpreter


# ---------------------------------------------------------------------------------------------
# paper shapes (shapes only: the models built from them have random weights)
# ---------------------------------------------------------------------------------------------

def _paper_shapes() -> dict[str, Any]:
    """The released configs' shapes of the paper's backbones (config.json of each model)."""
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    return {
        # meta-llama/Llama-3.2-1B: 1.24B parameters (tied embeddings)
        "llama-3.2-1b": LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, head_dim=64, hidden_act="silu",
            max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True,
            bos_token_id=128000, eos_token_id=128001,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192},
        ),
        # mistralai/Mistral-7B-v0.3 (Table 1's backbone): 7.25B parameters
        "mistral-7b": MistralConfig(
            vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128, hidden_act="silu",
            max_position_embeddings=32768, rms_norm_eps=1e-5, sliding_window=None,
            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        # Qwen/Qwen2.5-1.5B: 1.54B parameters (tied embeddings)
        "qwen2.5-1.5b": Qwen2Config(
            vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
            num_attention_heads=12, num_key_value_heads=2, hidden_act="silu",
            max_position_embeddings=131072, rms_norm_eps=1e-6, use_sliding_window=False,
            max_window_layers=21, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
    }


PAPER_SHAPES: dict[str, Any] = _paper_shapes()


# ---------------------------------------------------------------------------------------------
# small pieces
# ---------------------------------------------------------------------------------------------

def cycle_queries(texts: Sequence[str], n: int = PAPER_N_QUERIES) -> list[str]:
    """``texts`` repeated in order until there are ``n`` (Table 1 encodes 65,536 queries)."""
    if not texts:
        raise ValueError("cycle_queries: no query texts to cycle")
    if n < 0:
        raise ValueError(f"cycle_queries: n must be >= 0, got {n}")
    reps, rest = divmod(n, len(texts))
    return list(texts) * reps + list(texts[:rest])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batches(items: Sequence[Any], batch_size: int) -> Iterator[Sequence[Any]]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, len(items), batch_size):
        yield items[start:start + batch_size]


def _param_device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


@contextlib.contextmanager
def _on_device(model: nn.Module, device: torch.device) -> Iterator[nn.Module]:
    """``model`` moved (in place) to ``device`` for the block, then back where it was."""
    home = _param_device(model)
    if home == device or (home.type == device.type == "cuda" and device.index is None):
        yield model
        return
    model.to(device)
    try:
        yield model
    finally:
        model.to(home)


def _model_vocab(model: nn.Module) -> int | None:
    cfg = getattr(model, "config", None)
    return getattr(cfg, "vocab_size", None)


def _accepts(model: nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _model_inputs(model: nn.Module, enc: Mapping[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    """The tokenizer's tensors that ``model.forward`` takes, ids taken modulo the model's vocab
    (a foreign tokenizer's ids must fit the embedding; a no-op for a model's own tokenizer)."""
    ids = enc["input_ids"]
    vocab = _model_vocab(model)
    if vocab is not None and ids.numel() and int(ids.max()) >= vocab:
        ids = ids % vocab
    out = {"input_ids": ids.to(device), "attention_mask": enc["attention_mask"].to(device)}
    if "token_type_ids" in enc and _accepts(model, "token_type_ids"):
        out["token_type_ids"] = enc["token_type_ids"].to(device)
    if _accepts(model, "use_cache"):
        out["use_cache"] = False  # an encoder keeps no KV cache
    return out


def _last_hidden(out: Any) -> Tensor:
    """[B, T, H] from a model output: ``.last_hidden_state``, a tensor, or a tuple's first item."""
    if isinstance(out, Tensor):
        return out
    if getattr(out, "last_hidden_state", None) is not None:
        return out.last_hidden_state
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], Tensor):
        return out[0]
    raise TypeError(f"time_full: cannot find the last hidden states in a {type(out).__name__}")


# ---------------------------------------------------------------------------------------------
# timers
# ---------------------------------------------------------------------------------------------

def time_tokenize(tokenizer: Any, texts: Sequence[str], batch_size: int, *, max_len: int = 512) -> float:
    """Seconds to tokenise ``texts`` in batches of ``batch_size`` (padding=True, truncation at
    ``max_len``, return_tensors="pt"): the paper's "Tokenization Time"."""
    texts = list(texts)
    start = time.perf_counter()
    for batch in _batches(texts, batch_size):
        tokenizer(list(batch), padding=True, truncation=True, max_length=max_len, return_tensors="pt")
    return time.perf_counter() - start


def time_full(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    batch_size: int,
    *,
    device: str | torch.device = "cpu",
    max_len: int = 512,
    budget_s: float | None = None,
    warmup_batches: int = 1,
    sub_batch: int | None = None,
) -> dict[str, Any]:
    """Full-size encoder time for ``texts`` in batches: ``model(**batch)`` + ``eos_pool`` per batch.

    Each batch is tokenised and moved to ``device`` before its timer starts (tokenisation is
    ``time_tokenize``'s figure); ``use_cache=False`` is passed where ``forward`` takes it, and
    ``token_type_ids`` only where it takes them. The model is moved to ``device`` for the call if it is elsewhere
    and moved back afterwards. The first ``warmup_batches`` batches are run once untimed, then all
    batches are timed. If ``budget_s`` is given and the timed total exceeds it, timing stops and
    ``seconds`` is projected linearly: ``measured_seconds / queries_timed * len(texts)``
    (``kind="projected"``); otherwise ``seconds`` is the measured total (``kind="measured"``).
    At least one batch is always timed. ``sub_batch`` (below ``batch_size``): each batch is cut to its
    first ``sub_batch`` queries, warm-up included, and ``seconds`` is projected per query to all
    (``kind="projected"``): the paper rehearsal's probe, where one batch of 8,192 queries through a 1B
    model is hours and more memory than a CPU node has (its per-query cost at the sub-batch, not at the
    batch: a GPU's falls with the batch).
    """
    texts = list(texts)
    if not texts:
        raise ValueError("time_full: no texts")
    if sub_batch is not None and sub_batch < 1:
        raise ValueError(f"time_full: sub_batch must be >= 1, got {sub_batch}")
    dev = torch.device(device)
    batches = list(_batches(texts, batch_size))
    if sub_batch is not None and sub_batch < batch_size:
        batches = [batch[:sub_batch] for batch in batches]
    else:
        sub_batch = None

    def prepare(batch: Sequence[str]) -> dict[str, Tensor]:
        enc = tokenizer(list(batch), padding=True, truncation=True, max_length=max_len, return_tensors="pt")
        return _model_inputs(model, enc, dev)

    measured = 0.0
    queries_timed = 0
    batches_timed = 0
    batch_seconds: list[float] = []
    was_training = model.training
    model.eval()
    try:
        with _on_device(model, dev), torch.inference_mode():
            for batch in batches[:max(0, warmup_batches)]:
                inputs = prepare(batch)
                eos_pool(_last_hidden(model(**inputs)), inputs["attention_mask"])
            for batch in batches:
                inputs = prepare(batch)
                _sync(dev)
                start = time.perf_counter()
                out = model(**inputs)
                eos_pool(_last_hidden(out), inputs["attention_mask"])
                _sync(dev)
                dt = time.perf_counter() - start
                measured += dt
                batch_seconds.append(dt)
                queries_timed += len(batch)
                batches_timed += 1
                if budget_s is not None and measured > budget_s and queries_timed < len(texts):
                    break
    finally:
        model.train(was_training)
    complete = queries_timed == len(texts)
    return {
        "seconds": measured if complete else measured / queries_timed * len(texts),
        "kind": "measured" if complete else "projected",
        "measured_seconds": measured,
        "batch_seconds": batch_seconds,
        "queries": len(texts),
        "queries_timed": queries_timed,
        "batches_timed": batches_timed,
        "batch_size": batch_size,
        "device": str(dev),
        "budget_s": budget_s,
        "warmup_batches": warmup_batches,
        "sub_batch": sub_batch,
        "note": None if complete else (
            f"projected: {measured:.3f} s measured on {queries_timed} of {len(texts)} queries"
            + (f" (the first {sub_batch} of each batch of {batch_size})" if sub_batch else "")
            + ", scaled linearly to all"),
    }


def _table_on(table: nn.EmbeddingBag, device: torch.device) -> nn.EmbeddingBag:
    """``table`` itself if it lives on ``device``, else a copy there (same mode and options)."""
    if table.weight.device == device or (table.weight.device.type == device.type == "cuda" and device.index is None):
        return table
    copy = nn.EmbeddingBag.from_pretrained(
        table.weight.detach().to(device), freeze=True, max_norm=table.max_norm, norm_type=table.norm_type,
        scale_grad_by_freq=table.scale_grad_by_freq, mode=table.mode, sparse=table.sparse,
        include_last_offset=table.include_last_offset, padding_idx=table.padding_idx,
    )
    return copy


def light_inputs(token_ids: Sequence[Sequence[int]], batch_size: int,
                 device: str | torch.device = "cpu") -> list[tuple[Tensor, Tensor]]:
    """Per batch, the flat ``input`` (int64) and ``offsets`` tensors of ``EmbeddingBag``."""
    dev = torch.device(device)
    out = []
    for batch in _batches(token_ids, batch_size):
        lengths = torch.tensor([len(ids) for ids in batch], dtype=torch.long)
        offsets = torch.zeros(len(batch), dtype=torch.long)
        if len(batch) > 1:
            offsets[1:] = torch.cumsum(lengths, 0)[:-1]
        flat = torch.tensor([t for ids in batch for t in ids], dtype=torch.long)
        out.append((flat.to(dev), offsets.to(dev)))
    return out


def time_light(
    table: nn.EmbeddingBag,
    token_ids: Sequence[Sequence[int]],
    batch_size: int,
    *,
    device: str | torch.device = "cpu",
    repeats: int = 3,
) -> dict[str, Any]:
    """Cached-lookup time: only ``table(input, offsets)`` per batch, best (min) of ``repeats``
    passes over all batches. Inputs are built (and, with the table, moved to ``device``) first. On
    the CPU each batch has its own timer and a pass is the sum of its batches (``batch_seconds``: the
    best pass's, one per batch); on a GPU one synchronised timer covers the pass (no batch times).

    Returns seconds, queries, tokens (ids read), bytes_read (= tokens x H x element size of the
    table), distinct_tokens (rows touched: few means they stay in cache), batch_size, device,
    repeats, all pass times and ``batch_seconds``.
    """
    if repeats < 1:
        raise ValueError(f"time_light: repeats must be >= 1, got {repeats}")
    dev = torch.device(device)
    dev_table = _table_on(table, dev)
    inputs = light_inputs(token_ids, batch_size, dev)
    tokens = sum(len(ids) for ids in token_ids)
    hidden = table.embedding_dim
    passes: list[float] = []
    with torch.inference_mode():
        if inputs:  # one untimed call: first-call allocations and kernel selection
            dev_table(*inputs[0])
        per_batch: list[list[float]] = []
        for _ in range(repeats):
            if dev.type == "cpu":
                times = []
                for flat, offsets in inputs:
                    start = time.perf_counter()
                    dev_table(flat, offsets)
                    times.append(time.perf_counter() - start)
                per_batch.append(times)
                passes.append(sum(times))
                continue
            _sync(dev)
            start = time.perf_counter()
            for flat, offsets in inputs:
                dev_table(flat, offsets)
            _sync(dev)
            passes.append(time.perf_counter() - start)
    best = min(range(repeats), key=passes.__getitem__)
    return {
        "seconds": passes[best],
        "batch_seconds": per_batch[best] if per_batch else None,
        "passes": passes,
        "queries": len(token_ids),
        "tokens": tokens,
        "bytes_read": tokens * hidden * table.weight.element_size(),
        "distinct_tokens": len({t for ids in token_ids for t in ids}),
        "hidden": hidden,
        "batch_size": batch_size,
        "device": str(dev),
        "repeats": repeats,
    }


def copy_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Bytes per second READ by ``dst.copy_(src)`` of ``nbytes`` on the CPU (best of ``repeats``).

    Counts ``nbytes`` per copy (what is read, not read + written), the unit of ``bytes_read``.
    """
    if nbytes < 1 or repeats < 1:
        raise ValueError("copy_bandwidth: nbytes and repeats must be >= 1")
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.zeros(nbytes, dtype=torch.uint8)  # written once: its pages are mapped before timing
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return nbytes / best


def gather_bound_seconds(bytes_read: float, bandwidth: float) -> float:
    """The fastest a lookup can be: every used token row read once from memory at ``bandwidth``
    (bytes/s, ``copy_bandwidth``) — ``bytes_read / bandwidth`` seconds."""
    if bandwidth <= 0:
        raise ValueError(f"gather_bound_seconds: bandwidth must be > 0, got {bandwidth}")
    return float(bytes_read) / bandwidth


# ---------------------------------------------------------------------------------------------
# random paper-shaped models
# ---------------------------------------------------------------------------------------------

def dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def param_count(config: Any) -> int:
    """Parameters of the base model (``AutoModel``, no LM head) of ``config``, built on the meta
    device (no memory, well under a second)."""
    from transformers import AutoModel

    with torch.device("meta"):
        model = AutoModel.from_config(config)
    return sum(p.numel() for p in model.parameters())


def fits_in_memory(config: Any, dtype: torch.dtype = torch.float32, *, extra_bytes: int = 0,
                   available: int | None = None) -> tuple[bool, str]:
    """Whether the base model of ``config`` in ``dtype`` fits in RAM, and why (not).

    Needed: parameter bytes x 1.15 + 2 GiB (activations, tokenizer, interpreter) + ``extra_bytes``
    (e.g. the lookup table), against ``available`` (default: /proc/meminfo MemAvailable).
    """
    params = param_count(config)
    param_bytes = params * dtype_size(dtype)
    need = int(param_bytes * MEMORY_MARGIN) + MEMORY_HEADROOM + int(extra_bytes)
    avail = mem_available() if available is None else available
    what = (f"{params / 1e9:.2f}B parameters x {dtype_size(dtype)} B ({str(dtype).removeprefix('torch.')}) = "
            f"{param_bytes / 2**30:.1f} GiB; with margin {need / 2**30:.1f} GiB needed")
    if avail is None:
        return True, f"{what}; available memory unknown (no /proc/meminfo), trying"
    if need > avail:
        return False, f"{what}, only {avail / 2**30:.1f} GiB available (MemAvailable)"
    return True, f"{what}, {avail / 2**30:.1f} GiB available"


def _fill_cheap(model: nn.Module, seed: int = 0, scale: float = 0.02) -> None:
    """Fill every parameter with values from one small random block, tiled (memcpy speed, not
    RNG speed): random-looking, finite, no denormals — enough for timing."""
    gen = torch.Generator().manual_seed(seed)
    block = (torch.rand(1 << 20, generator=gen) * 2 - 1) * scale
    with torch.no_grad():
        for p in model.parameters():
            flat = p.data.view(-1)
            src = block.to(p.dtype)
            for start in range(0, flat.numel(), src.numel()):
                end = min(flat.numel(), start + src.numel())
                flat[start:end].copy_(src[:end - start])


def random_model(name: str, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The base model (LlamaModel, MistralModel, Qwen2Model) of ``PAPER_SHAPES[name]`` with random
    weights, built fast: transformers' ``no_init_weights`` skips the initialisers, then the
    parameters are filled by tiling one small random block. Shapes are the released models';
    the weights are not (speed does not depend on them)."""
    from transformers import AutoModel
    from transformers.initialization import no_init_weights

    if name not in PAPER_SHAPES:
        raise ConfigError(f"unknown paper shape {name!r}; known: {', '.join(PAPER_SHAPES)}")
    config = PAPER_SHAPES[name]
    with no_init_weights():
        model = AutoModel.from_config(config, dtype=dtype)
    _fill_cheap(model)
    return model.eval()


def random_table(vocab: int, hidden: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.EmbeddingBag:
    """An ``EmbeddingBag(vocab, hidden, mode="mean")`` with random values (speed does not depend on them)."""
    table = nn.EmbeddingBag(vocab, hidden, mode="mean", _weight=torch.empty(vocab, hidden, dtype=dtype))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        table.weight.uniform_(-1.0, 1.0, generator=gen)
    table.weight.requires_grad_(False)
    return table


# ---------------------------------------------------------------------------------------------
# Table 1
# ---------------------------------------------------------------------------------------------

def light_token_ids(tokenizer: Any, texts: Sequence[str], vocab: int | None = None) -> list[list[int]]:
    """Each query's token ids WITHOUT special tokens (what the cached table is indexed by), taken
    modulo ``vocab`` when given (a foreign tokenizer's ids must fit the table). Distinct texts are
    tokenised once."""
    distinct = list(dict.fromkeys(texts))
    enc = tokenizer(distinct, add_special_tokens=False)["input_ids"]
    if vocab is not None:
        enc = [[t % vocab for t in ids] for ids in enc]
    by_text = dict(zip(distinct, enc))
    return [by_text[t] for t in texts]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def speed_table(
    texts: Sequence[str],
    *,
    tokenizer: Any,
    full_model: nn.Module | None,
    table: nn.EmbeddingBag,
    batch_sizes: Sequence[int] = PAPER_BATCH_SIZES,
    n_queries: int = PAPER_N_QUERIES,
    max_len: int = 512,
    full_budget_s: float | None = None,
    full_sub_batch: int | None = None,
    gpu: bool = torch.cuda.is_available(),
    light_repeats: int = 3,
    warmup_batches: int = 1,
    bandwidth: float | None = None,
    log: Any = None,
) -> list[dict[str, Any]]:
    """Table 1: one row per batch size for ``texts`` cycled to ``n_queries``.

    Row keys: batch_size, queries, tokenize_s; full_cpu_s, full_cpu_kind ("measured" or
    "projected"), full_cpu_queries_timed, full_sub_batch (the queries timed of each batch where
    ``full_sub_batch`` cut it, else None: :func:`time_full`); full_gpu_s, full_gpu_kind (None without
    GPU); light_cpu_s, light_gpu_s (None without GPU); speedup_cpu (full_cpu / light_cpu), speedup_gpu
    (full_gpu / light_gpu), speedup_gpu_vs_light_cpu (full_gpu / light_cpu); tokens, bytes_read,
    bandwidth (bytes/s read by a CPU copy), bound_s (bytes_read / bandwidth) and light_over_bound
    (light_cpu_s / bound_s), distinct_tokens (table rows touched). ``full_model=None`` leaves the
    full-size fields None. On GPU the model is moved there for its timing and moved back.
    """
    say = log or (lambda msg: None)
    queries = cycle_queries(list(texts), n_queries)
    ids = light_token_ids(tokenizer, queries, table.num_embeddings)
    if bandwidth is None:
        bandwidth = copy_bandwidth()
    rows: list[dict[str, Any]] = []
    for bs in batch_sizes:
        say(f"batch size {bs}: tokenization")
        row: dict[str, Any] = {"batch_size": bs, "queries": len(queries),
                               "tokenize_s": time_tokenize(tokenizer, queries, bs, max_len=max_len)}
        full_cpu = full_gpu = None
        if full_model is not None:
            say(f"batch size {bs}: full-size encoder, CPU"
                + (f" (budget {full_budget_s:g} s, then projected)" if full_budget_s is not None else ""))
            full_cpu = time_full(full_model, tokenizer, queries, bs, device="cpu", max_len=max_len,
                                 budget_s=full_budget_s, warmup_batches=warmup_batches, sub_batch=full_sub_batch)
            if gpu:
                say(f"batch size {bs}: full-size encoder, GPU")
                try:
                    full_gpu = time_full(full_model, tokenizer, queries, bs, device="cuda", max_len=max_len,
                                         budget_s=full_budget_s, warmup_batches=warmup_batches,
                                         sub_batch=full_sub_batch)
                except torch.cuda.OutOfMemoryError:
                    full_gpu = {"seconds": None, "kind": "OOM", "queries_timed": 0}
                    torch.cuda.empty_cache()
        say(f"batch size {bs}: cached lookup")
        light_cpu = time_light(table, ids, bs, device="cpu", repeats=light_repeats)
        light_gpu = time_light(table, ids, bs, device="cuda", repeats=light_repeats) if gpu else None
        bound = gather_bound_seconds(light_cpu["bytes_read"], bandwidth)
        fc = full_cpu["seconds"] if full_cpu else None
        fg = full_gpu["seconds"] if full_gpu else None
        lc = light_cpu["seconds"]
        lg = light_gpu["seconds"] if light_gpu else None
        row.update({
            "full_cpu_s": fc,
            "full_cpu_kind": full_cpu["kind"] if full_cpu else None,
            "full_cpu_queries_timed": full_cpu["queries_timed"] if full_cpu else None,
            "full_sub_batch": full_cpu["sub_batch"] if full_cpu else None,
            "full_gpu_s": fg,
            "full_gpu_kind": full_gpu["kind"] if full_gpu else None,
            "light_cpu_s": lc,
            "light_gpu_s": lg,
            "speedup_cpu": _ratio(fc, lc),
            # batch by batch (the same queries on both sides): a bootstrap interval of speedup_cpu
            "speedup_cpu_batches": (full_cpu["batch_seconds"], light_cpu["batch_seconds"])
            if full_cpu and full_cpu["kind"] == "measured" and light_cpu.get("batch_seconds") else None,
            "speedup_gpu": _ratio(fg, lg),
            "speedup_gpu_vs_light_cpu": _ratio(fg, lc),
            "tokens": light_cpu["tokens"],
            "distinct_tokens": light_cpu["distinct_tokens"],
            "bytes_read": light_cpu["bytes_read"],
            "bandwidth": bandwidth,
            "bound_s": bound,
            "light_over_bound": _ratio(lc, bound),
        })
        rows.append(row)
    return rows
