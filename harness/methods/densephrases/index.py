"""DensePhrases' phrase index (§5, App. E): the filter threshold tuned on dev questions, the phrase
dump of every kept token vector (harness/indexes/phrase_dump.py) and the phrase indexes over it
(harness/indexes/phrase.py): the main spec, the ``index_variants`` and the D_small index."""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.cost import startup_done
from harness.datasets import Doc, store
from harness.methods.base import Context
from harness.methods.densephrases.model import (PhraseModel, Scored, Window, _pad, rc_predict, score_passages,
                                                 windows)
from harness.methods.densephrases.settings import DUMP_DIR, NAME, em_of, prepare, settings
from harness.methods.densephrases.train import _align, dev_questions
from harness.models.runtime import encode_device, torch_for
from harness.job import Job
from harness.progress import chunks


# --------------------------------------------------------------------------------------------
# the filter threshold (App. E), tuned on dev questions


def gold_tokens(scored: Sequence[Scored], answers: Sequence[str]) -> list[tuple[int, int, int]]:
    """(window, start token, end token) of each window of a passage's scored windows that covers the
    first occurrence of an answer in the passage's text (on word boundaries, as training aligns it)."""
    from harness.methods.reader import find_answer

    span = find_answer(scored[0].text, list(answers)) if scored else None
    if span is None:
        return []
    out = []
    for w, sc in enumerate(scored):
        n = len(sc.offsets)
        pos = _align(Window(0, [], [bool(v) for v in sc.valid[:n]], list(sc.offsets)), span)
        if pos is not None:
            out.append((w, *pos))
    return out


def choose_threshold(grid: Sequence[Mapping[str, float]], em_unfiltered: float, tolerance: float,
                     gold: bool = True) -> Mapping[str, float] | None:
    """The entry of ``grid`` (threshold, em, kept, gold_kept) with the highest threshold whose EM and
    gold_kept (where ``gold``: some dev answer aligned) both stay at or above (1 - ``tolerance``) x
    their unfiltered values (EM ``em_unfiltered``, gold_kept 1) and that keeps a token; None where
    none does or the unfiltered EM is 0."""
    keep = 1.0 - tolerance  # relative drops: "does not drop significantly" (App. E)
    ok = [g for g in grid if g["em"] >= em_unfiltered * keep and (not gold or g["gold_kept"] >= keep) and g["kept"] > 0]
    return max(ok, key=lambda g: g["threshold"]) if ok and em_unfiltered > 0 else None


def threshold_for_kept(scored: Sequence[Sequence[Scored]], fraction: float) -> tuple[float, float]:
    """(threshold, kept): the threshold at which ``fraction`` of the scored windows' valid tokens keep
    (their max(start, end) filter logit above it, as the dump and ``rc_predict`` read it), and the
    fraction actually kept (ties at the threshold drop together)."""
    logits = np.concatenate([w.keep[w.valid.astype(bool)] for sc in scored for w in sc] or [np.zeros(0)])
    if not len(logits):
        raise ValueError("no valid token to take the filter's kept fraction from")
    thr = float(np.quantile(logits.astype(np.float64), 1.0 - float(fraction)))
    return thr, float((logits > thr).mean())


def tune_threshold(cfg: Mapping[str, Any], s: Mapping[str, Any], model: PhraseModel) -> dict[str, Any]:
    """The highest threshold of ``filter.grid`` at which the dev reading-comprehension performance
    "does not drop significantly" (App. E), read two ways, both relative to no filter: the EM stays at
    or above (1 - ``filter.tolerance``) x the unfiltered EM, and so does ``gold_kept``, the fraction of
    dev questions whose gold answer phrase survives (its first start and end tokens both kept). The
    second guards against EM too low to tell: at 5 correct of 400 dev questions a threshold that drops
    99 % of tokens kept the same 5 (densephrases.ib-b84 on small), and the dump lost the answers of
    every other question. ``filter.threshold`` fixes the threshold instead."""
    f = s["filter"]
    if f.get("threshold") is not None:
        return {"threshold": float(f["threshold"]), "tuned": False}
    dev, where = dev_questions(cfg, s)
    folder = Context(cfg, NAME).data_dir(s["train_dataset"])
    needed = {g for q in dev for g in (q.gold or [])}
    docs = {d.id: d for d in store.iter_corpus(folder) if d.id in needed}
    dev = [q for q in dev if any(g in docs for g in (q.gold or []))][: int(f["dev_questions"])]
    if not dev:
        return {"threshold": None, "tuned": False, "why": f"no dev question with a gold passage in {where}"}
    scored = score_passages(model, [prepare(s, q.text) for q in dev],
                            [next(docs[g] for g in q.gold if g in docs) for q in dev], s)
    rule = cfg["datasets"][s["train_dataset"]].get("answer_rule", "dpr-string")
    L = int(s["max_phrase_len"])

    def em(thr):
        return sum(em_of(rc_predict(sc, L, thr)[0], q.answers, rule) for sc, q in zip(scored, dev)) / len(dev)

    # (scored windows, gold token positions) of each dev question whose answer its passage's windows cover
    gold = [(sc, pos) for sc, q in zip(scored, dev) if (pos := gold_tokens(sc, q.answers))]

    def gold_kept(thr):
        return sum(any(sc[w].keep[a] > thr and sc[w].keep[b] > thr for w, a, b in pos)
                   for sc, pos in gold) / max(1, len(gold))

    base = em(None)
    total = sum(int(w.valid.sum()) for sc in scored for w in sc)
    grid = []
    for thr in sorted(float(x) for x in f["grid"]):
        kept = sum(int((w.valid & (w.keep > thr)).sum()) for sc in scored for w in sc)
        grid.append({"threshold": thr, "em": em(thr), "kept": kept / max(1, total), "gold_kept": gold_kept(thr)})
    chosen = choose_threshold(grid, base, float(f["tolerance"]), gold=bool(gold))
    out = {"threshold": chosen["threshold"] if chosen else None, "tuned": True, "why": None, "dev": where,
           "dev_questions": len(dev), "em_unfiltered": base, "gold_questions": len(gold), "grid": grid,
           "kept_fraction_dev": chosen["kept"] if chosen else 1.0}
    if chosen:
        return out
    why = ("dev EM is 0 without the filter: nothing to keep it at" if base == 0
           else "no threshold of the grid keeps dev EM and the gold phrases within the tolerance")
    if f.get("kept_fraction") is None:
        return {**out, "why": why + "; no token filtered"}
    thr, kept = threshold_for_kept(scored, float(f["kept_fraction"]))
    return {**out, "threshold": thr, "kept_fraction_dev": kept, "tuned": False,
            "why": f"{why}; threshold {thr:.4g} keeps filter.kept_fraction {f['kept_fraction']} of the dev "
                   f"passages' tokens instead ({kept:.3f} kept)"}


# --------------------------------------------------------------------------------------------
# the phrase dump and its indexes (§5, App. E)


def gold_docs(folder: Path, split: str = "test") -> set[str]:
    """D_small: the gold passages of the split's questions."""
    return {g for q in store.read_queries(folder, split) for g in (q.gold or [])}


def dump_corpus(model: PhraseModel, s: Mapping[str, Any], docs: Iterable[Doc], out: Path,
                threshold: float | None) -> dict[str, Any]:
    """Every kept token vector of every passage into the dump at ``out`` (see the module doc). The
    passages are read, windowed and encoded ``encode_batch_size`` at a time: nothing of the corpus
    is held beyond a batch (NQ's 21M passages' windows, listed up front, were ~300 GB)."""
    from tqdm import tqdm

    from harness.indexes.phrase_dump import DumpWriter

    torch = torch_for(s)
    model.train(False)
    writer = DumpWriter(out, model.dim, codec=s["dump_codec"])
    bs = int(s["encode_batch_size"])
    seen = kept = n_docs = 0
    pad = model.tok.pad_token_id or 0
    t0 = time.perf_counter()
    with torch.inference_mode():
        for batch in tqdm(chunks(docs, bs), desc="dump", unit="batch", mininterval=10.0):
            n_docs += len(batch)
            by_doc: dict[int, list[Window]] = {}
            for w in windows(model.tok, batch, int(s["dump_max_len"]), int(s["dump_stride"])):
                by_doc.setdefault(w.doc, []).append(w)
            group = sorted(by_doc)
            wins = [w for d in group for w in by_doc[d]]
            vecs, keeps = [], []
            for c in range(0, len(wins), bs):
                ids, att, _ = _pad(torch, wins[c:c + bs], pad)
                h = model.token_vectors(ids, att)
                vecs.extend(h.float().cpu().numpy())
                keeps.extend(model.filter_logits(h).max(-1).values.float().cpu().numpy())
            at = 0
            for d in group:
                best: dict[tuple[int, int], tuple[int, np.ndarray, float]] = {}
                for w in by_doc[d]:
                    toks = [t for t, ok in enumerate(w.text) if ok]
                    if toks:
                        lo, hi = toks[0], toks[-1]
                        for t in toks:
                            ctx_ = min(t - lo, hi - t)   # the window where the token has most context
                            key = w.offsets[t]
                            if key not in best or ctx_ > best[key][0]:
                                best[key] = (ctx_, vecs[at][t], float(keeps[at][t]))
                    at += 1
                spans = sorted(best)
                seen += len(spans)
                rows = [k for k in spans if threshold is None or best[k][2] > threshold]
                kept += len(rows)
                if rows:
                    writer.add(batch[d].id, np.stack([best[k][1] for k in rows]).astype(np.float32),
                               np.asarray(rows, dtype=np.int32).reshape(-1, 2))
    info = writer.close()
    return {**info, "documents": n_docs, "tokens_seen": seen, "tokens_kept": kept,
            "kept_fraction": kept / max(1, seen), "encode_seconds": round(time.perf_counter() - t0, 3)}


def index_specs(s: Mapping[str, Any], gold_only: bool) -> dict[str, str]:
    """Index name -> spec: ``main`` (methods.densephrases.index) and the ``index_variants``
    (Flat, the OPQ/IVF-PQ release) but those set to null (an overlay's way to drop one: none is
    built, no system names it); a D_small index (variants of Table 6): Flat only."""
    if gold_only:
        return {"main": s["dsmall"]["index"]}
    return {"main": s["index"], **{k: v for k, v in dict(s["index_variants"] or {}).items() if v is not None}}


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Dump the corpus (all passages, or D_small: the gold passages of the test questions) with the
    model's phrase encoder and filter, and build the phrase indexes over it."""
    from harness.indexes import build_index
    from harness.indexes.phrase_dump import PhraseDump
    from harness.meta import write_meta

    v = job.params.get("variant")
    s = settings(ctx.cfg, v)
    model = PhraseModel.load(s, inputs["model"], encode_device(s))
    gold_only = bool(job.params.get("gold_only"))
    docs = store.iter_corpus(inputs["data"])   # streamed into the dump (dump_corpus)
    if gold_only:
        keep = gold_docs(inputs["data"])
        docs = (d for d in docs if d.id in keep)
    tune = tune_threshold(ctx.cfg, s, model)
    startup_done()  # the rest is per document (python -m harness estimate); the threshold's tuning counts once
    t0 = time.perf_counter()
    dump = dump_corpus(model, s, docs, out / DUMP_DIR, tune["threshold"])
    dump_seconds = time.perf_counter() - t0
    pd = PhraseDump.open(out / DUMP_DIR)
    opts = {"max_phrase_len": int(s["max_phrase_len"]), "train_fraction": float(s["train_fraction"]),
            "seed": int(ctx.cfg["seed"])}  # nprobe is a search setting: the search job sets it (PhraseIndex.load)
    built: dict[str, Any] = {}
    main_spec = None
    for name, spec in index_specs(s, gold_only).items():
        t1 = time.perf_counter()
        idx = build_index(spec, pd, **opts)
        secs = time.perf_counter() - t1
        folder = out / "indexes" / name
        folder.mkdir(parents=True, exist_ok=True)
        idx.save(folder)
        write_meta(folder, "index", spec=idx.spec, seconds=secs,
                   extra={"nbytes": idx.nbytes, "build_seconds": round(secs, 4), "dump": DUMP_DIR})
        built[name] = {"spec": idx.spec, "nbytes": idx.nbytes, "build_seconds": round(secs, 4)}
        if name == "main":
            main_spec = idx.spec
    return {"spec": main_spec, "documents": dump["documents"], "gold_only": gold_only, "dump": dump,
            "dump_seconds": round(dump_seconds, 3), "filter": tune, "indexes": built, "variant": v}
