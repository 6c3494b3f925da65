"""QCR's measure jobs: Figure 2 (matching code tokens), Figure A.2 (codebook usage) and Table 2 (PMI
words per code) of the analysis job; Figure 3 (Success@100 over batch size x K); and the efficiency
figures the paper lacks (index bytes, build seconds, query latency against BM25 and DPR)."""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Query, store
from harness.errors import ConfigError
from harness.indexes.lucene import LUCENE_DIR, LuceneIndex, analyze_words
from harness.io import write_json
from harness.meta import read_meta
from harness.methods.base import Context
from harness.methods.qcr.codebook import (
    code_tokens,
    collapsed,
    grid_summary,
    match_count_summary,
    match_counts,
    plot_grid,
    plot_match_counts,
    plot_usage,
    pmi_words,
    usage,
)
from harness.methods.qcr.index import WORDS_BLOCK, aligned_texts, code_strings, load_codes, load_lucene
from harness.methods.qcr.model import QCRModel
from harness.methods.qcr.search import distance_matrix, encode_queries, first_stage_depth, rescore_run
from harness.methods.qcr.settings import CODES_FILE, codebook_size, codes_k, grid_point, settings
from harness.progress import chunks
from harness.runs import read_run
from harness.timing import PROTOCOLS, run_protocol
from harness.figures import record as _metric


def _usage_values(u: Mapping[str, Any], threshold: float) -> dict[str, tuple[float, str, str]]:
    return {"codes_used": (u["used"], "count", "distinct codes used"),
            "fraction_used": (u["fraction_used"], "ratio", "distinct codes used / |C|"),
            "perplexity": (u["perplexity"], "count", "exp(entropy) of the code distribution"),
            "perplexity_ratio": (u["perplexity_ratio"], "ratio", "perplexity / |C|"),
            "top_share": (u["top_share"], "ratio", "share of the most frequent code"),
            "collapsed": (float(collapsed(u, threshold)), "bool", f"perplexity / |C| < {threshold}")}


# --------------------------------------------------------------------------------------------
# analysis: Figure 2, Figure A.2, Table 2


def analysis(cfg: Mapping[str, Any], s: Mapping[str, Any], dataset: str | None, inputs: Mapping[str, Path],
             out: Path, *, noent: str | None) -> dict[str, Any]:
    """Figure 2 (matching code tokens: positive, BM25 hard negative, random document), Figure A.2
    (codebook usage of documents and queries, with and without the entropy loss: the variant
    ``noent``) and Table 2 (words with the highest PMI per code), as metrics files and PNGs in ``out``."""
    d = str(dataset)
    title = f"QCR, profile {cfg['profile']}, {d}"
    model = QCRModel.load(inputs["model"])
    size = codebook_size(model.s["levels"])
    doc_codes, docids = load_codes(inputs["index"])
    all_q = store.read_queries(inputs["data"], "test")
    all_codes = encode_queries(model, s, [q.text for q in all_q])   # Figure 2's sample and Figure A.2's usage
    pairs = _fig2(cfg, s, d, title, inputs, out, doc_codes, docids, all_q, all_codes)
    _fig_a2(s, d, title, inputs, out, size, doc_codes, all_q, all_codes, noent)
    _table2(s, d, title, inputs, out, doc_codes, docids)
    return {"pairs": pairs, "figures": ["fig2.png", "figA2.png"], "table": "table2.md"}


def _fig2(cfg: Mapping[str, Any], s: Mapping[str, Any], d: str, title: str, inputs: Mapping[str, Path],
          out: Path, doc_codes: np.ndarray, docids: Sequence[str], all_q: Sequence[Query], all_codes: np.ndarray
          ) -> int:
    """Figure 2 on a seeded sample of the questions whose first gold passage is indexed; returns the
    sample size."""
    a = s["analysis"]
    row_of = {x: i for i, x in enumerate(docids)}
    code_of = {q.id: c for q, c in zip(all_q, all_codes)}
    queries = [q for q in all_q if q.gold and q.gold[0] in row_of]
    rng = random.Random(cfg["seed"])
    sample = sorted(rng.sample(range(len(queries)), min(a["pairs"], len(queries))))
    qs = [queries[i] for i in sample]
    qcodes = np.array([code_of[q.id] for q in qs]).reshape(len(qs), -1)
    run = read_run(inputs["bm25"] / f"{s['words_system']}.trec")
    pos, hard, rand = [], [], []
    for q in qs:
        gold = set(q.gold)
        pos.append(row_of[q.gold[0]])
        cands = [x for x, _ in run.get(q.id, [])[: a["hard_negative_depth"]] if x not in gold and x in row_of]
        hard.append(row_of[rng.choice(cands)] if cands else None)
        r = rng.randrange(len(docids))
        while docids[r] in gold and len(docids) > 1:
            r = rng.randrange(len(docids))
        rand.append(r)
    qt = code_tokens(qcodes, positional=s["positional"])
    dt = code_tokens(doc_codes, positional=s["positional"])
    groups = {}
    for name, rows in (("positive", pos), ("hard", hard), ("random", rand)):
        keep = [i for i, r in enumerate(rows) if r is not None]
        groups[name] = match_counts([qt[i] for i in keep], [dt[rows[i]] for i in keep])
    summ = match_count_summary(groups)
    for name, sm in summ.items():
        write_json(out / f"qcr.fig2-{name}.json", _metric(f"qcr.fig2-{name}", d, {
            "mean": (sm["mean"], "count", "mean number of query code tokens found in the document"),
            "median": (sm["median"], "count", "median number of matching code tokens"),
            "p90": (sm["p90"], "count", "90th percentile of matching code tokens"),
            "pairs": (sm["n"], "count", "query-document pairs")}, histogram=sm["histogram"],
            positional=s["positional"]))
    plot_match_counts(summ, out / "fig2.png", title)
    return len(qs)


def _fig_a2(s: Mapping[str, Any], d: str, title: str, inputs: Mapping[str, Path], out: Path, size: int,
            doc_codes: np.ndarray, all_q: Sequence[Query], all_codes: np.ndarray, noent: str | None) -> None:
    """Figure A.2: codebook usage of documents and queries (and of the no-entropy variant's)."""
    usages = {"documents, entropy loss": usage(doc_codes.ravel(), size),
              "queries, entropy loss": usage(all_codes.ravel(), size)}
    systems = {"qcr.usage-docs": "documents, entropy loss", "qcr.usage-queries": "queries, entropy loss"}
    if noent:
        m2 = QCRModel.load(inputs["noent_model"])
        usages["documents, no entropy loss"] = usage(load_codes(inputs["noent_index"])[0].ravel(), size)
        noent_q = encode_queries(m2, s, [q.text for q in all_q])
        usages["queries, no entropy loss"] = usage(noent_q.ravel(), size)
        systems[f"qcr.{noent}-usage-docs"] = "documents, no entropy loss"
        systems[f"qcr.{noent}-usage-queries"] = "queries, no entropy loss"
    for system, label in systems.items():
        u = usages[label]
        write_json(out / f"{system}.json", _metric(system, d, _usage_values(u, s["usage_threshold"]),
                                                   label=label, counts=u["counts"][:200]))
        if collapsed(u, s["usage_threshold"]):
            print(f"WARNING: {system}: codebook collapse, perplexity {u['perplexity']:.1f} of |C| = {size}")
    plot_usage(usages, out / "figA2.png", title)


def _no_association(words: Sequence[tuple[str, float]]) -> str:
    """Why a code's word list says nothing, or ''. Its words come by PMI descending, ties by word: when
    the highest is not above 0 (PMI ln(N_wc N / (N_w N_c)), 0 for every word of a code in every
    document), no word co-occurs with the code more than chance, and the list is ties in word order."""
    if words and words[0][1] > 1e-9:
        return ""
    return ("no word co-occurs with it more than chance (every PMI <= 0, as for a code in every document, "
            "a collapsed codebook's); its words are ties, listed by word")


class _Reread:
    """A sequence of ``n`` items made anew each time it is iterated (``make``): what pmi_words reads
    twice without a corpus's worth of them held."""

    def __init__(self, n: int, make) -> None:
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(self.make())


def _table2(s: Mapping[str, Any], d: str, title: str, inputs: Mapping[str, Path], out: Path,
            doc_codes: np.ndarray, docids: Sequence[str]) -> None:
    """Table 2: the words with the highest document-level PMI per code (metrics files and table2.md)."""
    a = s["analysis"]
    # every document's code and word sets, read as pmi_words iterates them (twice): at MS MARCO's 8.8M
    # passages the lists of sets and analysed words were ~120 GB
    rows = _Reread(len(docids), lambda: (r for b in range(0, len(doc_codes), WORDS_BLOCK)
                                         for r in doc_codes[b:b + WORDS_BLOCK].tolist()))
    words = _Reread(len(docids), lambda: (w for block in chunks(aligned_texts(inputs["data"], docids, title=False),
                                                                WORDS_BLOCK)
                                          for w in analyze_words(block)))
    pmi = pmi_words(rows, words, top=a["pmi_top"], min_count=a["pmi_min_count"], n_codes=a["pmi_codes"])
    lines = [f"# Table 2 (measured): words with the highest PMI per code, {title}", ""]
    for rank, (c, ws) in enumerate(pmi.items(), 1):
        listed = ", ".join(f"{w}: {p:.2f}" for w, p in ws)
        flat = _no_association(ws)
        if flat:
            print(f"WARNING: qcr.pmi-{rank}: code {c} {flat}")
        write_json(out / f"qcr.pmi-{rank}.json", _metric(f"qcr.pmi-{rank}", d, {
            "code": (int(c), "count", "code id (by document frequency rank)"),
            "top_pmi": (ws[0][1] if ws else float("nan"), "none", "highest PMI (nats); words: " + listed)},
            words=ws, note="document-level PMI, natural log; words are Lucene-analysed (stemmed) terms"
                           + (f"; {flat}" if flat else "")))
        lines.append(f"- **code {c}**: " + (f"*{flat}*: " if flat else "") + listed)
    (out / "table2.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Figure 3


def fig3(cfg: Mapping[str, Any], dataset: str | None, grid_names: Sequence[str], inputs: Mapping[str, Path],
         out: Path) -> dict[str, Any]:
    """Figure 3: Success@100 of the grid models (batch size x K), evaluated as the evaluate stage does."""
    from harness.evaluate.run import evaluate_run

    measure = "Success@100"
    points = {}
    for g in grid_names:
        res = evaluate_run(cfg, str(dataset), inputs[f"run_{g}"] / f"qcr.{g}.trec")
        if measure not in res["measures"]:
            raise ConfigError(f"Figure 3 needs {measure} in evaluate.ir_measures (dataset {dataset})")
        b, k = grid_point(settings(cfg), g)
        points[(b, k)] = res["measures"][measure]
        write_json(out / f"qcr.fig3-{g.removeprefix('grid-')}.json", _metric(
            f"qcr.fig3-{g.removeprefix('grid-')}", str(dataset),
            {"success100": (points[(b, k)], "ratio", f"{measure} of model {g} (evaluated as the evaluate stage does)"),
             "batch_size": (b, "count", "batch size"), "codes": (k, "count", "K")}))
    grid = grid_summary(points)
    write_json(out / "qcr.fig3.json", {"system": "qcr.fig3", "dataset": dataset, "measure": measure,
                                       "grid": grid, "values": {}})
    plot_grid(grid, out / "fig3.png", f"QCR, profile {cfg['profile']}, {dataset}", metric=measure)
    return {"figures": ["fig3.png"]}


# --------------------------------------------------------------------------------------------
# efficiency


def _lucene_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in (Path(folder) / LUCENE_DIR).rglob("*") if p.is_file())


def _timed_systems(cfg: Mapping[str, Any], s: Mapping[str, Any], d: str, inputs: Mapping[str, Path], k: int,
                   model: QCRModel, dist: np.ndarray) -> dict[str, tuple[Any, Any]]:
    """System -> (encode, search) callables of the latency protocol: QCR codes, QCR + rescoring,
    BM25 and (where the plan gave its model) DPR."""
    ms = model.s
    size = codebook_size(ms["levels"])
    doc_codes, docids = load_codes(inputs["index"])
    row_of = {x: i for i, x in enumerate(docids)}
    codes_idx = load_lucene(inputs["index"], s)
    depth = first_stage_depth(s, k, len(docids))

    def enc_codes(texts, _o):
        c = encode_queries(model, s, texts)
        return c, code_strings(c, [str(i) for i in range(len(texts))], k=codes_k(ms), size=size,
                               positional=s["positional"])

    def search_codes(e, kk, _o):
        return codes_idx.search(e[1], kk)

    def search_rescore(e, kk, _o):
        deep = codes_idx.search(e[1], depth)
        return rescore_run(deep, {str(i): c for i, c in enumerate(e[0])}, doc_codes, row_of, dist,
                           int(s["rescore_depth"]), kk)

    bm = cfg["methods"]["bm25"]
    bm25 = LuceneIndex(inputs["bm25_index"] / LUCENE_DIR, "bm25", k1=bm.get("k1", 0.9), b=bm.get("b", 0.4))
    systems = {"qcr.eff-codes": (enc_codes, search_codes), "qcr.eff-rescore": (enc_codes, search_rescore),
               "qcr.eff-bm25": (lambda t, o: list(t), lambda e, kk, o: bm25.search(e, kk))}
    if "dpr_model" in inputs:
        from harness.methods import dpr

        dsearch = dpr.Searcher(Context(cfg, "dpr", d), inputs["dpr_index"], inputs["dpr_model"])
        systems["qcr.eff-dpr"] = (lambda t, o: dsearch.encode(t), lambda e, kk, o: dsearch.search(e, kk))
    return systems


def _index_sizes(inputs: Mapping[str, Path], dist: np.ndarray) -> dict[str, tuple[int, Any, str]]:
    """System -> (index bytes, build seconds or None, what the bytes are)."""
    sizes = {"qcr.eff-codes": (_lucene_bytes(inputs["index"]), read_meta(inputs["index"]).get("build_seconds"),
                               "Lucene index of the code strings (codes.npy for rescoring not counted)"),
             "qcr.eff-words-index": (_lucene_bytes(inputs["words_index"]),
                                     read_meta(inputs["words_index"]).get("build_seconds"),
                                     "Lucene index of codes + words in one document"),
             "qcr.eff-rescore": (int((inputs["index"] / CODES_FILE).stat().st_size) + dist.nbytes, None,
                                 "codes.npy of the corpus + the |C| x |C| float32 distance matrix"),
             "qcr.eff-bm25": (_lucene_bytes(inputs["bm25_index"]), read_meta(inputs["bm25_index"]).get("build_seconds"),
                              "Lucene index of the words (BM25)")}
    if "dpr_index" in inputs:
        from harness.indexes.faiss_dense import INDEX_FILE

        sizes["qcr.eff-dpr"] = (int((inputs["dpr_index"] / INDEX_FILE).stat().st_size),
                                read_meta(inputs["dpr_index"]).get("build_seconds"),
                                "faiss Flat index of the passage vectors (build seconds include encoding)")
    return sizes


def efficiency(cfg: Mapping[str, Any], s: Mapping[str, Any], dataset: str | None, inputs: Mapping[str, Path],
               out: Path) -> dict[str, Any]:
    """What the paper lacks: index bytes and build seconds of the code index, the codes + words index,
    the word (BM25) index and DPR's Flat index on one corpus; query latency (encoding + search, one
    question per call, protocol qcr-latency) of QCR, QCR + rescoring, BM25 and DPR."""
    d = str(dataset)
    protocol = PROTOCOLS.get("qcr-latency")
    k = int(cfg["evaluate"]["depth"])
    queries = [q.text for q in store.read_queries(inputs["data"], "test")]
    model = QCRModel.load(inputs["model"])
    dist = distance_matrix(model.s["levels"])
    systems = _timed_systems(cfg, s, d, inputs, k, model, dist)
    sizes = _index_sizes(inputs, dist)
    timing = {}
    for name, (enc, srch) in systems.items():
        res = run_protocol(protocol, queries, encode=enc, search=srch, k=k, device="cpu",
                           max_queries=s["timing_queries"])
        timing[name] = res
    for name in dict.fromkeys([*sizes, *systems]):
        values: dict[str, tuple[float, str, str]] = {}
        if name in sizes:
            nbytes, secs, what = sizes[name]
            values["index_bytes"] = (nbytes, "B", what)
            values["index_mb"] = (nbytes / 1e6, "MB", what)
            if secs is not None:
                values["build_seconds"] = (round(float(secs), 4), "s", "index build (from the index's meta.json)")
        extra: dict[str, Any] = {}
        if name in timing:
            r = timing[name]
            values["query_ms"] = (r.summary["encode+search"]["mean"] * 1e3, "ms",
                                  f"{protocol.inside_timer['encode+search']}; mean over {r.queries} questions")
            extra = {"timing": r.to_dict()}
        write_json(out / f"{name}.json", _metric(name, d, values, protocol=protocol.name, **extra))
        print(f"{name}/{d}: " + ", ".join(f"{k_} {v[0]:,.3f}" for k_, v in values.items()))
    return {"protocol": protocol.name}
