"""The vocabulary of the plan: stages, the artifacts they write, and a job's declaration.

A method declares its work as :class:`Job` records (``harness.methods.<name>.declare``); the plan
(:mod:`harness.plan`) collects them, derives paths and hashes, and resolves inputs (:class:`Ref`).
This module imports nothing of the harness, so that methods, the plan and the workflow can all
use it without importing each other.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any


class Stage(str, Enum):
    """A stage of the plan and the kind of artifact its jobs write (one place for the map; a
    ``Stage`` compares equal to its name, so ``job.stage == "train"`` holds for either)."""

    DECONTAM = "decontam"
    NEGATIVES = "negatives"
    TRAIN = "train"
    INDEX = "index"
    SEARCH = "search"
    MEASURE = "measure"

    @property
    def artifact(self) -> str:
        """The kind of artifact (a :class:`Ref` kind) this stage writes."""
        return _ARTIFACT[self.value]

    @property
    def per_dataset(self) -> bool:
        """Whether each of its artifacts belongs to one dataset (not a model, not the decontamination)."""
        return self.value not in ("train", "decontam")

    @classmethod
    def writing(cls, kind: str) -> Stage | None:
        """The stage whose jobs write artifacts of ``kind`` (None for data, which no job of the plan makes)."""
        return next((s for s in cls if s.artifact == kind), None)

    def __str__(self) -> str:
        return self.value


_ARTIFACT = {"decontam": "decontam", "negatives": "negatives", "train": "model", "index": "index", "search": "run", "measure": "metrics"}

#: the suffix of a learning check's control (harness.plan.learning_twins): model ``dpr@init`` is model
#: ``dpr`` before training, job ``densephrases.rc@init`` its measure job on the initial checkpoints
INIT = "@init"

#: the stages, in order
STAGES = tuple(s.value for s in Stage)
#: input kinds a job may name
KINDS = ("data", "negatives", "decontam", "model", "index", "run", "metrics", "system")


@dataclass(frozen=True)
class Ref:
    """An input: ``kind`` (data, negatives, decontam, model, index, run, metrics, system), the
    producing job's id (model, index, run, metrics) or a system id (``system``: the run folder of
    whichever search job writes that system), and the dataset (all kinds but model, decontam)."""

    kind: str
    id: str | None = None
    dataset: str | None = None


@dataclass(frozen=True)
class Job:
    """One unit of work of a stage. ``dataset`` None on an index job makes it a template that any
    dataset instantiates (an index is built wherever an input asks for one)."""

    stage: str
    id: str
    method: str                       # config section methods.<method> (or a step's top-level section)
    step: str                         # function of ``module``: step(ctx, job, inputs, out)
    dataset: str | None = None
    inputs: Mapping[str, Ref] = field(default_factory=dict)
    keys: tuple[str, ...] = ()        # dotted config keys this job reads (inputs' keys come through their hashes)
    params: Mapping[str, Any] = field(default_factory=dict)
    systems: tuple[str, ...] = ()     # search / measure: the system ids whose files the job writes
    gpu: bool = False                 # asks for a GPU on a cluster (config device: cuda)
    mem_mb: int = 8000
    module: str = ""                  # the module whose ``step`` runs the job (default: the method's)

    def at(self, dataset: str) -> Job:
        """This template instantiated for ``dataset`` (inputs without a dataset get it)."""
        inputs = {r: (replace(ref, dataset=dataset) if ref.dataset is None and ref.kind in ("data", "index", "run")
                      else ref) for r, ref in self.inputs.items()}
        return replace(self, dataset=dataset, inputs=inputs)


def output_ref(job: Job) -> Ref:
    """The artifact ``job`` writes (a model belongs to no dataset)."""
    stage = Stage(job.stage)
    return Ref(stage.artifact, job.id, job.dataset if stage.per_dataset else None)
