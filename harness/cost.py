"""What a job costs, measured: every stage job's meta.json ``cost`` (projected to the paper
profile's full counts by :mod:`harness.estimate`, ``python -m harness estimate``; #28), and the
fallbacks and memory cap a rehearsal job runs under.

Every train, index, search and measure job records its wall seconds, the peak resident memory of its
process, the peak GPU memory where it used one, the device and precision it ran on, and its units of
work: optimizer steps (train: at the job's own batch size), documents (index, per 1,000) and queries
(search). The rehearsal (configs/profiles/rehearsal.yaml) runs every job of the paper DAG at the
papers' model shapes on slices of data, so ``seconds per unit`` there is the paper's per-unit cost on
the rehearsal's hardware; :func:`harness.estimate.project` multiplies it by the paper profile's counts (the dataset
cards' corpus sizes and split records, the method's epochs and batch size). Every projected figure
says it is projected, and from which hardware.
"""
from __future__ import annotations

import contextlib
import resource
import statistics
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


#: stage -> (the meta.json field that counts its work, the unit it is priced in, units per count):
#: the hard negatives' BM25 searches per training question, the decontamination per 1,000 queries hashed
#: (training and test sets together)
UNITS = {"train": ("steps", "step", 1), "index": ("documents", "1k documents", 1000), "search": ("queries", "query", 1),
         "negatives": ("queries", "query", 1), "decontam": ("queries", "1k queries", 1000)}

#: a train job that takes no optimizer step but reports the tokens it worked over (QCR's k-means: its
#: sample's token vectors encoded, then clustered niter times into the same K) is priced per 1,000 of them
TRAIN_TOKENS = ("tokens", "1k tokens", 1000)

#: the stages whose start-up mark (:func:`startup_done`) prices them steady: an index's start-up, the
#: hard negatives' JVM. A search's seconds are spread over its queries whatever mark a process holds.
MARKED = ("index", "negatives")


#: this job's optimizer steps, timed by harness.train.train_loop: the first of each loop (CUDA and
#: allocator warm-up, lazy inits) and the later ones, whose median is the steady price of a step
_STEPS: dict[str, list[float]] = {"first": [], "later": [], "measured": []}
#: a train job of at most this many optimizer steps (a rehearsal's) keeps each step's seconds in its cost
MAX_STEPS_KEPT = 64


def step_timed(seconds: float, first: bool, projected: float = 0.0) -> None:
    """One optimizer step took ``seconds``; ``projected``: the seconds a cost probe skipped in it
    (:func:`probe_timed`), added to its price."""
    _STEPS["first" if first else "later"].append(seconds + projected)
    _STEPS["measured"].append(seconds)


#: a cost probe's totals (harness.train.grad_cache_step under ``probe_sub_batches``): the GradCache
#: sub-batches run and in all, and the seconds projected for the running step's skipped ones
_PROBE: dict[str, float] = {"run": 0, "of": 0, "step": 0.0}


def probe_timed(seconds: float, run: int, of: int) -> None:
    """A probed GradCache pass ran ``run`` of its ``of`` sub-batches in ``seconds``: the other
    ``of - run`` are projected at the run ones' mean (sub-batches of one batch have one shape)."""
    _PROBE["run"] += run
    _PROBE["of"] += of
    _PROBE["step"] += seconds / run * (of - run)


def probe_step_done() -> float:
    """The seconds projected for the step that just ended (0 without a probe); resets the step's count."""
    out, _PROBE["step"] = _PROBE["step"], 0.0
    return out


def probe_summary() -> dict[str, Any] | None:
    """What the job's probe ran and projected (None without one), for its meta.json."""
    if not _PROBE["of"]:
        return None
    projected = sum(_STEPS["first"]) + sum(_STEPS["later"]) - sum(_STEPS["measured"])   # priced minus timed
    return {"sub_batches_run": int(_PROBE["run"]), "sub_batches": int(_PROBE["of"]),
            "projected_seconds": round(projected, 3)}


#: an index job's encoding probe (a rehearsal's, LightRetriever's ``probe_documents``): the documents
#: encoded and in all, and the seconds projected for the ones given copies of the encoded ones' vectors
_ENCODE_PROBE: dict[str, float] = {"run": 0, "of": 0, "seconds": 0.0}


def probe_encoded(seconds: float, run: int, of: int) -> None:
    """An index job encoded ``run`` of its ``of`` documents in ``seconds`` (a cost probe): the other
    ``of - run`` are projected at the run ones' mean seconds a document."""
    if run < 1 or of < run:
        raise ValueError(f"a probe encodes 1 to {of} documents, got {run}")
    _ENCODE_PROBE.update(run=run, of=of, seconds=seconds / run * (of - run))


def _encode_probe_summary() -> dict[str, Any] | None:
    """What the job's encoding probe encoded and projected (None without one; a probe always projects
    some documents: it starts copying only where documents remain), for its meta.json."""
    if not _ENCODE_PROBE["of"]:
        return None
    return {"documents_encoded": int(_ENCODE_PROBE["run"]), "documents": int(_ENCODE_PROBE["of"]),
            "projected_seconds": round(_ENCODE_PROBE["seconds"], 3)}


#: what an index job paid once after its start-up mark, whatever its corpus's size (LightRetriever's light
#: document side: the token-vector table of its vocabulary), and the seconds a probe projected for the
#: rows it skipped (:func:`paid_once`)
_ONCE: dict[str, float] = {"seconds": 0.0, "run": 0, "of": 0, "projected": 0.0}


def paid_once(seconds: float, run: int, of: int) -> None:
    """An index job built ``run`` of the ``of`` rows of a table it pays for once (not per document) in
    ``seconds``: priced with its start-up (``fixed_seconds``), the other ``of - run`` rows (a cost probe
    built only those its encoded documents read) projected at the built ones' mean."""
    if run < 1 or of < run:
        raise ValueError(f"a table paid once builds 1 to {of} rows, got {run}")
    _ONCE.update(seconds=float(seconds), run=int(run), of=int(of), projected=seconds / run * (of - run))


def _once_summary() -> dict[str, Any] | None:
    """What the job paid once after its start-up (None where nothing), for its meta.json."""
    if not _ONCE["of"]:
        return None
    return {"seconds": round(_ONCE["seconds"], 3), "rows_built": int(_ONCE["run"]), "rows": int(_ONCE["of"]),
            "projected_seconds": round(_ONCE["projected"], 3)}


#: the corpora this job holds in memory whole (harness.datasets.store.corpus_by_id and its kin): per
#: dataset folder name, the documents and their estimated bytes in Python objects, which grow with the
#: corpus (python -m harness estimate projects them to the profile's corpus)
_HELD: dict[str, dict[str, int]] = {}


def corpus_held(dataset: str, documents: int, nbytes: int, *, csr_entries: int | None = None) -> None:
    """Note that this job holds ``documents`` records of ``dataset``'s corpus, about ``nbytes`` bytes.
    A second hold of the same corpus counts once, the larger (the reader reads its corpus in two steps,
    one after the other); holds of different corpora add up (LightRetriever keeps NQ's and MS MARCO's).
    ``csr_entries``: what is held is a scipy CSR of that many stored entries (SVDR's E(D)), whose ids
    and offsets turn int64 once the profile's corpus takes it past 2^31 entries (the estimate's rule,
    :func:`harness.estimate.csr_bytes`)."""
    got = _HELD.setdefault(str(dataset), {"documents": 0, "bytes": 0})
    if int(nbytes) > got["bytes"]:
        got.clear()
        got.update(documents=int(documents), bytes=int(nbytes))
        if csr_entries is not None:
            got["csr_entries"] = int(csr_entries)


#: this process's device fallbacks: whether the job may take them (config ``device_fallback``, set by
#: harness.stages before the step) and those it took (meta.json ``fallbacks``)
_FALLBACK: dict[str, Any] = {"allowed": False, "taken": []}


#: when this job began and where its start-up ended (:func:`startup_done`), perf_counter seconds
_START: dict[str, float | None] = {"job": None, "work": None}


def allow_fallbacks(allowed: bool) -> None:
    """Start a job: fallbacks allowed or not, none taken yet, no step timed yet, no start-up marked."""
    import time

    _FALLBACK.update(allowed=bool(allowed), taken=[])
    _STEPS.update(first=[], later=[], measured=[])
    _PROBE.update(run=0, of=0, step=0.0)
    _ENCODE_PROBE.update(run=0, of=0, seconds=0.0)
    _ONCE.update(seconds=0.0, run=0, of=0, projected=0.0)
    _HELD.clear()
    _CHILDREN.clear()
    _START.update(job=time.perf_counter(), work=None)


def startup_done() -> None:
    """An index job's start-up (imports, loading its model, starting the JVM) ends here: what follows
    (reading, encoding and indexing the documents, writing the index) is its work, which the estimate
    prices per document; the start-up is paid once (``pricing: steady``). Without the mark a job's
    every second is spread over its documents, and a slice of a few thousand over-projects."""
    import time

    _START["work"] = time.perf_counter()


def fallback(what: str) -> bool:
    """Whether the job may run ``what`` (e.g. "device cuda -> cpu: no CUDA device") instead of what its
    config asks; recorded when it may. The caller raises its own error when it may not."""
    if _FALLBACK["allowed"] and what not in _FALLBACK["taken"]:
        _FALLBACK["taken"].append(what)
    return bool(_FALLBACK["allowed"])


def fallbacks() -> list[str]:
    return list(_FALLBACK["taken"])


def _proc_bytes(path: str, field: str) -> int | None:
    """A ``<field>: <n> kB`` line of a /proc file, in bytes; None where it cannot be read."""
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def mem_available() -> int | None:
    """Bytes of MemAvailable (/proc/meminfo; else free physical pages), None where neither can be read."""
    avail = _proc_bytes("/proc/meminfo", "MemAvailable")
    if avail is None:
        try:
            import os

            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError):
            return None
    return avail


def _vm_size() -> int:
    return _proc_bytes("/proc/self/status", "VmSize") or 0


_OOM_MARKS = ("can't allocate memory", "not enough memory", "out of memory", "cannot allocate memory",
              "can't start new thread")  # (a Python thread under the cap: its stack is memory too)


@contextlib.contextmanager
def memory_guard(what: str, enabled: bool = True, sub_batch: str | None = None) -> Iterator[None]:
    """Run ``what`` (e.g. "train dpr") with its address space capped at what it has plus the memory
    the machine has available, so that a job too large for the machine fails with one line naming the
    memory it had and what it was allocating (ResourceError), instead of the kernel's OOM killer
    ending it (or another process) without a word. ``sub_batch``: the job's GradCache setting
    (:func:`harness.methods.base.sub_batch_key`), which the error's fix names. POSIX only; a no-op
    where limits cannot be set."""
    from harness.errors import ResourceError

    smaller = (f", or set {sub_batch} to train the same batch in sub-batches of that many texts or questions (the "
               "same gradients; the activations of one sub-batch at a time)") if sub_batch else ""
    gpu = _cuda_device()
    # no address-space cap on a machine with a GPU (torch need not be loaded yet: the job imports it
    # after the guard begins): the GPU's memory is what limits such a job (its out-of-memory error is
    # reported below), and CUDA maps the device memory it allocates into the process's address space.
    # Under the cap, on an H200 (125 GiB of host memory), LightRetriever-8B's step failed with "CUDA out
    # of memory" at 90 GiB allocated and 49 GiB free, and the 1B model's save failed to allocate 64 MB
    # of host memory with 125 GiB available
    avail = mem_available() if enabled and gpu is None and not gpu_present() else None
    if avail is not None:
        from harness.threads import start_pools

        start_pools()  # threads created later, near the cap, end the process without a word (harness.threads)
    try:
        old = resource.getrlimit(resource.RLIMIT_AS)
        if avail is not None:
            resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + int(avail * 0.9), old[1]))  # room for the others
    except (ValueError, OSError):
        avail = None
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        oom = isinstance(exc, MemoryError) or any(m in text.lower() for m in _OOM_MARKS)
        gpu = gpu or _cuda_device()  # torch may have loaded after the guard began (the job imports it)
        if enabled and oom and gpu is not None and "cuda" in text.lower():
            peak, total = _gpu_memory()
            raise ResourceError(f"{what}: out of GPU memory at this shape ({text[:200]}); it had allocated "
                                f"{peak / 2**30:.1f} GiB at its peak of the {total / 2**30:.1f} GiB of {gpu}",
                                fix="run it on a GPU with more memory" + (smaller or ", or shrink its batch in the "
                                                                                         "profile")) from None
        if avail is None or not oom:
            raise
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        raise ResourceError(f"{what}: out of memory at this shape ({text[:200]}); it held {peak / 2**30:.1f} GiB at its "
                            f"peak, the machine had {avail / 2**30:.1f} GiB available when it started",
                            fix="run it where there is more memory (a GPU node for cuda jobs)"
                                + (smaller or ", or shrink its batch in the profile")) from None
    finally:
        if avail is not None:
            resource.setrlimit(resource.RLIMIT_AS, old)


def gpu_present() -> bool:
    """Whether this machine has an NVIDIA GPU a job may use, read from the driver's device files
    (/dev/nvidia0, ...) without importing torch; CUDA_VISIBLE_DEVICES set to nothing (or -1) hides it."""
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return any(p.name[len("nvidia"):].isdigit() for p in Path("/dev").glob("nvidia*"))


def _cuda_device() -> str | None:
    """The name of the CUDA device torch sees, where torch is loaded and sees one; else None."""
    torch = sys.modules.get("torch")
    try:
        return torch.cuda.get_device_name() if torch is not None and torch.cuda.is_available() else None
    except (RuntimeError, AssertionError):
        return None


def _gpu_memory() -> tuple[int, int]:
    """(bytes torch allocated at its peak on the current CUDA device, the device's total bytes)."""
    torch = sys.modules["torch"]
    return int(torch.cuda.max_memory_allocated()), int(torch.cuda.get_device_properties(0).total_memory)


#: the own peaks (bytes) of the child processes this job ran work in (:func:`child_peak`)
_CHILDREN: list[int] = []


def own_peak_bytes() -> int:
    """This process's own peak resident memory: its address space's high-water mark (``VmHWM``), which
    an exec'd process starts afresh. ``ru_maxrss`` (the fallback where /proc is absent) also keeps the
    peak of the process that forked it: a fresh child of a 600 MB parent reports 600 MB holding nothing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child_peak(nbytes: int) -> None:
    """Count a child process's own peak (its :func:`own_peak_bytes`, sent back by the child) in this
    job's: a measure job times each system in a fresh process (densephrases.measure._in_child)."""
    _CHILDREN.append(int(nbytes))


def peaks() -> dict[str, Any]:
    """Peak resident memory of the job (bytes) and, where torch used a GPU here, its peak allocated
    GPU memory and the device's name.

    A job that ran work in a child process (:func:`child_peak`) counts the largest child beside its own
    peak: ``host_peak_bytes`` is then their sum, an upper bound where the two did not overlap, with each
    part under ``host_self_peak_bytes`` and ``host_children_peak_bytes``. Without it the job's peak was
    its parent's alone, far below what the job needs booked. (Not ``RUSAGE_CHILDREN``: every child's
    figure there starts at its parent's peak, a ``git`` run included.)"""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    children = max(_CHILDREN, default=0)
    out: dict[str, Any] = {"host_peak_bytes": own + children}
    if children:
        out.update(host_self_peak_bytes=own, host_children_peak_bytes=children)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["gpu_peak_bytes"] = int(torch.cuda.max_memory_allocated())
        out["gpu"] = torch.cuda.get_device_name()
    return out


def record(stage: str, info: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """The ``cost`` of a finished job: seconds, peaks, and seconds per unit of its stage's work.

    A train job that timed two optimizer steps or more is priced as ``fixed_seconds`` (imports, the
    model's build and load, the first step's warm-up, saving: paid once) plus ``seconds_per_unit`` =
    the median of its later steps (``steady``); an index job that marked the end of its start-up
    (:func:`startup_done`) as that start-up (and what it paid once after it: :func:`paid_once`) once plus
    the rest per 1,000 documents (``steady``), as is
    the hard negatives' job that marked it (its BM25 searcher's JVM) per training question;
    otherwise every second is spread over its units (a slice's start-up then over-projects, and the
    estimate says so)."""
    out: dict[str, Any] = {"seconds": round(seconds, 3), **peaks()}
    probe = probe_summary() if stage == "train" else _encode_probe_summary() if stage == "index" else None
    if probe:   # priced as if the skipped sub-batches (documents) had run: the job's seconds stay as measured
        out["probe"] = probe if stage == "index" else \
            {**probe, "measured_step_seconds": [round(x, 3) for x in _STEPS["measured"][:MAX_STEPS_KEPT]]}
        seconds += probe["projected_seconds"]
    once = _once_summary() if stage in MARKED else None
    if once:   # priced once with the start-up: the rows a probe skipped as if built
        out["paid_once"] = once
        seconds += once["projected_seconds"]
    field, unit, per = UNITS.get(stage, (None, None, 1))
    if stage == "train" and not info.get(field) and info.get(TRAIN_TOKENS[0]):
        field, unit, per = TRAIN_TOKENS
    count = info.get(field) if field else None
    if isinstance(count, (int, float)) and count > 0:
        units = count / per
        out.update(unit=unit, units=units, seconds_per_unit=seconds / units)
        later = _STEPS["later"] if stage == "train" else []
        if later:
            steady = statistics.median(later)
            fixed = seconds - steady * units
            if probe:   # what the job paid once, as measured: the first step's warm-up is not projected
                ran = _STEPS["measured"]
                fixed = out["seconds"] - sum(ran) + max(0.0, ran[0] - statistics.median(ran[1:]))
            out.update(seconds_per_unit=steady, fixed_seconds=round(max(0.0, fixed), 3),
                       first_step_seconds=round(sum(_STEPS["first"]), 4), steps_timed=len(later), pricing="steady")
        marked = _START["work"] is not None and _START["job"] is not None
        if stage in MARKED and (marked or once):
            fixed = max(0.0, _START["work"] - _START["job"]) if marked else 0.0
            fixed = min(fixed + (once["seconds"] + once["projected_seconds"] if once else 0.0), seconds)
            out.update(seconds_per_unit=(seconds - fixed) / units, fixed_seconds=round(fixed, 3), pricing="steady")
        docs, corpus_s = info.get("corpus_documents"), info.get("corpus_seconds")
        if stage == "search" and isinstance(docs, int) and docs > 0 and isinstance(corpus_s, (int, float)):
            # a search that encodes and indexes its corpus itself (BPR's train variants): that part grows
            # with the corpus, the rest with the queries (python -m harness estimate prices both)
            corpus_s = min(float(corpus_s), seconds)
            out.update(seconds_per_unit=(seconds - corpus_s) / units, corpus_documents=docs,
                       corpus_seconds_per_1k=corpus_s / (docs / 1000), pricing="corpus + queries")
        each = _STEPS["first"] + _STEPS["later"]  # in order: a schedule's stages are priced one by one
        if stage == "train" and 2 <= len(each) <= MAX_STEPS_KEPT:
            out["each_step_seconds"] = [round(x, 4) for x in each]
    if _HELD:
        out["held_corpora"] = {k: dict(v) for k, v in sorted(_HELD.items())}
    return out
