"""DensePhrases' measure jobs: EM/F1 of the answers (open-domain), reading comprehension (D = {p}),
#Q/s, RAM and storage beside DPR + the reader (Tables 1, A.1), and questions per split (Table C.3)."""
from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.datasets import store
from harness.errors import DataError
from harness.methods.base import Context
from harness.methods.densephrases.model import PhraseModel, read_passages
from harness.methods.densephrases.search import load_phrase_index
from harness.methods.densephrases.settings import ANSWERS, DUMP_DIR, NAME, em_of, prepare, settings
from harness.job import Job
from harness.recording import RecordingDict, recording, snapshot
from harness.figures import record as _metric


def _rule_text(rule: str) -> str:
    return ("regex EM (CuratedTREC: the answer is a case-insensitive regex matched at the start of the prediction)"
            if rule == "dpr-regex" else "EM and F1 as SQuAD v1.1 (lower-case, no punctuation, no a/an/the, "
                                        "white space squeezed; max over gold answers)")


def measure_em(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """EM and F1 of the top-1 phrase of every answer system on the dataset's test questions."""
    from harness.evaluate.qa import f1_score
    from harness.io import iter_jsonl, write_json

    d = str(job.dataset)
    rule = ctx.cfg["datasets"][d].get("answer_rule", "dpr-string")
    gold = {q.id: q.answers for q in store.read_queries(inputs["data"], "test")}
    for i, system in enumerate(job.systems):
        path = inputs[f"run_{i}"] / f"{system}{ANSWERS}"
        if not path.exists():
            raise DataError(f"{path} does not exist", fix="re-run the search job that writes it")
        rows = [r for r in iter_jsonl(path) if gold.get(r["id"])]
        # each question's EM (and F1): the claims' paired tests read them (harness.claims.per_query)
        per_q = [{"id": r["id"], "em": bool(em_of(r["prediction"], gold[r["id"]], rule)),
                  **({"f1": f1_score(r["prediction"], gold[r["id"]])} if rule != "dpr-regex" else {})} for r in rows]
        em = sum(p["em"] for p in per_q) / max(1, len(rows))
        f1 = sum(p["f1"] for p in per_q) / max(1, len(rows)) if rule != "dpr-regex" else None
        values = {"em": (em, "ratio", f"top-1 phrase {_rule_text(rule)}; {len(rows)} test questions")}
        if f1 is not None:
            values["f1"] = (f1, "ratio", f"top-1 phrase F1 (SQuAD v1.1); {len(rows)} test questions")
        write_json(out / f"{system}.json", _metric(system, d, values, questions=len(rows), answers=str(path),
                                                   predictions=per_q))
        print(f"{system}/{d}: EM {em:.4f}" + (f" F1 {f1:.4f}" if f1 is not None else "") + f" on {len(rows)} questions")
    return {}


def measure_rc(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Reading comprehension (D = {p}; Tables 2, 5 and 6's first column): each test question against
    its own gold passage, EM/F1 of the best phrase (start <= end < start + L, all windows)."""
    from harness.evaluate.qa import f1_score
    from harness.io import write_json

    d = str(job.dataset)
    rule = ctx.cfg["datasets"][d].get("answer_rule", "dpr-string")
    base = settings(ctx.cfg)
    queries = [q for q in store.read_queries(inputs["data"], "test") if q.answers and q.gold]
    needed = {g for q in queries for g in q.gold}
    docs = {x.id: x for x in store.iter_corpus(inputs["data"]) if x.id in needed}
    queries = [q for q in queries if any(g in docs for g in q.gold)]
    n_all = len(queries)
    if base["max_test_questions"] and base["max_test_questions"] < len(queries):
        keep = sorted(random.Random(ctx.cfg["seed"]).sample(range(len(queries)), int(base["max_test_questions"])))
        queries = [queries[i] for i in keep]
    for i, (system, v) in enumerate(zip(job.systems, job.params["variants"])):
        s = settings(ctx.cfg, v)
        model = PhraseModel.load(s, inputs[f"model_{i}"])
        preds = read_passages(model, [prepare(s, q.text) for q in queries],
                              [next(docs[g] for g in q.gold if g in docs) for q in queries], s)
        per_q = [{"id": q.id, "prediction": p, "em": bool(em_of(p, q.answers, rule)), "f1": f1_score(p, q.answers)}
                 for (p, _), q in zip(preds, queries, strict=True)]
        em = sum(r["em"] for r in per_q) / max(1, len(queries))
        f1 = sum(r["f1"] for r in per_q) / max(1, len(queries))
        what = (f"reading comprehension (D = {{p}}: the gold passage of each question, query-agnostic phrase "
                f"vectors); {len(queries)} of {n_all} test questions")
        write_json(out / f"{system}.json", _metric(system, d, {"em": (em, "ratio", what), "f1": (f1, "ratio", what)},
                                                   questions=len(queries), variant=v,
                                                   predictions=per_q))
        print(f"{system}/{d}: reading-comprehension EM {em:.4f} F1 {f1:.4f} ({len(queries)} questions)")
    return {}


def _time_child(cfg: dict, kind: str, paths: dict, questions: list[str], k: int) -> dict[str, Any]:
    """Run in a fresh process (peak RAM of one system alone): load, time with densephrases-qps."""
    from harness.timing import PROTOCOLS, run_protocol

    protocol = PROTOCOLS.get("densephrases-qps")
    cfg, reads = recording(cfg)  # the child's reads go back to the step's record (_in_child)
    if kind == "densephrases":
        s = settings(cfg, None)
        model = PhraseModel.load(s, Path(paths["model"]))
        model.train(False)
        idx = load_phrase_index(Path(paths["index"]), "main", s)

        def enc(texts, _o):
            return model.index_queries([prepare(s, t) for t in texts], len(texts))

        def srch(e, kk, _o):
            return idx.search_phrases(e[0], e[1], int(s["search"]["top_k"]), 1)
    else:
        from harness.methods import dpr
        from harness.methods.reader import Reader

        dctx = Context(cfg, "dpr")
        searcher = dpr.Searcher(dctx, Path(paths["dpr_index"]), Path(paths["dpr_model"]))
        reader = Reader.load(Context(cfg, "reader"), Path(paths["reader"]))
        reader.train(False)
        docs = store.corpus_lookup(Path(paths["data"]))   # the top passages read as the reader takes them
        top = int(cfg["reader"].get("top_k", 20))

        def enc(texts, _o):
            return texts, searcher.encode(texts)

        def srch(e, kk, _o):
            texts, vecs = e
            _, rows = searcher.search(vecs, top)
            return [reader.predict(q, [docs[searcher.docids[r]] for r in row if r >= 0]) for q, row in zip(texts, rows)]

    res = run_protocol(protocol, questions, encode=enc, search=srch, k=k, device="cpu")
    secs = res.samples["encode+search"]
    return {"timing": res.to_dict(), "settings_read": sorted(reads),
            "qps": res.queries / max(1e-12, sum(secs)),
            # one timed call per batch (the protocol's repeats is 1): queries and seconds batch by batch
            "batches": (res.batch_sizes, secs) if len(secs) == len(res.batch_sizes) and sum(secs) > 0 else None}


def _qps(r: Mapping[str, Any], what: str) -> dict[str, Any]:
    """Q/s as a figure, with its batches (a claim's bootstrap interval over them)."""
    from harness.figures import value

    return value(r["qps"], "Q/s", what, device="cpu", batches=r.get("batches"))


def _child(fn, cfg: dict, *args) -> dict[str, Any]:
    """``fn(cfg, *args)`` under the job's fallback rule (a fresh process allows none: the rehearsal's
    phrase index, built with fewer IVF lists on its slice, was refused in it), with the fallbacks it took."""
    from harness import cost

    cost.allow_fallbacks(bool(cfg.get("device_fallback", False)))
    out = fn(cfg, *args)
    return {**out, "fallbacks": cost.fallbacks(), "peak_rss": cost.own_peak_bytes()}  # this process's alone


def _in_child(fn, cfg, *args):
    """``fn(cfg, *args)`` in a fresh process (:func:`_child`); the config goes as a plain copy (not a
    read of it) and the settings the child read, and the fallbacks it took, are added to the step's
    own record."""
    import multiprocessing as mp

    from harness import cost

    with mp.get_context("spawn").Pool(1) as pool:
        out = pool.apply(_child, (fn, snapshot(cfg), *args))
    for taken in out.pop("fallbacks", []):   # recorded in the job's meta.json as the parent's own
        cost.fallback(taken)
    cost.child_peak(out["peak_rss"])         # the job's peak counts the child's
    if isinstance(cfg, RecordingDict):
        cfg._reads.update(out.pop("settings_read", []))
    return out


def measure_speed(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Tables 1 and A.1 on one corpus and machine: #Q/s (protocol densephrases-qps: 1,000 questions,
    all if fewer, batches of 64, the first 5 excluded, encoding + search inside the timer, no HTTP),
    peak RAM of each system in its own process, storage and indexing time; DensePhrases beside DPR +
    the harness's reader (DPR's top ``reader.top_k`` passages read question by question)."""
    from harness.indexes.faiss_dense import INDEX_FILE
    from harness.io import write_json
    from harness.meta import folder_bytes, read_meta, resolve_device

    s = settings(ctx.cfg)
    d = str(job.dataset)
    t = s["timing"]
    split = t["split"] if (inputs["data"] / store.queries_file(t["split"])).exists() else "test"
    questions = [q.text for q in store.read_queries(inputs["data"], split)][: int(t["questions"])]
    corpus_bytes = (inputs["data"] / "corpus.jsonl").stat().st_size
    _, why_gpu = resolve_device("cuda")
    gpu_note = {"qps_gpu": why_gpu or "GPU timing of this job not implemented",
                "gpu_memory_bytes": why_gpu or "GPU memory of this job not implemented"}
    k = int(s["search"]["top_k"])
    paths = {"model": str(inputs["model"]), "index": str(inputs["index"]), "data": str(inputs["data"])}
    dp = _in_child(_time_child, ctx.cfg, "densephrases", paths, questions, k)
    imeta = read_meta(inputs["index"])
    main = imeta.get("indexes", {}).get("main", {})
    dump_bytes = folder_bytes(inputs["index"] / DUMP_DIR)
    idx_bytes = folder_bytes(inputs["index"] / "indexes" / "main")
    n = dp["timing"]["queries"]
    common = f"protocol densephrases-qps on {n} {split} questions of {d}"
    values = {
        "qps_cpu": _qps(dp, f"{common}: question encoding + phrase search (top-1 phrase) inside the timer"),
        "storage_bytes": (idx_bytes + dump_bytes + corpus_bytes, "B",
                          (f"phrase index ({main.get('spec')}) {idx_bytes:,} B + phrase dump ({s['dump_codec']}, "
                           f"read to re-score span candidates) {dump_bytes:,} B + passages {corpus_bytes:,} B")),
        "index_bytes": (idx_bytes, "B", f"the faiss phrase index alone ({main.get('spec')})"),
        "indexing_seconds": (float(imeta.get("dump_seconds", 0)) + float(main.get("build_seconds") or 0), "s",
                             "phrase dump (encoding every passage) + index training and adding"),
        "ram_bytes": (dp["peak_rss"], "B", ("peak resident memory of a process that loads the model and index "
                                            "and runs the timing")),
    }
    write_json(out / f"{NAME}.speed.json", _metric(f"{NAME}.speed", d, values, not_run=gpu_note, timing=dp["timing"]))
    print(f"{NAME}.speed/{d}: {dp['qps']:.2f} Q/s on CPU")
    if "dpr_model" in inputs:
        dr = _in_child(_time_child, ctx.cfg, "dpr", {**paths, "dpr_model": str(inputs["dpr_model"]),
                                                            "dpr_index": str(inputs["dpr_index"]),
                                                            "reader": str(inputs["reader"])}, questions, k)
        dmeta = read_meta(inputs["dpr_index"])
        fb = int((inputs["dpr_index"] / INDEX_FILE).stat().st_size)
        values = {
            "qps_cpu": _qps(dr, (f"{common}: DPR question encoding + faiss search + the reader over "
                                 f"the top {ctx.cfg['reader'].get('top_k', 20)} passages, one question "
                                 "per reader call")),
            "storage_bytes": (fb + corpus_bytes, "B", f"DPR's faiss index {fb:,} B + passages {corpus_bytes:,} B"),
            "index_bytes": (fb, "B", "DPR's faiss index alone"),
            "indexing_seconds": (float(dmeta.get("build_seconds") or dmeta.get("seconds") or 0), "s",
                                 "DPR: encoding the corpus + building the faiss index (its meta.json)"),
            "ram_bytes": (dr["peak_rss"], "B", ("peak resident memory of a process that loads DPR, its index "
                                                "and the reader and runs the timing")),
        }
        write_json(out / f"{NAME}.speed-dpr.json", _metric(f"{NAME}.speed-dpr", d, values, not_run=gpu_note,
                                                          timing=dr["timing"]))
        print(f"{NAME}.speed-dpr/{d}: {dr['qps']:.2f} Q/s on CPU")
    return {"questions": n, "split": split}


def measure_c3(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Table C.3 counted by the harness's loaders: questions per split of each configured dataset."""
    from harness.io import write_json

    s = settings(ctx.cfg)
    for row, key in s["c3_datasets"].items():
        folder = inputs[f"data_{row}"]
        values, not_run = {}, {}
        for split in ("train", "dev", "test"):
            if (folder / store.queries_file(split)).exists():
                n = len(store.read_queries(folder, split))
                values[split] = (n, "count", f"questions in split {split!r} of dataset {key} as the harness loads it")
            else:
                not_run[split] = f"dataset {key} has no {split!r} split in this profile"
        write_json(out / f"{NAME}.c3-{row}.json", _metric(f"{NAME}.c3-{row}", str(job.dataset), values,
                                                           not_run=not_run, source_dataset=key))
    return {}
