"""``python -m harness estimate``: the cost of a profile's jobs projected from a rehearsal's measured
ones (each job's meta.json ``cost``, :mod:`harness.cost`; #28). A rehearsal job's seconds per unit
(optimizer step at the paper's batch, 1,000 documents, query) x the profile's count of units (the
dataset cards' corpus and split sizes, the job's own epochs, batch size, schedule); every figure is
labelled projected, with the hardware it was measured on.
"""
from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.cost import UNITS
from harness.job import INIT
from harness.ledger import SEARCHING, documents_searched, job_key, measured_jobs
from harness.ledger import machine as ledger_machine
from harness.ledger import log_failures as failures

#: the profile the rehearsal rehearses (its counts are what the estimate projects to)
PAPER_CONFIG = "configs/profiles/paper.yaml"
#: the rehearsal overlay: a measured job's config hash is compared with today's rehearsal's
REHEARSAL_CONFIG = "configs/profiles/rehearsal.yaml"
#: the profile whose measured jobs the estimate prices (configs/profiles/rehearsal.yaml's ``profile``)
REHEARSAL = "rehearsal"


def _card(cfg: Mapping[str, Any], dataset: str | None) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """(the card of ``dataset`` in configs/datasets.yaml, its config): the config's ``card``, the
    BEIR card of its ``name``, its family's card, or its own key; an empty card where none is."""
    from harness.datasets import catalog

    dcfg = cfg["datasets"].get(dataset or "", {})
    cards = catalog.load_catalog()["datasets"]
    for key in (dcfg.get("card"), dcfg.get("name") and f"beir-{dcfg['name']}", dcfg.get("family"), dataset):
        if key and key in cards:
            return cards[key], dcfg
    return {}, dcfg


def _records(cfg: Mapping[str, Any], dataset: str | None, split: str) -> int | None:
    """Records of ``split`` of ``dataset``'s card (the config's ``splits`` name it), None where unknown."""
    card, dcfg = _card(cfg, dataset)
    want = (dcfg.get("splits") or {}).get(split, split)
    return ((card.get("splits") or {}).get(want) or {}).get("records")


def _documents(cfg: Mapping[str, Any], dataset: str | None) -> int | None:
    """Documents of ``dataset``'s corpus (its own card's or the card its ``corpus_ref`` names)."""
    from harness.datasets import catalog

    card, _ = _card(cfg, dataset)
    corpus = card.get("corpus") or {}
    if not corpus and card.get("corpus_ref"):
        corpus = catalog.card(card["corpus_ref"]).get("corpus") or {}
    return corpus.get("documents")


def _setting(values: Mapping[str, Any], method: str, key: str, default: Any = None) -> Any:
    return values.get(f"methods.{method}.{key}", values.get(f"{method}.{key}", default))


def _sub_training(values: Mapping[str, Any], job: Any) -> tuple[str | None, Mapping[str, Any]]:
    """(name, settings) of a second training a job's id names inside its method's section (densephrases.qs:
    ``methods.densephrases.qs``, its epochs and batch size), or (None, {}) for a method's own training."""
    head, _, tail = job.id.partition(".")
    node = _setting(values, job.method, tail) if head == job.method and tail else None
    found = isinstance(node, Mapping) and ("epochs" in node or "batch_size" in node)
    return (tail, node) if found else (None, {})


def paper_units(cfg: Mapping[str, Any], job: Any) -> tuple[float | None, str]:
    """How many units of its stage's work ``job`` does in the full profile ``cfg`` (from the job's own
    hashed settings, its variant's included, and the dataset cards' counts), and how that was
    counted; None where the cards do not say."""
    from harness import plan

    values = plan.get(cfg).values(job)
    m = job.method
    if job.stage == "train":
        if job.params.get("init"):
            return 1.0, "the initial checkpoint: one step at learning rate 0"
        km = _setting(values, m, "kmeans")
        if isinstance(km, Mapping) and km.get("sample_tokens"):   # QCR's k-means: its sample's tokens (cost.TRAIN_TOKENS)
            sets = [r.dataset for r in job.inputs.values() if r.kind == "data"] or [None]
            docs = _documents(cfg, sets[0])
            p_max = _setting(values, m, "p_max_len")
            n = int(km["sample_tokens"])
            if docs and p_max:
                n = min(n, docs * int(p_max))
            return n / 1000, (f"{n:,} tokens of {sets[0]}'s passages (methods.{m}.kmeans.sample_tokens): encoded, "
                              f"then clustered over {km.get('niter', '?')} iterations into {km.get('clusters', '?'):,} "
                              "centroids (the same K: linear in the tokens)")
        grid = _setting(values, m, "grid") or {}
        if str(job.params.get("variant", "")).startswith("grid-") and grid.get("steps"):
            return float(grid["steps"]), "the grid model's steps"  # QCR Figure 3: one stage of grid.steps
        if _setting(values, m, "schedule"):
            return float(sum(st["steps"] for st in _setting(values, m, "schedule"))), "the schedule's steps"
        if _setting(values, m, "max_steps"):
            return float(_setting(values, m, "max_steps")), "max_steps"
        name, sub = _sub_training(values, job)
        sets = _setting(values, m, "train_datasets") or [_setting(values, m, "train_dataset")]
        if sets == [None]:  # a job whose hashes leave the dataset to its data input (densephrases.qs)
            sets = [r.dataset for r in job.inputs.values() if r.kind == "data"] or [None]
        counts = [_records(cfg, ds, "train") for ds in sets]
        ds = ", ".join(str(d) for d in sets)
        n = None if None in counts else sum(counts)
        batch = sub.get("batch_size", _setting(values, m, "batch_size"))
        if n is None or not batch:
            return None, f"no train record count for {ds}"
        for cap in (_setting(values, m, "max_train_questions"), sub.get("max_train_questions")):
            n = min(n, int(cap)) if cap else n
        per = int(batch) * int(sub.get("grad_accum", _setting(values, m, "grad_accum", 1)) or 1)
        epochs = int(sub.get("epochs", _setting(values, m, "epochs", 1)) or 1)
        how = f"{epochs} epochs x ceil({n:,} / {per})"
        if sub:
            how += (f" (methods.{m}.{name}: every training question counted; it steps over "
                    f"those whose gold is in their top k, fewer: an upper bound on its steps)")
        return float(epochs * math.ceil(n / per)), how
    if job.stage == "index":
        n = _documents(cfg, job.dataset)
        return (n / 1000, f"{n:,} documents") if n else (None, f"no document count for {job.dataset}")
    if job.stage == "search":  # the split it searches (BPR's run over the training questions: the reader's input)
        split = str(job.params.get("split", "test"))
        n = _records(cfg, job.dataset, split)
        return (float(n), f"{n:,} {split} queries") if n else (None, f"no {split} query count for {job.dataset}")
    if job.stage == "negatives":  # BM25's top documents of every training question
        n = _records(cfg, job.dataset, "train")
        return (float(n), f"{n:,} train queries") if n else (None, f"no train query count for {job.dataset}")
    if job.stage == "decontam":  # every training query hashed and looked up, every test query hashed
        from harness.decontam.report import plan as query_sets

        train, test = query_sets(cfg)
        counts = {s.name: _records(cfg, s.key, s.split) for s in train + test}
        missing = sorted(k for k, n in counts.items() if not n)
        if missing:
            return None, f"no query count for {', '.join(missing)}"
        n = sum(counts.values())
        return n / 1000, f"{n:,} queries ({len(train)} training and {len(test)} test sets)"
    # a measure job: no unit of work to scale (it times questions or reads indexes at the slice's sizes)
    return None, ("not scaled: as measured on the rehearsal's slices and counts (its questions, repeats and "
                  "indexes are the profile's smaller): a lower bound")


def _per_stage(cfg: Mapping[str, Any], job: Any, cost: Mapping[str, Any],
               measured: Mapping[str, Any], capped: int | None = None) -> tuple[float, str] | None:
    """(seconds, how) of a train job whose schedule changes shape by stage (QCR: batch 256 -> 2,048,
    K 150 -> 250): the profile's steps of each stage x the measured seconds of that stage's steps, plus
    what the job paid once; None unless the measured run (``measured``: its config values) went through
    the same stages, in order, at the same shapes, with each step timed (``each_step_seconds``).
    ``capped``: the batch its training pairs capped the run's batches at (meta.json ``batch_capped_at``):
    a stage's step is then scaled linearly from the batch it ran to the profile's (a lower bound: the
    in-batch loss grows faster)."""
    from harness import plan

    m = job.method
    paper = _setting(plan.get(cfg).values(job), m, "schedule") or []
    ran = _setting(measured, m, "schedule") or []
    each = cost.get("each_step_seconds") or []
    shape = ("batch_size", "codes")
    if len(paper) < 2 or len(paper) != len(ran) or sum(int(st["steps"]) for st in ran) != len(each) \
            or any({k: a.get(k) for k in shape} != {k: b.get(k) for k in shape} for a, b in zip(paper, ran)):
        return None
    probed = float((cost.get("probe") or {}).get("projected_seconds", 0.0))   # each step's price holds it
    seconds, start, parts = float(cost["seconds"]) + probed - sum(each), 0, []
    for p, r in zip(paper, ran):
        n = int(r["steps"])
        step = sum(each[start:start + n]) / n
        batch = int(p["batch_size"])
        run = min(int(r["batch_size"]), int(capped)) if capped else batch
        seconds += int(p["steps"]) * step * batch / run
        parts.append(f"{int(p['steps']):,} x {step:.1f} s (batch {batch})" if run == batch else
                     f"{int(p['steps']):,} x {step:.1f} s x {batch:,} / {run:,} (batch {batch}, run at {run})")
        start += n
    return seconds, " + ".join(parts)


def project(cfg: Mapping[str, Any], job: Any, cost: Mapping[str, Any],
            measured: Mapping[str, Any] | None = None, measured_bytes: int | None = None,
            fixed_bytes: int | None = None, spec: str | None = None,
            kept: tuple[float, float] | None = None, capped: int | None = None) -> dict[str, Any]:
    """One job's projected cost in profile ``cfg`` from its measured ``cost`` (a rehearsal job's;
    ``measured``: that job's config values, which say the stages a schedule ran; ``measured_bytes``:
    its artifact's size, projected by :func:`disk`; ``kept``: a phrase dump's measured and the
    profile's kept fraction of tokens, :func:`kept_fractions`; ``capped``: the batch a train job's
    training pairs capped its run at, :func:`_per_stage`)."""
    units, how = paper_units(cfg, job)
    out = {"job": job.id, "stage": job.stage, "dataset": job.dataset or "", "kind": "projected",
           "measured_seconds": cost.get("seconds"), "how": how, "gpu_job": bool(job.gpu),
           "host_peak_gib": round(cost.get("host_peak_bytes", 0) / 2**30, 2),
           "gpu_peak_gib": round(cost["gpu_peak_bytes"] / 2**30, 2) if "gpu_peak_bytes" in cost else None,
           "hardware": cost.get("gpu") or "cpu",
           # steady: fixed seconds once + the median later step per step; whole: every second per unit
           "pricing": cost.get("pricing", "whole")}
    projected = disk(job, units, cost, measured_bytes, fixed_bytes, spec, kept)
    out["disk_gib"] = round(projected / 2**30, 3) if projected is not None else None
    if kept is not None and projected is not None:
        out["how"] += (f" (its dump and indexes at the profile's {kept[1]:.0%} of tokens kept by the filter, "
                       f"not the rehearsal's {kept[0]:.1%})")
    held = held_corpora(cfg, cost.get("held_corpora"))
    if held is not None:
        out["held_gib"] = round(held[0] / 2**30, 2)
        out["host_projected_gib"] = round(out["host_peak_gib"] + (held[0] - held[1]) / 2**30, 2)
        out["how"] += f" (holds in memory what grows with its corpus: {held[2]})"
    staged = _per_stage(cfg, job, cost, measured or {}, capped) if job.stage == "train" and units is not None else None
    if staged is not None:  # a schedule's stages differ in shape: one median step would misprice them
        out["seconds"], out["how"], out["pricing"] = staged[0], f"{how}: {staged[1]}", "per stage"
    elif units is not None and cost.get("seconds_per_unit") is not None:
        out["seconds"] = cost.get("fixed_seconds", 0.0) + cost["seconds_per_unit"] * units  # fixed: paid once
        if cost.get("corpus_seconds_per_1k") is not None:   # a search that encodes its corpus itself
            docs = _documents(cfg, job.dataset)
            out["seconds"] = out["seconds"] + cost["corpus_seconds_per_1k"] * docs / 1000 if docs else None
            out["how"] += f" + {docs:,} documents it encodes itself" if docs else ", and no document count"
    elif units is None and job.stage not in UNITS:
        out["seconds"] = cost.get("seconds")
    else:
        out["seconds"] = None
    return out


#: the most entries a scipy sparse matrix indexes with int32 (past it: int64 column ids and row offsets)
INT32_MAX = 2**31 - 1


def csr_bytes(rows: float, entries: float, nbytes: float, rows_profile: float) -> tuple[float, bool]:
    """(bytes, int64?) of a scipy CSR of float32 values measured at ``rows`` rows, ``entries`` stored
    entries and ``nbytes`` bytes, grown to ``rows_profile`` rows at the same entries a row: linearly while
    its entries stay within int32, else 12 bytes an entry (int64 column ids) and 8 a row offset, as scipy
    keeps a matrix past 2^31 entries. One rule for SVDR's E(D) on disk (:func:`disk`) and held in memory
    (:func:`held_corpora`)."""
    grown = entries * rows_profile / rows
    if grown > INT32_MAX:
        return grown * 12 + 8 * (rows_profile + 1), True
    return nbytes * rows_profile / rows, False


def held_corpora(cfg: Mapping[str, Any], held: Mapping[str, Mapping[str, int]] | None
                 ) -> tuple[float, float, str] | None:
    """(projected bytes, measured bytes, what) of the corpora a job held whole in memory
    (``cost.held_corpora``: per dataset, the documents and their bytes in Python objects,
    :func:`harness.datasets.store.note_held`): each corpus's bytes a document x the profile's
    documents of that dataset (a corpus whose count the cards do not give: as measured). Projected
    from the slice's passages: a corpus of shorter passages takes less (MS MARCO's ~335 characters
    against the SQuAD paragraphs' ~790)."""
    if not held:
        return None
    total = measured = 0.0
    parts = []
    for dataset, h in sorted(held.items()):
        n, b = int(h.get("documents") or 0), float(h.get("bytes") or 0)
        full = _documents(cfg, dataset) if n else None
        measured += b
        entries = h.get("csr_entries")
        if full and entries is not None:   # a scipy CSR (SVDR's E(D)): the same rule as its index on disk
            projected, wide = csr_bytes(n, int(entries), b, full)
            parts.append(f"{dataset} {full:,} documents x {entries / n:,.0f} entries"
                         + (" (past 2^31: int64 ids and offsets, 12 bytes an entry)" if wide else ""))
            total += projected
            continue
        total += b / n * full if full else b
        parts.append(f"{dataset} {full:,} documents x {b / n:,.0f} bytes" if full else f"{dataset} as measured")
    return total, measured, "; ".join(parts) + f": {total / 2**30:,.1f} GiB"


def kept_fractions(cfg: Mapping[str, Any], job: Any, record: Mapping[str, Any]) -> tuple[float, float] | None:
    """(measured, profile's) fraction of a phrase dump's tokens its filter keeps, where a measured
    index job's record gives the first (:func:`harness.ledger.kept_fraction`) and the profile's
    ``methods.<method>.filter.kept_fraction`` the second (DensePhrases App. E: "we filter about 75%
    of tokens"); None where either is missing or they agree. The rehearsal's threshold is
    tuned on dev questions with a model of a few steps, whose filter logits separate little: its
    dump keeps what such a filter keeps (2026-12-06: 99.8% of tokens), not what a trained one does."""
    from harness import ledger, plan

    measured = ledger.kept_fraction(record)
    if job.stage != "index" or measured is None or measured <= 0:
        return None
    filt = _setting(plan.get(cfg).values(job), job.method, "filter")
    target = filt.get("kept_fraction") if isinstance(filt, Mapping) else None
    if target is None or abs(float(target) - measured) < 1e-9:
        return None
    return measured, float(target)


def disk(job: Any, units: float | None, cost: Mapping[str, Any], measured_bytes: int | None,
         fixed_bytes: int | None = None, spec: str | None = None,
         kept: tuple[float, float] | None = None) -> float | None:
    """Bytes of ``job``'s artifact in the profile, projected from the rehearsal's ``measured_bytes``:
    an index (and a run file) grows with its documents (queries), so it is scaled by the profile's
    units over the measured ones, but for its ``fixed_bytes`` (a PQ's codebooks: the trained index
    before any vector, where the job recorded it), kept once; a model is the same size whatever its
    steps, and a measurement is kept as measured. None where nothing was measured or a count is missing.
    A ``sparse-csr`` index (SVDR's E(D), an uncompressed scipy CSR: 4-byte values, int32 column ids and
    row offsets on a slice) whose entries pass 2^31 at the profile's scale keeps int64 ids and offsets
    there, as scipy does: 12 bytes an entry, not 8 (NQ's ~16G entries: ~182 GiB, not ~122).
    ``kept`` (measured, profile's fraction of tokens a phrase dump keeps, :func:`kept_fractions`): its
    dump and the indexes over it hold one row a kept token, so they scale by the one over the other."""
    if measured_bytes is None:
        return None
    if kept is not None:
        measured_bytes = int(float(measured_bytes) * kept[1] / kept[0])
    if job.stage == "index" and spec == "sparse-csr" and units is not None and cost.get("units"):
        n_meas, n_prof = float(cost["units"]) * 1000, float(units) * 1000   # documents (units of 1,000)
        nnz = max(0.0, float(measured_bytes) - 4 * (n_meas + 1)) / 8   # the slice's: 8 bytes an entry
        projected, wide = csr_bytes(n_meas, nnz, float(measured_bytes), n_prof)
        if wide:
            return projected
    if job.stage in ("index", "search", "negatives", "decontam"):  # their output grows with their units
        measured = cost.get("units")
        fixed = min(float(fixed_bytes or 0), float(measured_bytes))
        return fixed + (float(measured_bytes) - fixed) * units / measured if units is not None and measured else None
    return float(measured_bytes)


# ---- python -m harness estimate -------------------------------------------------------------------

#: what the papers state of their own compute and storage, printed beside the projection of the job
#: they are about: (stage, job id, dataset) -> text
PAPERS_OWN = {
    ("index", "svdr.emb", "nq"): "SVDR App. B: E_θ(D), encoding the 21M passages, 23.7 GPU-hours",
    ("index", "svdr.token", "nq"): "SVDR App. B: T(D), the binary token index of the 21M passages, 1.1 CPU-hours; "
                                   "2 GB (Fig. 1), 2.7 GB (Table 3)",
    ("index", "dpr", "nq"): "BPR Table 1: DPR's index of the 21M passages, 64.6 GB; SVDR Table 3: 31.5 GB; "
                            "DensePhrases Table A.1: DPR's indexing 17 h on 8 x 32 GB GPUs, 76 GB",
    ("index", "bpr", "nq"): "BPR Table 1: BPR's index of the 21M passages (linear scan), 2.0 GB",
    ("index", "bpr.hash", "nq"): "BPR Table 1: BPR's hash-table index, 2.2 GB",
    ("index", "dpr.hnsw", "nq"): "BPR Table 1: DPR + HNSW's index of the 21M passages, 151 GB",
    ("index", "dpr.lsh", "nq"): "BPR Table 1: DPR + Simple LSH's index, 2.0 GB",
    ("index", "dpr.pq", "nq"): "BPR Table 1: DPR + PQ's index, 2.0 GB",
    ("index", "bm25", "nq"): "SVDR Table 3: BM25's index of the 21M passages, 2.3 GB",
    ("index", "densephrases", "nq"): "DensePhrases Table A.1: the phrase index of English Wikipedia, 20 h on "
                                     "4 x 24 GB GPUs, 320 GB",
    ("train", "densephrases", ""): "DensePhrases App.: phrase encoders trained on a single 24 GB GPU (TITAN RTX)",
    ("train", "lightretriever", ""): "LightRetriever §3.1: 12k steps at batch 128 on a DGX node of 8 H800 GPUs",
    ("train", "qcr", ""): "QCR App.: every experiment on a single A100 GPU (4,000 steps, batch 256 -> 2,048); no time given",
    ("train", "bpr", ""): "BPR §4: trained as DPR, on servers with eight V100 GPUs; no time given",
}


def profile_of(d: Mapping[str, Any]) -> str | None:
    """The profile a measured job ran under: its meta.json's ``profile``, else (a record written before
    meta.json named it) the ``results/<profile>/`` folder its inputs were read from; None where neither says."""
    if d.get("profile"):
        return str(d["profile"])
    for value in (d.get("inputs") or {}).values():
        parts = Path(str(value)).parts
        if len(parts) > 2 and parts[0] == "results":
            return parts[1]
    return None


def rehearsal_jobs(root: Any, profile: str | None = None) -> list[dict[str, Any]]:
    """The measured jobs under ``root`` (:func:`harness.ledger.measured_jobs`; none where it is not a
    folder) that price the jobs of ``profile`` (default: the paper's): a folder whose jobs ran under
    another profile than the rehearsal or ``profile`` itself is refused, their costs being of that
    profile's models and batches (the smoke profile's tiny encoders, not the paper's)."""
    jobs = measured_jobs(root) if Path(root).is_dir() else []
    other = [d for d in jobs if profile_of(d) not in (None, REHEARSAL, profile or "paper")]
    if other:
        from harness.errors import DataError

        names = sorted({str(profile_of(d)) for d in other})
        raise DataError(f"{root}: {len(other)} of its {len(jobs)} measured jobs ran under profile "
                        f"{', '.join(names)}, not the rehearsal (e.g. {other[0]['_path']}): their costs are of that "
                        "profile's models and batches, not the paper's",
                        fix="point --measured at the rehearsal's results folder (default <results_dir>/rehearsal), "
                            "made by snakemake --cores all reproduce_all --configfile configs/profiles/paper.yaml "
                            "configs/profiles/rehearsal.yaml")
    return jobs


def estimate(cfg: Mapping[str, Any], root: Any, ledger_records: list[Mapping[str, Any]] = (),
             other_datasets: bool = True, siblings: bool = True, scaled: bool = True) -> list[dict[str, Any]]:
    """A projected row per job of the plan of ``cfg`` (same stage, id, dataset) measured under ``root``
    (this machine's rehearsal) or in ``ledger_records`` (:func:`harness.ledger.read`): one record per
    job, chosen by :func:`harness.ledger.pick`; each row names its ``source`` and says where the
    job's settings changed since it was measured (``stale``). ``other_datasets``: also a row for each
    index, search and measure job the DAG runs on a dataset where it was not measured, from the same
    job measured on another (``measured_on_dataset``). ``siblings``: also a row for each variant or
    ``@init`` job of a priced one that runs the same step on the same encoder shape, and for a main
    model's index or search job from its twin's or variant's (:func:`sibling_of`; ``borrowed_from``).
    ``scaled``: also a row for each variant job that differs from its method's own measured job in its
    backbone alone, its seconds scaled by the backbones' matmul parameters (:func:`backbone_scale`;
    ``scaled_by``: rough, never measured)."""

    from harness import ledger, plan
    from harness.errors import ConfigError

    p = plan.get(cfg)
    found: dict[tuple[str, str, str | None], list[dict[str, Any]]] = {}
    steps = step_of(p)
    local = with_code(rehearsal_jobs(root, cfg.get("profile")), steps)
    ledger_records = with_code(ledger_records, steps)
    for d in local:
        key = job_key(d)
        d = {**d, "_source": f"{root} (this machine)",
             "documents_searched": documents_searched(root, d) if key[0] in SEARCHING else None}
        found.setdefault(key, []).append(d)
    for d in ledger.measurements(ledger_records):
        found.setdefault(job_key(d), []).append(d)
    hashes = _rehearsal_hashes(list(found))
    prefer = ledger.reference_machine([d for cands in found.values() for d in cands])
    rows = []
    for (stage, job_id, dataset), cands in found.items():
        try:
            job = p.job(stage, job_id, dataset)
        except ConfigError:
            continue
        rows.append(_row(cfg, job, cands, hashes.get((stage, job_id, dataset)), prefer))
    # an index or search job measured on one dataset only: its per-1,000-document (per-query) cost
    # projects the same job on the profile's other datasets, said in the row (another corpus: its
    # passages' lengths differ, and the encoders pad to the batch's longest); a measure job (priced as
    # measured, a lower bound) the same: LightRetriever's Figure 5 on each BEIR set
    on: dict[tuple[str, str], list[str]] = {}
    for stage, job_id, dataset in found:
        if stage in ("index", "search", "measure") and dataset:
            on.setdefault((stage, job_id), []).append(dataset)
    for key, job in sorted(p.closure().items(), key=lambda kv: str(kv[0])):
        stage, job_id, dataset = key
        if not other_datasets or key in found or not dataset or (stage, job_id) not in on:
            continue
        src = sorted(on[stage, job_id], key=lambda d: (d != "nq", d))[0]
        row = _row(cfg, job, found[stage, job_id, src], hashes.get((stage, job_id, src)), prefer)
        row["how"] += f" ({'as' if stage == 'measure' else 'per-unit cost'} measured on {src}: another corpus)"
        row["measured_on_dataset"] = src
        rows.append(row)
    # a variant or @init job priced from the per-unit cost of the job it varies (its own units: epochs,
    # documents, queries), where both run the same step on the same encoder shape (sibling_of); a main
    # model's index or search from its @init twin's or a variant's that varies it in training alone
    # (same_model). In passes: the first prices from the jobs measured (on this dataset or another), each
    # later one from the rows the passes before it added too, so that a job is priced from a measured
    # job wherever one prices it, and through another job's price only where none does (QCR's qcr@init
    # index through qcr's, itself through qcr.noent's from qcr.grid-b0k1's measured one)
    priced = {(r["stage"], r["job"], r["dataset"] or None): r for r in rows}
    record = {k: (k[0], k[1], r.get("measured_on_dataset") or k[2]) for k, r in priced.items()}  # the job measured
    closure = sorted(p.closure().items(), key=lambda kv: str(kv[0]))
    added = siblings
    while added:
        before, added = dict(priced), False
        for key, job in closure:
            if key in priced:
                continue
            less: list[str] = []
            base, differs = sibling_of(p, job, before, less)
            src = before.get((job.stage, base, job.dataset)) if base is not None else None  # measured, or projected
            if src is None:
                continue
            rec = record[job.stage, base, job.dataset]
            ds = rec[2]
            row = _row(cfg, job, found[rec], hashes.get(rec), prefer)
            same = "" if _is_fusion(job) else "the same step on the same encoder shape, "
            on = f" measured on {ds}" if ds != job.dataset else ""
            via = f"; {base}'s own from {job.stage} {rec[1]}'s{on}" if rec[1] != base else ""
            row["how"] += f" (per-unit cost of {job.stage} {base}{'' if via else on}: {same}{differs}{via})"
            if src.get("bound") == "upper" and rec[1] != base:   # priced through a job priced as an upper bound
                less.append(f"as {job.stage} {base} is")
            if less:   # it does part of that job's work (AT_MOST)
                row["how"] += (f" (it does at most that job's work, {'; '.join(less)}: an upper bound"
                               + (", beside the lower bound above: neither" if row.get("bound") == "lower" else "") + ")")
                row["bound"] = "upper" if row.get("bound") != "lower" else None
            row["borrowed_from"] = base
            row.pop("stale", None)  # said of the job measured, in its own row
            row.pop("older_code", None)
            rows.append(row)
            priced[key], record[key], added = row, rec, True
    # a variant on another backbone (LightRetriever's other LLMs): the measured job's seconds x the
    # ratio of the backbones' matmul parameters (forward FLOPs per token), said in the row
    priced = {(r["stage"], r["job"], r["dataset"] or None): r for r in rows}
    for key, job in sorted(p.closure().items(), key=lambda kv: str(kv[0])):
        src = priced.get((job.stage, job.method, job.dataset))   # the method's own job, measured
        if not scaled or key in priced or src is None or src.get("borrowed_from"):
            continue
        base, ratio, why = backbone_scale(p, job)
        if base is None:
            continue
        ds = src.get("measured_on_dataset") or job.dataset
        row = _row(cfg, job, found[job.stage, base, ds], hashes.get((job.stage, base, ds)), prefer)
        if row.get("seconds") is not None:
            row["seconds"] *= ratio
        row["how"] += (f" (scaled from {job.stage} {base}'s per-unit cost" + (f" measured on {ds}" if ds != job.dataset else "")
                       + f": {why}; not measured, memory and disk not projected)")
        row.update(borrowed_from=base, scaled_by=round(ratio, 4), host_peak_gib=None, disk_gib=None)
        row.pop("stale", None)
        row.pop("older_code", None)
        rows.append(row)
    _index_held(p, rows)
    return rows


#: variant settings a backbone-scaled row lets differ beside the backbone (they split the same work otherwise)
SCALED_SETTINGS = frozenset({"backbone", "grad_cache_chunk"})


def backbone_scale(p: Any, job: Any) -> tuple[str | None, float, str]:
    """(the method's own job of ``job``'s stage and dataset, the ratio of the two backbones' matmul
    parameters, how) where ``job`` runs the same step on inputs of the same kinds with the same
    parameters (but those naming it) and its model is a variant whose settings differ from the main
    model's, among :data:`SHAPE_SETTINGS`, in its backbone (and :data:`SCALED_SETTINGS`) alone; a
    forward pass costs about 2 x those parameters in FLOPs per token, so the measured job's seconds x
    the ratio price it, roughly (attention's length term, memory-bound kernels and sub-batch sizes
    aside). Each backbone's parameters are counted from its committed configuration
    (``configs/backbones/``: the rehearsal's ``config:`` sources). (None, 1.0, why not) otherwise."""
    from harness.errors import ConfigError

    if INIT in job.id or job.id == job.method:
        return None, 1.0, "not a variant"
    try:
        ref = p.job(job.stage, job.method, job.dataset)
    except ConfigError:
        return None, 1.0, f"no {job.stage} job {job.method}"
    if not _same_step(ref, job) or _params(ref) != _params(job):
        return None, 1.0, f"another step than {job.stage} {job.method}'s"
    differs = set(_shape_differences(p, job, ref))
    if "backbone" not in differs or differs - SCALED_SETTINGS:
        return None, 1.0, f"its variant sets {', '.join(sorted(differs)) or 'no shape setting'}"
    mine, main = _model_settings(p, job) or {}, _model_settings(p, ref) or {}
    a, b = _matmul_parameters(str(mine["backbone"])), _matmul_parameters(str(main["backbone"]))
    if not a or not b:
        return None, 1.0, "a backbone without a committed configuration"
    return ref.id, a / b, (f"x {a / b:.2f}, the matmul parameters of {mine['backbone']} ({a / 1e9:.2f}B) over "
                           f"{main['backbone']}'s ({b / 1e9:.2f}B): forward FLOPs per token")


def _shape_differences(p: Any, job: Any, ref: Any, upper: list[str] | None = None) -> list[str]:
    """The :data:`SHAPE_SETTINGS` of ``job``'s stage (:func:`_stage_shape`) in which the model ``job``
    trains or reads differs from ``ref``'s; with ``upper``, a difference in which ``job``'s value does
    at most ``ref``'s work (:data:`AT_MOST`) is appended there instead."""
    mine, main = _model_settings(p, job), _model_settings(p, ref)
    if mine is None or main is None:
        return []
    return _differing(_stage_shape(job.stage), mine, main, upper)


def _differing(keys: Iterable[str], mine: Mapping[str, Any], main: Mapping[str, Any],
               upper: list[str] | None = None) -> list[str]:
    """The ``keys`` whose values differ in work between ``mine`` and ``main`` (:func:`_work`); with
    ``upper``, those where ``mine`` does at most ``main``'s work go there instead (:func:`_at_most`)."""
    out = []
    for k in sorted(keys):
        if _work(k, mine.get(k)) == _work(k, main.get(k)):
            continue
        if upper is not None and _at_most(k, mine.get(k), main.get(k)):
            upper.append(f"{k}: {mine.get(k)}, where it is {main.get(k)}")
        else:
            out.append(k)
    return out


def _model_settings(p: Any, job: Any) -> dict[str, Any] | None:
    """The effective settings of the model ``job`` trains or reads (a variant: its method's section,
    then ``variant_overrides``, then its own), None where it has none."""
    from harness.errors import ConfigError

    train = job
    if job.stage != "train":
        refs = [r for r in job.inputs.values() if r.kind == "model"]
        if len(refs) != 1:
            return None
        try:
            train = p.job("train", refs[0].id, None)
        except ConfigError:
            return None
    return _train_settings(p.cfg, train)


def _train_settings(cfg: Mapping[str, Any], train: Any) -> dict[str, Any]:
    """The effective settings of train job ``train``: its method's schema defaults and section, then, for
    a variant, ``variant_overrides`` and its own."""
    from harness.methods import METHODS, method_module
    from harness.settings import fragment_defaults

    module = method_module(train.method) if train.method in METHODS else None
    defaults = fragment_defaults(module.__file__, module.SCHEMA) if module else {}   # the schema's
    sec = {**defaults, **(cfg["methods"].get(train.method) or {})}
    v = train.params.get("variant")
    if v is None:
        return dict(sec)
    return {**sec, **(sec.get("variant_overrides") or {}), **((sec.get("variants") or {}).get(v) or {})}


@functools.lru_cache(maxsize=None)
def _matmul_parameters(backbone: str) -> int | None:
    """Matmul parameters of ``backbone`` from its committed configuration (the rehearsal's source)."""
    from harness.config import load_config
    from harness.models import backbones

    spec = (load_config([PAPER_CONFIG, REHEARSAL_CONFIG])["backbones"].get(backbone) or {}).get("source", "")
    if not str(spec).startswith("config:"):
        return None
    config = backbones.load_config(backbone, spec.partition(":")[2])
    return backbones.matmul_parameters(config, backbones.lm_class(config))


#: settings that change the work of one unit (a training step's texts and their lengths, the
#: encoder's shape, which encoders run): a variant setting any of them is not priced from its reference
SHAPE_SETTINGS = frozenset({
    "backbone", "batch_size", "hard_negatives", "q_max_len", "p_max_len", "max_len", "grad_accum", "schedule",
    "training_data", "train_dataset", "train_datasets", "dense_query", "dense_doc", "sparse_query", "sparse_doc",
    "grad_cache_chunk", "codes", "index", "spec"})
#: :data:`SHAPE_SETTINGS` values that do the same work per unit as another value: a binary sparse query
#: is the token counts' positions at value 1 (LightRetriever's Table 4 'binary' trains, indexes and
#: searches as its main model does)
SAME_WORK = {"sparse_query": {"binary": "counts"}}
#: setting and job-parameter values that do at most another value's work: a job differing from its
#: reference in these alone is priced from it, an upper bound. LightRetriever's Table 4 'Direct Emb
#: Layer' queries are input-embedding rows, where its light queries build the tokens' cached vectors
#: (an LLM pass per distinct query token); an index job with ``sparse: false`` encodes and writes the
#: dense side alone, where the main model's builds the impact index and the sparse matrix too
AT_MOST = {"dense_query": {"embedding": "light"}, "sparse": {False: True}}
#: settings of the model's query side only: an index job encodes no query, so they do not change its work
QUERY_SIDE = frozenset({"dense_query", "sparse_query", "q_max_len"})


def _work(key: str, value: Any) -> Any:
    """``value`` of setting ``key`` as the work it does (:data:`SAME_WORK`)."""
    return SAME_WORK.get(key, {}).get(value, value) if isinstance(value, str) else value


def _at_most(key: str, mine: Any, ref: Any) -> bool:
    """Whether value ``mine`` of setting (or parameter) ``key`` does at most ``ref``'s work (:data:`AT_MOST`)."""
    try:
        return AT_MOST.get(key, {}).get(mine, _NO) == ref
    except TypeError:   # an unhashable value (a list): not in the table
        return False


_NO = object()


def _stage_shape(stage: str) -> frozenset[str]:
    """The :data:`SHAPE_SETTINGS` that change the work of a job of ``stage`` (an index: not the query side's)."""
    return SHAPE_SETTINGS - QUERY_SIDE if str(stage) == "index" else SHAPE_SETTINGS


#: job parameters that name a variant (or the initial checkpoint) rather than change its step's work
_NAMING_PARAMS = frozenset({"variant", "ablation", "init", "learning_twin_of"})


def sibling_of(p: Any, job: Any, priced: Any = (), upper: list[str] | None = None) -> tuple[str | None, str]:
    """(the id of the job ``job`` varies, how they differ) where a measured cost of that job prices
    ``job``'s units too: ``job`` is a variant (``bpr.a0``, ``svdr.abl-m1``: the method's own job) or
    an ``@init`` twin (``dpr@init``, ``svdr.emb@init``: the id without ``@init``) of the same stage
    and dataset, running the same step over inputs of the same kinds with the same parameters (but
    those naming it), and its variant settings touch none of :data:`SHAPE_SETTINGS` of its stage
    (an index's: not the query side's, :data:`QUERY_SIDE`). With ``upper`` (a list), also where
    ``job`` differs in settings or parameters that do at most that job's work (:data:`AT_MOST`),
    listed there: the price is then an upper bound. Else, or where that job is not in ``priced``
    ((stage, id, dataset) keys), for an index or search job: another variant's job in ``priced``
    whose models differ from this one's in training alone (:func:`same_start`; QCR's grid model
    ``grid-b1k1`` indexes as ``grid-b0k1`` does: batch 2,048 or 256, K 250 both); for a fusion job,
    another fusion job in ``priced`` that fuses as many runs the same way (:func:`same_fusion`); for a
    main model's index or search job, its ``@init`` twin's or a variant's that does its work per unit
    (:func:`same_model`). (None, why not) otherwise. QCR's grid models train at other batch sizes and
    codes: their training is never priced from another's."""
    less: list[str] = []
    base, why = _varied(p, job, less if upper is not None else None)
    unpriced = base is None or priced and (job.stage, base, job.dataset) not in priced
    if unpriced and job.stage in ("index", "search"):
        other = _first_priced(same_start(p, job), job, priced)
        if other is not None:
            return other, f"its models differ from {other}'s in training alone"
        other, how = same_fusion(p, job, priced)
        if other is not None:
            return other, how
        if base is None:
            other, how = same_model(p, job, priced)
            if other is not None:
                return other, how
    if upper is not None and base is not None:
        upper.extend(less)
    return base, why


def same_model(p: Any, job: Any, priced: Any) -> tuple[str | None, str]:
    """(a job in ``priced`` whose per-unit cost prices ``job``, how) where ``job`` is the index or search
    job of a method's main model (its id the method's): the same job of its ``@init`` twin (the same
    model untrained) or of a variant that varies it in training alone (:func:`_varied`, strict: the
    same step, parameters and shape settings; QCR's ``qcr.noent``, whose entropy weight only training
    reads), else of another variant whose models differ from such a variant's in training alone
    (:func:`same_start`: ``qcr.grid-b0k1``, K 250 as the main model's). The converse of pricing a
    variant from the main model's job, and as exact. (None, why not) otherwise."""
    if job.stage not in ("index", "search") or job.id != job.method:
        return None, "not a main model's index or search job"
    same = {}   # the jobs that do its work per unit: id -> (job, how)
    for (stage, other, dataset), o in p.closure().items():
        if stage == job.stage and dataset == job.dataset and other != job.id and o.method == job.method:
            base, why = _varied(p, o)
            if base == job.id:
                same[other] = (o, why)
    order = sorted(same, key=lambda other: (INIT not in other, other))
    other = _first_priced(order, job, priced)
    if other is not None:
        return other, f"{other} does its work per unit: {same[other][1]}"
    for other in order:
        o, why = same[other]
        alike = _first_priced(same_start(p, o), job, priced)
        if alike is not None:
            return alike, (f"{other} does its work per unit ({why}) and its models differ from {alike}'s in "
                           f"training alone")
    return None, f"no job priced that does {job.stage} {job.id}'s work per unit"


def _first_priced(ids: Iterable[str], job: Any, priced: Any) -> str | None:
    """The first of ``ids`` whose job of ``job``'s stage and dataset is in ``priced``; None if none is."""
    return next((i for i in ids if (job.stage, i, job.dataset) in priced), None)


def _is_fusion(job: Any) -> bool:
    """Whether ``job`` is a fusion job (:func:`harness.fusion.fusion_job`)."""
    from harness import fusion

    return job.module == fusion.__name__


def same_fusion(p: Any, job: Any, priced: Any) -> tuple[str | None, str]:
    """(a fusion job in ``priced`` of ``job``'s dataset that fuses as many runs the same way, ``how``;
    the method's own first), where ``job`` is a fusion job (:func:`harness.fusion.fusion_job`): its
    work per query is reading its runs (the profile's depth each) and combining their scores, whatever
    models wrote them (LightRetriever's variants' ``<variant>-hybrid`` interpolations as its own
    ``hybrid``). (None, why not) otherwise."""
    from harness.errors import ConfigError

    if not _is_fusion(job):
        return None, "not a fusion job"
    what = (job.params.get("how"), len(job.params.get("runs") or ()))
    found = []
    for stage, other, dataset in priced:
        if stage != job.stage or dataset != job.dataset or other == job.id:
            continue
        try:
            o = p.job(stage, other, dataset)
        except ConfigError:
            continue
        if _is_fusion(o) and (o.params.get("how"), len(o.params.get("runs") or ())) == what:
            found.append((o.method != job.method, other))
    if not found:
        return None, f"no fusion job priced that fuses {what[1]} runs by {what[0]}"
    other = min(found)[1]
    return other, f"the same fusion ({what[0]} of {what[1]} runs) per query, whatever models wrote its runs"


def same_start(p: Any, job: Any) -> list[str]:
    """The ids of the other variant jobs of ``job``'s stage, step and dataset (inputs of the same
    kinds, the same parameters but those naming them) whose models have the same start key as
    ``job``'s, model for model (the method's ``start_key``, harness.methods.base.start_key: their
    settings but for those only training reads): an index or search job of either does the same
    work per document (query). A model is a variant by its ``variant`` or, SVDR's, its ``ablation``
    parameter. Empty for a main model (its key is its own id) and for methods without ``start_key``."""
    import importlib

    from harness.errors import ConfigError

    def keys(j: Any) -> list[Any] | None:
        out = []
        for r in j.inputs.values():
            if r.kind != "model":
                continue
            try:
                t = p.job("train", r.id, None)
            except ConfigError:
                return None
            module = importlib.import_module(t.module)
            if (t.params.get("variant") or t.params.get("ablation")) is None or not hasattr(module, "start_key"):
                return None
            out.append(repr([t.method, module.start_key(p.cfg, t)]))
        return out or None

    mine = keys(job)
    if mine is None:
        return []
    return sorted(o.id for (stage, _, dataset), o in p.closure().items()
                  if stage == job.stage and dataset == job.dataset and o.id != job.id and o.method == job.method
                  and _same_step(o, job) and _params(o) == _params(job) and keys(o) == mine)


def _params(job: Any) -> dict[str, Any]:
    """A job's parameters but those naming it (:data:`_NAMING_PARAMS`)."""
    return {k: v for k, v in job.params.items() if k not in _NAMING_PARAMS}


def _same_step(a: Any, b: Any) -> bool:
    """Whether jobs ``a`` and ``b`` run the same step over inputs of the same kinds."""
    return a.step == b.step and {n: r.kind for n, r in a.inputs.items()} == {n: r.kind for n, r in b.inputs.items()}


def _varied(p: Any, job: Any, upper: list[str] | None = None) -> tuple[str | None, str]:
    """(the job ``job`` varies, how) as :func:`sibling_of` says; where ``job`` does at most its work in
    a setting or parameter (:data:`AT_MOST`), that difference is appended to ``upper``."""
    from harness.errors import ConfigError

    base = job.id.replace(INIT, "") if INIT in job.id else job.method
    if base == job.id:
        return None, "not a variant"
    try:
        ref = p.job(job.stage, base, job.dataset)
    except ConfigError:
        return None, f"no {job.stage} job {base}"
    if not _same_step(ref, job):
        return None, f"another step than {job.stage} {base}'s"
    less: list[str] = []
    mine_p, ref_p = _params(job), _params(ref)
    if (_differing(set(mine_p) | set(ref_p), mine_p, ref_p, less)
            or str(job.params.get("variant") or "").startswith("grid-")):
        return None, f"other parameters than {job.stage} {base}'s"
    mine = {k: v for k, v in p.values(job).items() if ".variants." in k and isinstance(v, Mapping)}
    set_ = sorted({s for v in mine.values() for s in v})
    # an index or search job hashes its model's variant settings through its input: compare the models'
    own = {k: v for d in mine.values() for k, v in d.items()}
    main = _model_settings(p, ref) or {}
    # the settings the variant names first (the message names them); where none differs, the effective
    # settings (a variant_overrides or the schema's default may differ too), which also say what it does less
    shape = _differing(_stage_shape(job.stage) & set(set_), own, main, [])
    if not shape:
        mine_m = _model_settings(p, job)
        shape = _differing(_stage_shape(job.stage), mine_m, main, less) if mine_m is not None and main else []
    if shape:
        return None, f"its variant sets {', '.join(shape)}"
    if less and upper is None:
        return None, f"less work than {job.stage} {base}'s: {', '.join(less)}"
    if upper is not None:
        upper.extend(less)
    if job.params.get("init"):
        return base, "the initial checkpoint: one step"
    if INIT in job.id:
        return base, "random initial weights"
    name = job.params.get("variant") or job.params.get("ablation") or job.id
    return base, f"its variant sets {', '.join(set_)}" if set_ else f"the variant {name}"


def _row(cfg: Mapping[str, Any], job: Any, cands: list[dict[str, Any]], now: str | None,
         prefer: str | None = None) -> dict[str, Any]:
    """The projected row of ``job`` from the record :func:`harness.ledger.pick` chooses of ``cands``
    (``now``: today's rehearsal config hash of the job measured, to say where it is stale; ``prefer``:
    the reference machine)."""
    from harness import ledger
    from harness.methods.code import code_id, code_paths
    from harness.workflow import booked_mem_mb

    stage = job.stage
    code = code_id(str(stage), job.method, job.step, module=job.module)   # today's (ledger.pick prefers it)
    d = ledger.pick(cands, bool(job.gpu), now, prefer, code)
    capped = d.get("batch_capped_at") if stage == "train" else None
    row = project(cfg, job, d["cost"], d.get("config_values"), d.get("bytes"), d.get("fixed_bytes"), d.get("spec"),
                  kept_fractions(cfg, job, d), capped)
    if capped:   # a small training set capped its batches (QCR-uns.: the rehearsal's 64 generated queries)
        row["how"] += (f" (its batches ran at {int(capped):,}, capped by its training pairs' distinct passages: "
                       + ("each stage's step scaled linearly to the profile's batch" if row["pricing"] == "per stage"
                          else "priced at that batch") + "; the in-batch loss grows faster"
                       + ("" if d.get("generator") else ", and what it paid before training, a generator's queries "
                          "where it has one, is priced once") + ": a lower bound)")
        row["bound"] = "lower"
    if stage == "train" and d.get("generator"):
        _price_generator(cfg, job, row, d["generator"])
    if row["hardware"] == "cpu":
        row["hardware"] = ledger_machine(d)
    if stage in SEARCHING:
        _bound_search(cfg, job, row, d.get("documents_searched"))
    row["papers_own"] = PAPERS_OWN.get((job.stage, job.id, job.dataset or ""), "")
    row["fallbacks"] = "; ".join(d.get("fallbacks", []))
    if any(": nlist " in f for f in d.get("fallbacks", [])):  # harness.indexes.phrase: a slice too small for its IVF
        row["how"] += " (its IVF trained fewer lists than the profile's, whose k-means is not timed: a lower bound)"
        row["bound"] = "lower"
    if stage == "index" and re.search(r"\bHNSW\d", str(d.get("spec") or "")):
        # each insertion searches the graph built so far (efConstruction candidates over ~log n layers)
        row["how"] += " (an HNSW graph's insertion cost grows with the graph, about log n: a lower bound)"
        row["bound"] = "lower"
    if stage == "measure":   # as measured (paper_units): a lower bound
        row["bound"] = "lower"
    _note_sub_batches(cfg, job, row, d.get("grad_cache_chunk"))
    probe = d["cost"].get("probe")
    if probe and "sub_batches" in probe:   # harness.train.grad_cache_step under probe_sub_batches: a step priced from a fraction of it
        row["how"] += (f" (its steps projected from {probe['sub_batches_run']:,} of their {probe['sub_batches']:,} "
                       "GradCache sub-batch passes run, the rest at the run ones' mean)")
    elif probe:   # an index job under probe_documents: its encoding priced from a fraction of its documents
        row["how"] += (f" (its encoding projected from {probe['documents_encoded']:,} of its {probe['documents']:,} "
                       "documents encoded, the rest at their mean)")
    once = d["cost"].get("paid_once")
    if once and once.get("rows_built", 0) < once.get("rows", 0):   # LightRetriever's light document table under a probe
        row["how"] += (f" (its token-vector table paid once: projected from {once['rows_built']:,} of its "
                       f"{once['rows']:,} rows built)")
    row["bytes"] = d.get("bytes")
    row["source"] = d["_source"]
    if now is not None and d.get("config_hash") and d["config_hash"] != now:
        row["stale"] = (f"measured with other settings than today's rehearsal (config hash {str(d['config_hash'])[:10]}, "
                        f"now {now[:10]}: the job's or an input's settings changed since)")
    ran = ledger.code_of(d)
    if code is not None and ran != code:
        paths = code_paths(str(stage), job.method, job.step, job.module)
        row["older_code"] = (f"measured on other code than today's ({', '.join(paths)} "
                             + (f"changed since commit {str(d.get('git_commit'))[:7]}" if ran else "at a commit this clone lacks")
                             + ")")
    row["booked_gib"] = round(booked_mem_mb(cfg, job) / 1024, 2)  # what the workflow's resources book
    return row


def machine_ratios(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per pair of machines, how their per-unit costs compare over the jobs measured on both with the same
    settings (same job, dataset and config hash; each machine's newest record): the median, lowest and
    highest ratio of seconds a unit (the first machine's over the second's, the first the slower). The
    estimate adds up rows measured on different machines; this says how far apart those machines are.
    Measured on different days on shared machines: a spread, not a benchmark; ``same_code``: the jobs
    of the pair that also ran the same code (:func:`harness.ledger.code_of`), the others' code changed
    between the two measurements."""
    import statistics

    from harness import ledger

    newest: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for d in records:
        c = d.get("cost") or {}
        if not d.get("config_hash") or not c.get("seconds_per_unit"):
            continue
        per = newest.setdefault((*job_key(d), d["config_hash"]), {})
        m = ledger_machine(d)
        if m not in per or str(d.get("created") or "") > str(per[m].get("created") or ""):
            per[m] = d
    pairs: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for (stage, job_id, dataset, _), per in newest.items():
        names = sorted(per)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                r = float(per[a]["cost"]["seconds_per_unit"]) / float(per[b]["cost"]["seconds_per_unit"])
                same = ledger.code_of(per[a]) is not None and ledger.code_of(per[a]) == ledger.code_of(per[b])
                pairs.setdefault((a, b), []).append((r, f"{stage} {job_id}" + (f" on {dataset}" if dataset else ""), same))
    out = []
    for (a, b), rs in sorted(pairs.items()):
        med = statistics.median(r for r, _, _ in rs)
        if med < 1:   # the slower machine first
            a, b, rs, med = b, a, [(1 / r, j, c) for r, j, c in rs], 1 / med
        out.append({"slower": a, "faster": b, "median": med, "low": min(r for r, _, _ in rs),
                    "high": max(r for r, _, _ in rs), "jobs": sorted(j for _, j, _ in rs),
                    "same_code": sorted(j for _, j, c in rs if c)})
    return out


def every_measurement(root: Any, ledger_records: Iterable[Mapping[str, Any]], cfg: Mapping[str, Any] | None = None
                      ) -> list[dict[str, Any]]:
    """The measured jobs :func:`estimate` chooses from: this machine's under ``root`` (where it exists),
    then the ledgers' (:func:`harness.ledger.measurements`); what :func:`machine_lines` compares. With the
    profile ``cfg``, each with the code it ran (:func:`with_code`)."""

    from harness import ledger, plan

    found = rehearsal_jobs(root, None if cfg is None else cfg.get("profile")) + ledger.measurements(ledger_records)
    return found if cfg is None else with_code(found, step_of(plan.get(cfg)))


def machine_lines(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The reference machine (:func:`harness.ledger.reference_machine`) and :func:`machine_ratios` as
    lines of the estimate's summary (none where every job ran on one machine)."""
    from harness import ledger

    records = list(records)
    machines = {ledger_machine(d) for d in records}
    if len(machines) < 2:
        return []
    ref = ledger.reference_machine(records)
    lines = [f"measured on {len(machines)} machines: each job is projected from {ref} (which measured the most "
             f"jobs) where it ran there with today's settings and method code, else from the machine that did (the hardware column)"]
    return lines + [f"the same job on two machines: {r['slower']} took {r['median']:.2f}x the time a unit of "
                    f"{r['faster']} (median of {len(r['jobs'])} job(s) with the same settings, {r['low']:.2f}x to "
                    f"{r['high']:.2f}x; {len(r['same_code'])} of them on the same code, the others' changed between "
                    f"the two; measured on different days on shared machines); the totals add up rows "
                    f"measured on either, each row names its machine" for r in machine_ratios(records)]


def _held_in_memory(row: Mapping[str, Any]) -> float | None:
    """GiB a job holds in memory at the profile's scale: the indexes it builds or loads
    (``index_gib``) and the corpora it holds whole (``held_gib``); None where neither is projected."""
    parts = [row[k] for k in ("index_gib", "held_gib") if row.get(k) is not None]
    return sum(parts) if parts else None


def _needs_memory(row: Mapping[str, Any]) -> float | None:
    """GiB a job needs booked at the least: what it holds at the profile's scale
    (:func:`_held_in_memory`) or the peak the rehearsal measured (``host_projected_gib`` where its
    corpus grows, else the slice's ``host_peak_gib``: a lower bound of the profile's), the larger;
    None where neither is known (a scaled row's memory is not projected)."""
    peak = row.get("host_projected_gib") if row.get("host_projected_gib") is not None else row.get("host_peak_gib")
    known = [g for g in (_held_in_memory(row), peak) if g is not None and g == g and g > 0]  # g == g: not NaN
    return max(known) if known else None


def _index_held(p: Any, rows: list[dict[str, Any]]) -> None:
    """``index_gib`` of each index row (its projected index, and the indexes it is built from: DPR's
    HNSW, LSH and PQ read DPR's Flat) and search row (the projected indexes it loads), where their rows
    are measured: a faiss or token index is held in memory whole while it is built and searched, so a
    job booked less memory than that is killed on a cluster that enforces its booking (Lucene's index
    and the phrase dump are read from disk: there the figure is high)."""
    built = {(r["job"], r["dataset"]): r.get("disk_gib") for r in rows if r["stage"] == "index"}
    for r in rows:
        if r["stage"] not in ("index", "search"):
            continue
        refs = p.job(r["stage"], r["job"], r["dataset"] or None).inputs.values()
        sizes = [built.get((ref.id, ref.dataset or r["dataset"])) for ref in refs if ref.kind == "index"]
        if r["stage"] == "index":
            sizes.append(r.get("disk_gib"))
        r["index_gib"] = sum(sizes) if sizes and None not in sizes else None


def with_code(records: Iterable[Mapping[str, Any]], step_of: Any) -> list[dict[str, Any]]:
    """``records`` each with its ``code`` (:func:`harness.methods.code.code_id`), read from git at its
    commit where the record has none (a meta.json or ledger line older than the field; a commit marked
    +dirty read as committed); ``step_of((stage, job, dataset))``: the step the job runs and the module
    it is a function of (None where unknown: the record stays without)."""
    from harness.methods.code import code_id

    out = []
    for r in records:
        r = dict(r)
        commit = str(r.get("git_commit") or "")
        if not r.get("code") and "failure" not in r and commit and commit != "unknown":
            key = job_key(r)
            found = step_of(key)
            code = code_id(key[0], r.get("method"), found[0], commit, found[1]) if found else None
            if code:
                r["code"] = code
        out.append(r)
    return out


def step_of(p: Any) -> Any:
    """(stage, job, dataset) -> (the step the job of plan ``p`` runs, its module: ``Job.module``, empty
    where the method's), None where the plan has no such job (:func:`with_code`)."""
    from harness.errors import ConfigError

    def step(key: tuple[str, str, str | None]) -> tuple[str, str] | None:
        try:
            job = p.job(*key)
        except ConfigError:
            return None
        return job.step, job.module
    return step


def _rehearsal_hashes(keys: list[tuple[str, str, str | None]]) -> dict[tuple[str, str, str | None], str]:
    """Today's config hash of each (stage, job, dataset) in the rehearsal (the paper profile with
    its overlay); a job it cannot hash here (an input it cannot read) is left out."""
    if not keys:
        return {}
    from harness import plan
    from harness.config import load_config

    rp = plan.get(load_config([PAPER_CONFIG, REHEARSAL_CONFIG]))
    out = {}
    for key in keys:
        try:
            out[key] = rp.hash(rp.job(*key))
        except Exception:  # noqa: BLE001 - a hash it cannot compute here is "unknown", never an error of the estimate
            continue
    return out


def totals(rows: list[Mapping[str, Any]], gpus: int) -> dict[str, Any]:
    """What the projected rows add up to: hours of the jobs the profile books a GPU for (GPU-hours)
    and of the others (CPU jobs), the best wall time of the GPU jobs on ``gpus`` GPUs (no dependency
    waits), the peaks, and the disk of the artifacts (indexes, dumps, models, runs); with how many
    rows each sum rests on."""
    known = [r for r in rows if r.get("seconds") is not None]
    # GPU-hours come from GPU jobs measured on a GPU (a peak GPU memory recorded); a GPU job the
    # rehearsal ran on a CPU (device_fallback) is priced in that CPU's hours, which are not GPU-hours
    on_cpu = [r for r in known if r.get("gpu_job") and r.get("gpu_peak_gib") is None]
    gpu_h = sum(r["seconds"] for r in known if r.get("gpu_job") and r.get("gpu_peak_gib") is not None) / 3600
    gpu_cpu_h = sum(r["seconds"] for r in on_cpu) / 3600
    cpu_h = sum(r["seconds"] for r in known if not r.get("gpu_job")) / 3600
    sized = [r["disk_gib"] for r in rows if r.get("disk_gib") is not None]
    lower = [r for r in known if r.get("bound") == "lower"]
    upper = [r for r in known if r.get("bound") == "upper"]
    twins = [r for r in known if INIT in r["job"]]
    host = [r["host_peak_gib"] for r in rows if r.get("host_peak_gib") is not None]
    dev = [r["gpu_peak_gib"] for r in rows if r.get("gpu_peak_gib") is not None]
    held = [(r, _needs_memory(r)) for r in rows]
    short = sorted(((f"{r['stage']} {r['job']}" + (f" on {r['dataset']}" if r["dataset"] else ""), gib,
                     r["booked_gib"]) for r, gib in held
                    if gib is not None and r.get("booked_gib") is not None and gib > r["booked_gib"]), key=lambda x: -x[1])
    projected_host = [r["host_projected_gib"] for r in rows if r.get("host_projected_gib") is not None]
    return {"jobs": len(rows), "borrowed": sum(1 for r in rows if r.get("measured_on_dataset") and not r.get("borrowed_from")),
            "siblings": sum(1 for r in rows if r.get("borrowed_from") and not r.get("scaled_by")),
            "scaled": sum(1 for r in rows if r.get("scaled_by")), "under_booked": short,
            "projected": len(known), "gpu_hours": gpu_h, "cpu_hours": cpu_h,
            "gpu_jobs_on_cpu_hours": gpu_cpu_h, "gpu_jobs_on_cpu": len(on_cpu),
            "gpus": gpus, "gpu_wall_hours": gpu_h / max(1, gpus), "host_peak_gib": max(host, default=None),
            "gpu_peak_gib": max(dev, default=None), "disk_gib": sum(sized), "disk_jobs": len(sized),
            "host_projected_gib": max(projected_host, default=None), "holding_jobs": len(projected_host),
            "lower_bounds": len(lower), "lower_bound_hours": sum(r["seconds"] for r in lower) / 3600,
            "upper_bounds": len(upper), "upper_bound_hours": sum(r["seconds"] for r in upper) / 3600,
            # the learning check's controls: each checked model's initial checkpoint, indexed and searched
            "init_twins": len(twins), "init_twin_hours": sum(r["seconds"] for r in twins) / 3600,
            "init_twin_disk_gib": sum(r["disk_gib"] or 0.0 for r in twins)}


def schedule(cfg: Mapping[str, Any], rows: list[Mapping[str, Any]], gpus: int) -> dict[str, Any]:
    """The profile's DAG with the projected seconds of ``rows`` (a job without one counts 0 s): its
    critical path (the longest chain of dependent jobs, with as many GPUs as wanted) and its wall
    time on ``gpus`` GPUs by a list schedule (a ready job with the longest chain below it first; a GPU
    job waits for a free GPU, CPU jobs run beside them unconstrained). Both are lower bounds while any
    job of the chain is unmeasured."""
    import heapq

    from harness import plan

    p = plan.get(cfg)
    jobs = p.closure()
    deps = {k: {d for d in (p.producer(ref) for ref in j.inputs.values()) if d is not None and d != k}
            for k, j in jobs.items()}
    secs = {(r["stage"], r["job"], r["dataset"] or None): float(r["seconds"]) for r in rows if r.get("seconds") is not None}
    children: dict[Any, list[Any]] = {k: [] for k in jobs}
    for k, ds in deps.items():
        for d in ds:
            children[d].append(k)
    # longest chain from each job down (its own seconds included), children before parents
    below: dict[Any, float] = {}
    left = {k: len(children[k]) for k in jobs}
    stack = [k for k, n in left.items() if n == 0]
    while stack:
        k = stack.pop()
        below[k] = secs.get(k, 0.0) + max((below[c] for c in children[k]), default=0.0)
        for d in deps[k]:
            left[d] -= 1
            if left[d] == 0:
                stack.append(d)
    if len(below) != len(jobs):
        raise RuntimeError("the plan's jobs depend on each other in a cycle")  # the plan's own check forbids it
    start = max(jobs, key=lambda k: (below[k], str(k)))
    chain, k = [], start
    while True:
        if secs.get(k):
            chain.append((k, secs[k]))
        if not children[k]:
            break
        k = max(children[k], key=lambda c: (below[c], str(c)))
    # list schedule on the GPUs
    waiting = {k: len(deps[k]) for k in jobs}
    ready = [(-below[k], str(k), k) for k, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    free = [0.0] * max(1, gpus)
    finish: dict[Any, float] = {}
    while ready:
        _, _, k = heapq.heappop(ready)
        t = max((finish[d] for d in deps[k]), default=0.0)
        dur = secs.get(k, 0.0)
        if jobs[k].gpu and dur > 0:
            t = max(t, heapq.heappop(free))
            heapq.heappush(free, t + dur)
        finish[k] = t + dur
        for c in children[k]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, (-below[c], str(c), c))
    untimed: dict[tuple[str, str], list[str]] = {}
    for st, i, d in sorted((k for k in jobs if k not in secs), key=str):
        untimed.setdefault((str(st), i), []).extend([d] if d else [])
    return {"jobs": len(jobs), "timed": sum(1 for k in jobs if k in secs), "gpus": gpus,
            "untimed": [f"{st} {i}" + (f" on {', '.join(ds)}" if ds else "") for (st, i), ds in untimed.items()],
            "critical_hours": below[start] / 3600, "wall_hours": max(finish.values(), default=0.0) / 3600,
            "chain": [(f"{st} {i}" + (f" on {d}" if d else ""), sec / 3600) for (st, i, d), sec in chain]}


def schedule_lines(sc: Mapping[str, Any]) -> list[str]:
    """:func:`schedule` as the lines ``python -m harness estimate`` prints and the report shows."""
    chain = " -> ".join(f"{name} ({h:,.1f} h)" for name, h in sc["chain"]) or "none timed"
    bound = (f"; {sc['jobs'] - sc['timed']} of the profile's {sc['jobs']} jobs have no measured cost and count 0 s: "
             f"lower bounds") if sc["timed"] < sc["jobs"] else ""
    if sc.get("untimed"):
        bound += f" ({'; '.join(sc['untimed'])})"
    return [f"critical path (the longest chain of dependent jobs, GPUs unlimited): {sc['critical_hours']:,.1f} hours: {chain}",
            f"on {sc['gpus']} GPUs (list schedule, longest chain first; CPU jobs beside them): {sc['wall_hours']:,.1f} "
            f"hours wall{bound}"]


#: the DAG's single jobs beside its evaluate and table jobs that the estimate does not price (they read runs
#: and figures and write tables): rule -> what it makes
UNPRICED_SINGLE = {"claims": "claims", "learning": "learning check", "regression": "regression",
                   "decontam_report": "decontamination report", "report": "report site"}
#: the first part of their Snakemake benchmark files under the rehearsal's results (``benchmarks/<part>/``
#: or ``<part>.tsv``; the decontamination report's lies under ``tables/``)
UNPRICED_BENCHMARKS = frozenset({"evaluate", "tables", "claims", "learning", "regression", "report"})


def unpriced_line(cfg: Mapping[str, Any], root: Any) -> str:
    """What the estimate leaves out: the DAG's evaluate jobs (one per test-split search job), one table
    job per paper table and its single jobs (:data:`UNPRICED_SINGLE`), with the seconds Snakemake's
    benchmark files under ``root`` timed them at on the rehearsal's slices (an evaluation's grow with
    the profile's queries)."""
    from harness import plan
    from harness.io import read_benchmarks
    from harness.published import PAPERS, load_published

    evals = len(plan.pin(cfg).evaluated())
    tables = sum(len(load_published(paper)["tables"]) for paper in PAPERS)
    timed = read_benchmarks(Path(root) / "benchmarks")
    seconds = [s for key, s in timed.items() if key.split("/", 1)[0] in UNPRICED_BENCHMARKS]
    said = (f"; on the rehearsal's slices Snakemake's benchmark files time {len(seconds)} of them at "
            f"{min(seconds):,.1f}-{max(seconds):,.1f} s each" if seconds else "; none timed yet")
    return (f"not priced: the DAG's {evals} evaluate jobs (one per test-split search job), {tables} table jobs "
            f"and its {len(UNPRICED_SINGLE)} single jobs ({', '.join(UNPRICED_SINGLE.values())}): they read runs "
            f"and figures and write tables, no cost record{said}")


def summary(t: Mapping[str, Any]) -> list[str]:
    """:func:`totals` as the lines ``python -m harness estimate`` prints and the report shows."""
    peaks = f"peak host memory {t['host_peak_gib']:.1f} GiB" if t["host_peak_gib"] is not None else "no host peak"
    if t["gpu_peak_gib"] is not None:
        peaks += f", peak GPU memory {t['gpu_peak_gib']:.1f} GiB"
    peaks += " (as measured on the rehearsal's slices, not projected: an index grows with the corpus, below)"
    if t.get("host_projected_gib") is not None:
        peaks += (f"; {t['holding_jobs']} job(s) hold their corpus (or its ids and offsets) in memory, up to "
                  f"{t['host_projected_gib']:,.1f} GiB projected at the profile's corpus")
    short = t.get("under_booked") or []
    booked = (f"memory booked below the projected index or corpus, or the measured peak: {len(short)} job(s) build "
              f"or load an index, or hold a corpus, larger than the memory the workflow books them (mem_mb; a faiss "
              f"or token index is held in memory whole, Lucene's index and the phrase dump are read from disk), or "
              f"peaked above it on the rehearsal's slice: "
              + ", ".join(f"{name} {gib:,.1f} GiB > {b:,.1f} GiB booked" for name, gib, b in short[:8])
              + (f", and {len(short) - 8} more" if len(short) > 8 else "")
              + " (a folder's whole size: high where it holds a dump read from disk, as DensePhrases' does); on a "
                "cluster that enforces its bookings book them at least their index or that peak: the profile's scheduler.mem_mb "
                "('<stage> <job id>': MB)") if short else None
    borrowed, sib, sc = t.get("borrowed", 0), t.get("siblings", 0), t.get("scaled", 0)
    also = ([f"{borrowed} index, search and measure jobs projected from the same job measured on another dataset"]
            if borrowed else []) \
        + ([f"{sib} variant and @init jobs from the per-unit cost of the job they vary (or of another "
            f"variant's, whose models differ in training alone), the same step on the same encoder shape, or a "
            f"fusion from a fusion of the same kind"] if sib else []) \
        + ([f"{sc} variant jobs on another backbone scaled from their method's measured job by the backbones' "
            f"matmul parameters: rough, never measured"] if sc else [])
    return [f"jobs measured: {t['jobs'] - borrowed - sib - sc}" + (f" (and {'; '.join(also)})" if also else "")
            + f"; projected: {t['projected']}; no count to project from: {t['jobs'] - t['projected']}"
            + (f"; {t['lower_bounds']} jobs ({t['lower_bound_hours']:,.1f} h) are lower bounds (searches measured "
               f"against a slice's index, far smaller than the profile's corpus; an IVF trained with fewer lists; an HNSW "
               f"graph built over a slice; measure jobs, as measured on the slices)"
               if t["lower_bounds"] else "")
            + (f"; {t['upper_bounds']} jobs ({t['upper_bound_hours']:,.1f} h) are upper bounds (priced from a job that "
               f"does more: a dense-only index from one that also builds the sparse side; input-embedding queries "
               f"from cached-vector ones)" if t.get("upper_bounds") else ""),
            f"GPU jobs (the profile books a GPU) measured on a GPU: {t['gpu_hours']:,.1f} GPU-hours; on {t['gpus']} "
            f"GPUs at best {t['gpu_wall_hours']:,.1f} hours wall (no dependency waits)",
            *([f"GPU jobs measured on a CPU (device_fallback): {t['gpu_jobs_on_cpu']} job(s), "
               f"{t['gpu_jobs_on_cpu_hours']:,.1f} hours of that CPU: not GPU-hours (run them on a GPU to price them)"]
              if t.get("gpu_jobs_on_cpu") else []),
            f"CPU jobs: {t['cpu_hours']:,.1f} hours of job time",
            peaks,
            *([booked] if booked else []),
            f"disk: {t['disk_gib']:,.1f} GiB of artifacts ({t['disk_jobs']} jobs sized: indexes and runs scaled by "
            f"their documents and queries, a phrase dump at its profile's filter.kept_fraction of tokens, "
            f"models as measured)",
            *([f"of which the learning check's initial checkpoints (the @init twins: each checked model untrained, "
               f"indexed and searched as it is): {t['init_twins']} job(s), {t['init_twin_hours']:,.1f} h and "
               f"{t['init_twin_disk_gib']:,.1f} GiB; learning.check: none leaves them out (each model's loss check stays)"]
              if t.get("init_twins") else [])]


def _bound_search(cfg: Mapping[str, Any], job: Any, row: dict[str, Any], searched: int | None) -> None:
    """A search job's seconds per query were measured against the slice's index: searching the
    profile's corpus costs more per query (an exhaustive scan grows with it), so its projection is a
    lower bound, and says over how many documents each query was measured."""
    full = _documents(cfg, job.dataset)
    if searched and full and full > searched:
        row["how"] += f" (each searched {searched:,} documents here, {full:,} in the profile: a lower bound)"
        row["bound"] = "lower"


def _price_generator(cfg: Mapping[str, Any], job: Any, row: dict[str, Any], gen: Mapping[str, Any]) -> None:
    """A train job that wrote its own training queries (QCR-uns.: Gemma-2-2b, one query a passage;
    meta.json ``generator``: the passages and seconds it ran) pays its generator per passage, not once:
    the row's seconds take the measured generation out of what the job paid once and put back its
    seconds a passage x the profile's passages (``generator.max_passages``, else every passage of the
    corpus it trains on: MS MARCO's 8.8M for the paper's QCR-uns.). A profile that writes longer queries
    (``max_new_tokens``) is scaled linearly by them (decoding is per token; the prompt's pass is not)."""
    ran, secs = int(gen.get("passages") or 0), float(gen.get("seconds") or 0.0)
    if row.get("seconds") is None or ran <= 0:
        return
    s = _train_settings(cfg, job)
    g = s.get("generator") or {}
    if s.get("training_data") != "generated":   # the profile's job writes no queries: none to price
        row["seconds"] -= secs
        row["how"] += f" (less its generator's {secs:,.0f} s: the profile's job generates no queries)"
        return
    n = g.get("max_passages") or _documents(cfg, s.get("train_dataset"))
    if not n:
        row["how"] += f" (its generator's {secs:,.0f} s for {ran:,} passages priced once: the profile's corpus has no count)"
        return
    per = secs / ran
    tokens, ran_tokens = int(g.get("max_new_tokens") or 0), int(gen.get("max_new_tokens") or 0)
    scale = tokens / ran_tokens if tokens and ran_tokens else 1.0
    row["seconds"] += n * per * scale - secs
    row["how"] += (f" + its generator's queries: {int(n):,} passages x {per:.2f} s a passage (measured on {ran:,} "
                   f"passages on {gen.get('device', '?')}" + (f", x {tokens} / {ran_tokens} new tokens" if scale != 1.0
                                                                else "") + ")")


def _note_sub_batches(cfg: Mapping[str, Any], job: Any, row: dict[str, Any], measured: Any) -> None:
    """A train job measured in GradCache sub-batches where the profile trains in one graph (or in
    other sub-batches): the row says so. A GradCache step encodes every text twice (once without a
    graph), about 4/3 of one graph's compute, so such a projection is high where the profile trains in
    one graph; it is not rescaled. The profile's sub-batches are the job's own (a variant's where it sets them:
    LightRetriever's 8B models take 8 where its main model takes 64), under its method's sub-batch key
    (QCR's ``chunk_size``: :func:`harness.methods.base.sub_batch_key`)."""
    from harness.methods.base import sub_batch_key

    if job.stage != "train" or not measured:
        return
    key = (sub_batch_key(job.method) or "grad_cache_chunk").rsplit(".", 1)[-1]
    want = int(_train_settings(cfg, job).get(key) or 0)
    if int(measured) != want:   # sub-batches both ways: the same passes, in smaller or larger pieces
        row["how"] += (f" (measured in GradCache sub-batches of {int(measured)}, the profile "
                       + (f"uses {want})" if want else "trains in one graph: about 4/3 of one graph's compute)"))


def main(argv: list[str]) -> int:
    """``python -m harness estimate --config configs/profiles/paper.yaml [--measured DIR] [--ledger DIR |
    --no-ledger] [--gpus N] [--csv FILE]``, or ``--record`` to write this machine's measured jobs into
    the ledger (:mod:`harness.ledger`)."""
    import argparse
    from pathlib import Path

    import pandas as pd

    from harness import ledger, plan
    from harness.config import add_config_argument, load_config
    from harness.errors import ConfigError, DataError

    ap = argparse.ArgumentParser(prog="python -m harness estimate",
                                 description="project the cost of a profile's jobs from a rehearsal's measured costs")
    add_config_argument(ap)
    ap.add_argument("--measured", type=Path, default=None,
                    help="results folder of the rehearsal (default: <results_dir>/rehearsal)")
    ap.add_argument("--ledger", type=Path, default=ledger.LEDGER_DIR,
                    help=f"the committed costs measured elsewhere (default: {ledger.LEDGER_DIR}; harness/ledger.py)")
    ap.add_argument("--no-ledger", action="store_true", help="project from --measured alone")
    ap.add_argument("--record", action="store_true",
                    help="write the measured jobs and failures of --measured into the ledger of this machine, then stop")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs of the wall-time projection (default 8)")
    ap.add_argument("--csv", type=Path, default=None, help="also write the per-job table here")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    root = args.measured or Path(cfg["results_dir"]) / "rehearsal"
    if args.record:
        jobs, failed = rehearsal_jobs(root, cfg.get("profile")), failures(root)
        if not jobs and not failed:
            raise DataError(f"{root}: no finished or failed rehearsal job to record",
                            fix="run rehearsal jobs first (see --help of python -m harness estimate)")
        skipped: list[str] = []
        hashes = _rehearsal_hashes([job_key(d) for d in jobs])
        jobs = with_code(jobs, step_of(plan.get(cfg)))   # a meta.json older than its code field: from git
        for path, n in ledger.record(root, args.ledger, hashes, skipped, jobs=jobs, failed=failed).items():
            print(f"{path}: {n['jobs']} measured job(s), {n['failures']} failure(s)")
        if skipped:
            print(f"not recorded, measured with other settings than the rehearsal's (rehearsal-tiny, or an override "
                  f"that changes the job): {', '.join(skipped)}")
        return 0
    if cfg.get("profile") == "rehearsal":  # its slices are measured, never projected to: the counts are the cards'
        raise ConfigError(f"profile: rehearsal (from {', '.join(map(str, args.config))}): the estimate projects the "
                          "rehearsal's per-unit costs to the paper profile's counts (the datasets' cards), not to "
                          "the rehearsal's own slices",
                          fix="drop configs/profiles/rehearsal.yaml: python -m harness estimate --config "
                              "configs/profiles/paper.yaml (--record reads the rehearsal's folder with either)")
    records = [] if args.no_ledger else ledger.read(args.ledger)
    rows = estimate(cfg, root, records)
    if not rows:
        raise DataError(f"{root}: no finished rehearsal job with a cost in its meta.json"
                        + ("" if args.no_ledger else f", and no ledger under {args.ledger}"),
                        fix="run the rehearsal first: snakemake --cores all reproduce_all --configfile "
                            "configs/profiles/paper.yaml configs/profiles/rehearsal.yaml")
    df = pd.DataFrame(rows)
    df["hours"] = df["seconds"] / 3600
    if args.csv:
        df.to_csv(args.csv, index=False)
    show = df[["stage", "job", "dataset", "measured_seconds", "pricing", "how", "hours", "host_peak_gib",
               "gpu_peak_gib", "disk_gib", "hardware", "papers_own"]]
    with pd.option_context("display.max_rows", None, "display.width", 200, "display.max_colwidth", 60):
        print(show.to_string(index=False, float_format=lambda x: f"{x:,.2f}"))
    own = df
    for col in ("measured_on_dataset", "borrowed_from"):  # not the rows priced from another job's measure
        own = own[own[col].isna()] if col in own else own
    print("\nmeasured where: " + "; ".join(f"{n} job(s) from {s}" for s, n in own["source"].value_counts().sort_index().items()))
    stale = own[own["stale"].notna()] if "stale" in own else own.iloc[:0]
    if len(stale):
        print(f"{len(stale)} job(s) measured with other settings than today's rehearsal (rerun and --record them): "
              + ", ".join(f"{r.stage} {r.job}" + (f" on {r.dataset}" if r.dataset else "") for r in stale.itertuples()))
    older = own[own["older_code"].notna()] if "older_code" in own else own.iloc[:0]
    if len(older):
        print(f"{len(older)} job(s) projected from a record of other code than today's, none measured on today's "
              "(rerun and --record them; a change may or may not move the cost): "
              + ", ".join(f"{r.stage} {r.job}" + (f" on {r.dataset}" if r.dataset else "") for r in older.itertuples()))
    failed = ledger.every_failure(root, records)
    if failed:
        print(f"\n{len(failed)} job(s) of the rehearsal failed or did not finish (from their logs):")
        for log, line in failed:
            print(f"  {log}: {line}")
    hw = ", ".join(sorted(set(df["hardware"])))
    print(f"\nprojected (kind: projected; measured on {hw}; per-unit costs of the rehearsal x the profile's counts;"
          f" pricing steady: a train job's fixed seconds once + its median later step x the profile's steps;"
          f" pricing per stage: a schedule's stages each at its own measured step;"
          f" pricing whole: a job's start-up (imports, JVM, model load) is priced per unit too, so small slices"
          f" over-project):")
    for line in (summary(totals(rows, args.gpus)) + schedule_lines(schedule(cfg, rows, args.gpus))
                 + [unpriced_line(cfg, root)] + machine_lines(every_measurement(root, records, cfg))):
        print(f"  {line}")
    return 0
