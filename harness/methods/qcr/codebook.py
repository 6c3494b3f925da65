"""QCR's codebook analyses (QCR paper §5.1 and Appendix A.2), as data and as plots.

QCR encodes every query and document as ``K`` discrete FSQ codes, ids in ``0 .. |C| - 1``
(``|C| = 5**5 = 3125``), written for Lucene as position-prefixed tokens ``0_c52 1_c113 ...`` (§4.2).
This module holds the pure computations behind the paper's analyses and their plots:

* Figure 2, how much queries and documents match: :func:`code_tokens`, :func:`match_counts`,
  :func:`match_count_summary`, :func:`plot_match_counts`;
* Figure 3, Success@100 against batch size and representation length: :func:`grid_summary`,
  :func:`plot_grid`;
* Figure A.2, codebook usage with and without the entropy loss: :func:`usage`, :func:`collapsed`,
  :func:`plot_usage`;
* Table 2, the words with the highest pointwise mutual information with a code: :func:`pmi_words`.

Only numpy and the standard library are used; matplotlib is imported inside the plot functions and
drives the Agg canvas directly (no pyplot, no global backend switch). Logarithms are natural (nats).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "code_tokens", "collapsed", "grid_summary", "match_count_summary", "match_counts", "plot_grid",
    "plot_match_counts", "plot_usage", "pmi_words", "usage",
]

_DPI = 120


def _int_array(values: Any, what: str) -> np.ndarray:
    """``values`` as an integer numpy array; ValueError for non-integral values."""
    arr = np.asarray(values)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind in "iu":
        return arr
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    raise ValueError(f"{what} must hold integer code ids, got dtype {arr.dtype}")


# ----------------------------------------------------------------------------------------------
# Figure 2: matching code tokens between queries and documents
# ----------------------------------------------------------------------------------------------

def code_tokens(codes: np.ndarray, positional: bool = True) -> list[list[str]]:
    """Token strings of a batch of code sequences, as QCR indexes them (§4.2).

    ``codes`` is an integer array ``[N, K]`` (row ``n`` = the ``K`` codes of text ``n``). Row ``n``
    becomes ``[f"{i}_c{codes[n, i]}" for i in range(K)]`` when ``positional`` (the position ``i`` is
    0-based, so ``0_c52 1_c113 ...``), else ``[f"c{codes[n, i]}" for i in range(K)]``. Raises
    ValueError when ``codes`` is not 2-D or holds negative or non-integral values.
    """
    arr = _int_array(codes, "codes")
    if arr.ndim != 2:
        raise ValueError(f"codes must be a 2-D array [N, K], got shape {arr.shape}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"codes must be non-negative code ids, found {int(arr.min())}")
    if positional:
        return [[f"{i}_c{c}" for i, c in enumerate(row)] for row in arr.tolist()]
    return [[f"c{c}" for c in row] for row in arr.tolist()]


def match_counts(query_tokens: Sequence[Sequence[str]], doc_tokens: Sequence[Sequence[str]]) -> np.ndarray:
    """Number of matching code tokens of each (query, document) pair, pairs aligned by index.

    ``match_counts(Q, D)[i] = sum over the tokens t of Q[i], with multiplicity, of [t in set(D[i])]``:
    every occurrence of a query token counts once if the token occurs anywhere in document ``i``
    (however often it occurs there). This is the number of query terms that contribute to a
    term-matching score such as Eq. 6 / BM25. With positional tokens (:func:`code_tokens`) each
    token of a length-``K`` sequence is distinct, so the count is the number of positions
    ``i < K`` where query and document hold the same code; with non-positional tokens a code shared at
    different positions also matches, and a code repeated in the query counts once per repetition.
    Returns an int64 array of length ``len(query_tokens)``; ValueError when the lengths differ.
    """
    if len(query_tokens) != len(doc_tokens):
        raise ValueError(f"match_counts needs aligned pairs: {len(query_tokens)} queries "
                         f"but {len(doc_tokens)} documents")
    out = np.zeros(len(query_tokens), dtype=np.int64)
    for i, (q, d) in enumerate(zip(query_tokens, doc_tokens)):
        if isinstance(q, str) or isinstance(d, str):
            raise TypeError(f"pair {i}: expected sequences of tokens, got a bare string")
        dset = set(d)
        out[i] = sum(1 for t in q if t in dset)
    return out


def match_count_summary(groups: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Per-group statistics of match counts (Figure 2), e.g. groups positive / hard_negative / random.

    For each group (in the mapping's order) of non-negative integer counts ``x``:
    ``n`` = len(x); ``mean``; ``median``; ``std`` (population, ddof = 0); ``p10`` and ``p90``
    (numpy's default linear-interpolation percentiles); ``histogram`` = {``bin_edges``, ``counts``,
    ``fractions``}, with integer bins shared by all groups: ``bin_edges = [0, 1, ..., M + 1]``
    where ``M`` is the largest count over all groups, bin ``k`` = ``[k, k + 1)`` holds the pairs with
    exactly ``k`` matches, ``counts[k]`` = their number and ``fractions[k] = counts[k] / n``.
    An empty group has ``n = 0``, statistics ``None`` and all-zero counts. Values are plain Python
    numbers (JSON-ready). ValueError for negative or non-integral counts.
    """
    arrays = {}
    for name, values in groups.items():
        arr = _int_array(values, f"match counts of group {name!r}").ravel()
        if arr.size and arr.min() < 0:
            raise ValueError(f"match counts of group {name!r} must be non-negative, found {int(arr.min())}")
        arrays[name] = arr
    top = max((int(a.max()) for a in arrays.values() if a.size), default=0)
    edges = list(range(top + 2))
    out: dict[str, dict[str, Any]] = {}
    for name, arr in arrays.items():
        counts = np.bincount(arr, minlength=top + 1)[: top + 1] if arr.size else np.zeros(top + 1, np.int64)
        n = int(arr.size)
        stats: dict[str, Any] = {"n": n}
        if n:
            stats.update(mean=float(arr.mean()), median=float(np.median(arr)), std=float(arr.std()),
                         p10=float(np.percentile(arr, 10)), p90=float(np.percentile(arr, 90)))
        else:
            stats.update(mean=None, median=None, std=None, p10=None, p90=None)
        stats["histogram"] = {"bin_edges": edges, "counts": [int(c) for c in counts],
                              "fractions": [float(c) / n if n else 0.0 for c in counts]}
        out[name] = stats
    return out


# ----------------------------------------------------------------------------------------------
# Figure A.2: codebook usage
# ----------------------------------------------------------------------------------------------

#: code ids counted at a time by :func:`usage` (MS MARCO's 8.8M x 250 uint16 codes as int64 were 17.7 GB)
_COUNT_BLOCK = 1 << 24


def usage(indices: np.ndarray, codebook_size: int) -> dict[str, Any]:
    """Codebook usage of a set of code ids (any shape; every element is one code occurrence).

    With ``n_c`` the number of occurrences of code ``c``, ``n = sum_c n_c`` and ``p_c = n_c / n``:
    ``n``; ``codebook_size`` (``|C|``); ``used`` = #{c : n_c > 0}; ``fraction_used = used / |C|``;
    ``entropy`` = H = -sum_{c: p_c > 0} p_c ln p_c, in nats; ``perplexity = exp(H)`` (the number of
    equally used codes with the same entropy; ``|C|`` when usage is uniform); ``perplexity_ratio =
    perplexity / |C|``; ``max_entropy = ln |C|``; ``top_share = max_c p_c``; ``counts`` = the
    non-zero ``n_c`` sorted descending (a list of length ``used``). Raises ValueError for an empty
    input, ``codebook_size < 1``, or any id outside ``[0, codebook_size)``.
    """
    if int(codebook_size) != codebook_size or codebook_size < 1:
        raise ValueError(f"codebook_size must be a positive integer, got {codebook_size!r}")
    codebook_size = int(codebook_size)
    arr = _int_array(indices, "indices").ravel()
    if arr.size == 0:
        raise ValueError("usage of an empty set of code ids is undefined")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= codebook_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"code id {bad} is outside the codebook [0, {codebook_size}) "
                         f"(ids seen range over [{lo}, {hi}])")
    freq = np.zeros(codebook_size, np.int64)
    for a in range(0, arr.size, _COUNT_BLOCK):   # bincount copies its input to int64: a block at a time
        freq += np.bincount(arr[a:a + _COUNT_BLOCK], minlength=codebook_size)
    used = freq[freq > 0]
    n = int(arr.size)
    p = used / n
    entropy = float(-(p * np.log(p)).sum())
    entropy = max(entropy, 0.0)  # -0.0 when a single code is used
    perplexity = float(math.exp(entropy))
    return {
        "n": n,
        "codebook_size": codebook_size,
        "used": int(used.size),
        "fraction_used": used.size / codebook_size,
        "entropy": entropy,
        "max_entropy": math.log(codebook_size),
        "perplexity": perplexity,
        "perplexity_ratio": perplexity / codebook_size,
        "top_share": float(used.max()) / n,
        "counts": [int(c) for c in np.sort(used)[::-1]],
    }


def collapsed(u: Mapping[str, Any], threshold: float) -> bool:
    """True when usage ``u`` (from :func:`usage`) has collapsed: ``perplexity / codebook_size < threshold``."""
    return u["perplexity"] / u["codebook_size"] < threshold


# ----------------------------------------------------------------------------------------------
# Table 2: words with the highest PMI with a code
# ----------------------------------------------------------------------------------------------

def pmi_words(doc_codes: Sequence[Iterable[int]], doc_words: Sequence[Iterable[str]],
              codes: Sequence[int] | None = None, top: int = 25, min_count: int = 5,
              n_codes: int = 4) -> dict[int, list[tuple[str, float]]]:
    """Words with the highest pointwise mutual information with each of some codes (Table 2).

    Document-level co-occurrence: document ``i`` has the codes ``set(doc_codes[i])`` and the words
    ``set(doc_words[i])`` (each distinct code and word counts once per document). With ``N`` the
    number of documents, ``N_c``, ``N_w`` the numbers of documents containing code ``c`` / word ``w``
    and ``N_wc`` those containing both, probabilities are over documents (``p(c) = N_c / N``,
    ``p(w) = N_w / N``, ``p(w, c) = N_wc / N``) and

        PMI(w, c) = ln( p(w, c) / (p(w) p(c)) ) = ln( N_wc N / (N_w N_c) )    (natural log, nats).

    Words in fewer than ``min_count`` documents are ignored, as are pairs that never co-occur
    (PMI = -inf). The codes analysed are ``codes`` in the given order, or, when ``None``, the
    ``n_codes`` codes in the most documents (ties by smaller id). For each, the result lists the
    ``top`` words as ``(word, pmi)`` by PMI descending, ties by word ascending (a code in no document
    gets ``[]``). The maximum PMI of code ``c`` is ``ln(N / N_c)``, reached by every word that occurs
    only alongside ``c``. ``doc_codes`` and ``doc_words`` are aligned by index (ValueError otherwise)
    and are read twice when ``codes`` is ``None``.
    """
    if len(doc_codes) != len(doc_words):
        raise ValueError(f"pmi_words needs aligned documents: {len(doc_codes)} code lists "
                         f"but {len(doc_words)} word lists")
    if top < 0 or n_codes < 0:
        raise ValueError(f"top and n_codes must be non-negative, got top={top}, n_codes={n_codes}")

    def doc_sets():
        for i, (cs, ws) in enumerate(zip(doc_codes, doc_words)):
            if isinstance(ws, str):
                raise TypeError(f"document {i}: doc_words must hold iterables of words, got a bare string")
            yield {int(c) for c in cs}, set(ws)

    n_docs = len(doc_codes)
    code_df: Counter[int] = Counter()
    word_df: Counter[str] = Counter()
    joint: dict[int, Counter[str]] = {}
    chosen = None if codes is None else [int(c) for c in codes]
    if chosen is not None:
        joint = {c: Counter() for c in chosen}
    for cset, wset in doc_sets():
        code_df.update(cset)
        word_df.update(wset)
        if chosen is not None:
            for c in cset & joint.keys():
                joint[c].update(wset)
    if chosen is None:
        chosen = [c for c, _ in sorted(code_df.items(), key=lambda kv: (-kv[1], kv[0]))[:n_codes]]
        joint = {c: Counter() for c in chosen}
        for cset, wset in doc_sets():
            for c in cset & joint.keys():
                joint[c].update(wset)

    out: dict[int, list[tuple[str, float]]] = {}
    for c in chosen:
        n_c = code_df.get(c, 0)
        scored = []
        for w, n_wc in joint[c].items():
            n_w = word_df[w]
            if n_w < min_count:
                continue
            # int / int is correctly rounded, so equal ratios give identical PMIs (exact ties).
            scored.append((w, math.log((n_wc * n_docs) / (n_w * n_c))))
        scored.sort(key=lambda wp: (-wp[1], wp[0]))
        out[c] = scored[:top]
    return out


# ----------------------------------------------------------------------------------------------
# Figure 3: a metric over batch size x representation length
# ----------------------------------------------------------------------------------------------

def grid_summary(points: Mapping[tuple[int, int], float]) -> dict[str, Any]:
    """A metric over (batch size, representation length) as a grid (Figure 3).

    ``points`` maps ``(batch_size, length)`` to the metric value (e.g. Success@100). Returns
    ``{"batch_sizes": sorted distinct batch sizes, "lengths": sorted distinct lengths,
    "values": values}`` where ``values[j][i]`` is the value at ``(batch_sizes[i], lengths[j])``
    (one row per length, one column per batch size) and ``None`` where that pair is missing (or its
    value is ``None``).
    """
    batch_sizes = sorted({int(b) for b, _ in points})
    lengths = sorted({int(k) for _, k in points})
    lookup = {(int(b), int(k)): v for (b, k), v in points.items()}
    values = [[None if lookup.get((b, k)) is None else float(lookup[(b, k)]) for b in batch_sizes]
              for k in lengths]
    return {"batch_sizes": batch_sizes, "lengths": lengths, "values": values}


# ----------------------------------------------------------------------------------------------
# Plots
# ----------------------------------------------------------------------------------------------

def _figure(width: float = 7.0, height: float = 4.5):
    """A matplotlib Figure on an Agg canvas (no pyplot state, no backend switch) and its axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=_DPI)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=_DPI)
    return path


def plot_match_counts(summary: Mapping[str, Mapping[str, Any]], path: str | Path, title: str) -> Path:
    """Figure 2: per group (from :func:`match_count_summary`), the fraction of (query, document)
    pairs with each number of matching code tokens, as overlaid step lines; the legend gives each
    group's n and mean. Writes a PNG at ``path`` and returns it."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure()
    for name, stats in summary.items():
        hist = stats["histogram"]
        ks = hist["bin_edges"][:-1]
        mean = "n/a" if stats["mean"] is None else f"{stats['mean']:.2f}"
        ax.step(ks, hist["fractions"], where="mid", linewidth=1.6,
                label=f"{name.replace('_', ' ')} (n={stats['n']}, mean={mean})")
    ax.set_xlabel("number of matching code tokens between query and document")
    ax.set_ylabel("fraction of (query, document) pairs")
    ax.set_title(f"Matching code tokens between queries and documents\n{title}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(left=-0.5)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_usage(usages: Mapping[str, Mapping[str, Any]], path: str | Path, title: str) -> Path:
    """Figure A.2: per label (e.g. "documents, entropy loss"), the share of code occurrences of each
    used code, sorted descending, against its rank (log y), from :func:`usage`; the legend gives the
    perplexity and codes used, a dashed line the uniform share 1 / |C|. Writes a PNG and returns it."""
    fig, ax = _figure()
    sizes = set()
    for label, u in usages.items():
        counts = np.asarray(u["counts"], dtype=float)
        shares = counts / u["n"]
        ranks = np.arange(1, len(shares) + 1)
        ax.plot(ranks, shares, linewidth=1.4,
                label=f"{label} (perplexity {u['perplexity']:.0f} / {u['codebook_size']}, "
                      f"{u['used']} codes used)")
        sizes.add(int(u["codebook_size"]))
    for size in sorted(sizes):
        ax.axhline(1.0 / size, color="grey", linestyle="--", linewidth=1,
                   label=f"uniform over |C| = {size}")
    ax.set_yscale("log")
    ax.set_xlabel("code rank (codes sorted by frequency, most frequent first)")
    ax.set_ylabel("share of code occurrences")
    ax.set_title(f"Codebook usage (sorted code frequencies)\n{title}")
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    return _save(fig, path)


def plot_grid(grid: Mapping[str, Any], path: str | Path, title: str, metric: str = "Success@100") -> Path:
    """Figure 3: ``metric`` against batch size (log2 x axis), one line per representation length,
    each point annotated with its value, from :func:`grid_summary` (missing cells are left out).
    Writes a PNG and returns it."""
    fig, ax = _figure()
    batch_sizes = list(grid["batch_sizes"])
    for length, row in zip(grid["lengths"], grid["values"]):
        xs = [b for b, v in zip(batch_sizes, row) if v is not None]
        ys = [v for v in row if v is not None]
        if not xs:
            continue
        (line,) = ax.plot(xs, ys, marker="o", linewidth=1.4, label=f"length K = {length}")
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.3f}", (x, y), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=8, color=line.get_color())
    if batch_sizes and min(batch_sizes) > 0:
        ax.set_xscale("log", base=2)
    ax.set_xticks(batch_sizes)
    ax.set_xticks([], minor=True)
    ax.set_xticklabels([str(b) for b in batch_sizes])
    ax.set_xlabel("training batch size")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} by batch size and representation length\n{title}")
    ax.margins(x=0.06, y=0.12)
    ax.grid(alpha=0.3)
    if grid["lengths"]:
        ax.legend(title="representation length")
    return _save(fig, path)
