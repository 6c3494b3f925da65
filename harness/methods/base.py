"""What every method step receives: the config, the method's section, the dataset folder."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from harness.settings import results_root
from harness.errors import ConfigError


def section(cfg: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The config section of a method (``methods.<name>``) or of a step (top-level ``<name>``,
    e.g. the reader); None if the config has neither."""
    methods = cfg["methods"]
    present = dict.__contains__(methods, name) if isinstance(methods, dict) else name in methods  # not a read
    return methods[name] if present else cfg.get(name)


@dataclass(frozen=True)
class Context:
    cfg: Mapping[str, Any]
    method: str
    dataset: str | None = None

    @property
    def mcfg(self) -> Mapping[str, Any]:
        found = section(self.cfg, self.method)
        if found is None:
            raise ConfigError(f"config has no methods.{self.method} section")
        return found

    @property
    def root(self) -> Path:
        return results_root(self.cfg)

    def data_dir(self, key: str | None = None) -> Path:
        key = key or self.dataset
        if key not in self.cfg["datasets"]:
            raise ConfigError(f"unknown dataset {key!r}; config key datasets defines: {', '.join(self.cfg['datasets'])}")
        return self.root / "data" / key


#: settings of a method section (or a step's) that say how a job runs, not what it computes: no
#: hash covers them (a different machine may need other values for the same artifact)
RUNTIME_KEYS = ("enabled", "device", "torch_threads", "threads", "encode_batch_size", "log_every")


def runtime_key(dotted: str) -> bool:
    """Whether a dotted config key is a runtime setting of a method or step section: one of
    :data:`RUNTIME_KEYS`, or a field whose schema says ``x-affects: [runtime]`` (how a job runs, e.g.
    a gradient-cache chunk size, not what it computes)."""
    from harness.methods import METHODS, STEPS

    parts = dotted.split(".")
    name, field = (parts[1], parts[2:]) if parts[0] == "methods" and len(parts) > 1 else (parts[0], parts[1:])
    if not field:
        return False
    if field[0] in RUNTIME_KEYS:
        return True
    if name not in METHODS and name not in STEPS:
        return False
    return _affects(name).get(field[0]) == (RUNTIME,)


# --------------------------------------------------------------------------------------------
# job identity, derived from the schema: every property of a method's schema declares the
# artifacts it changes (``x-affects``); a job's keys are the fields its artifact kind lists.

#: the schema keyword of a property: the artifacts (``model``, ``index``, ``search``, ``measure``
#: or one of their roles, ``index.hash``, ``measure.speed``, ...) whose content the field changes;
#: ``[]`` for a field that changes none (a runtime setting, or one that says which jobs exist)
AFFECTS = "x-affects"
#: the schema keyword at a fragment's top: the artifact names its fields may list, each described
ARTIFACTS = "x-artifacts"
#: what a field lists alone when it says how a job runs, not what it computes (no hash covers it,
#: and a step may read it freely)
RUNTIME = "runtime"


def schema_affects(fragment: Mapping[str, Any], where: str = "schema") -> dict[str, tuple[str, ...]]:
    """``{field: artifacts}`` of a method's schema fragment: each property's ``x-affects``, and,
    under an object property, each nested property that declares its own (``latency.baselines``).
    A property without ``x-affects``, or naming an artifact the fragment's ``x-artifacts`` does not
    describe, fails here."""
    known = set(fragment.get(ARTIFACTS) or {})
    out: dict[str, tuple[str, ...]] = {}

    def walk(props: Mapping[str, Any], prefix: str, required: bool) -> None:
        for name, prop in props.items():
            field = f"{prefix}{name}"
            if AFFECTS in prop:
                tags = tuple(prop[AFFECTS])
                bad = sorted(set(tags) - known - {RUNTIME})
                if bad:
                    raise ConfigError(f"{where}: property {field} names {', '.join(bad)} in {AFFECTS}, which {ARTIFACTS} "
                                      f"does not describe ({', '.join(sorted(known)) or 'none'})",
                                      fix=f"describe the artifact under {ARTIFACTS} or correct the name")
                out[field] = tags
            elif required:
                raise ConfigError(f"{where}: property {field} does not say which artifacts it changes",
                                  fix=f"add `{AFFECTS}: [...]` (the artifacts of {ARTIFACTS} whose content it "
                                      "changes; [] for a runtime setting)")
            if isinstance(prop.get("properties"), Mapping):
                walk(prop["properties"], f"{field}.", False)

    walk(fragment.get("properties") or {}, "", True)
    return out


def _fragment(name: str) -> Mapping[str, Any]:
    from harness.methods import METHODS, schema_fragment, step_schema

    return schema_fragment(name) if name in METHODS else step_schema(name)


def _affects(name: str) -> dict[str, tuple[str, ...]]:
    """``{field: artifacts}`` of section ``name`` (cached per name and registered module, so a plugin
    registered later is seen)."""
    from harness.methods import METHODS, STEPS

    return _affects_of(name, METHODS.get(name) if name in METHODS else STEPS.get(name))


#: the fields that split a training batch into GradCache sub-batches (the same gradients, less memory)
SUB_BATCH_KEYS = ("grad_cache_chunk", "chunk_size", "sub_batch")


def sub_batch_key(name: str) -> str | None:
    """The dotted key of section ``name`` that trains its batch in sub-batches, if it has one (DPR,
    BPR, VDR/SVDR, LightRetriever, DensePhrases: ``grad_cache_chunk``; QCR: ``chunk_size``, GradCache's; the reader:
    ``sub_batch``, of questions): what a job out of memory at the paper's batch may set instead of
    shrinking the batch."""
    fields = _affects(name) if name else {}
    key = next((k for k in SUB_BATCH_KEYS if k in fields), None)
    return f"{_prefix(name)}.{key}" if key else None


@cache
def _affects_of(name: str, module: str) -> dict[str, tuple[str, ...]]:
    return schema_affects(_fragment(name), f"schema of {name} ({module})")


def affects(name: str, artifact: str, *, at: Mapping[str, str | Sequence[str]] | None = None) -> tuple[str, ...]:
    """The dotted keys of section ``name`` (``methods.<name>``, or a step's top-level section) whose
    schema lists ``artifact`` in ``x-affects``: what a job writing that artifact hashes. ``at``
    narrows a map field to the entries the job reads (``{"dpr_baselines": "hnsw"}`` ->
    ``methods.bpr.dpr_baselines.hnsw``). An artifact no field lists fails: a misspelled name would
    hash nothing."""
    fields = sorted(f for f, tags in _affects(name).items() if artifact in tags)
    if not fields:
        raise ConfigError(f"no field of the {name} section lists {artifact!r} in {AFFECTS}",
                          fix=f"name an artifact of its schema's {ARTIFACTS} that some field changes")
    return tuple(k for f in fields for k in _narrowed(_prefix(name), f, at))


def _narrowed(prefix: str, field: str, at: Mapping[str, str | Sequence[str]] | None) -> list[str]:
    if at is None or field not in at:
        return [f"{prefix}.{field}"]
    entries = [at[field]] if isinstance(at[field], str) else list(at[field])
    return [f"{prefix}.{field}.{e}" for e in entries]


def _prefix(name: str) -> str:
    from harness.methods import METHODS

    return f"methods.{name}" if name in METHODS else name


def schema_fields(module_file: str | Path, schema_file: str, artifact: str) -> tuple[str, ...]:
    """The top-level fields of the schema file beside ``module_file`` whose ``x-affects`` lists ``artifact``."""
    from harness.io import read_yaml

    table = schema_affects(read_yaml(Path(module_file).parent / schema_file), str(schema_file))
    return tuple(sorted(f for f, tags in table.items() if artifact in tags and "." not in f))


def model_fields(module_file: str | Path, schema_file: str) -> tuple[str, ...]:
    """The fields of a method's section that change its trained model (``x-affects`` lists
    ``model``): a variant is found equal to another model (and reuses it) exactly when these agree,
    the rule of the train job's own hash (:func:`training_keys`)."""
    return schema_fields(module_file, schema_file, "model")


def training_keys(cfg: Mapping[str, Any], name: str, *, at: Mapping[str, str | Sequence[str]] | None = None,
                  backbone: str | None = None) -> tuple[str, ...]:
    """A model's hash: the fields of its section whose ``x-affects`` lists ``model`` and that the
    config sets (a field left at its default joins the hash when a config sets it), the entries
    ``at`` names of a map field (read whether or not the config sets them), the seed, and the
    backbone's definition (``backbone``: a variant's, where it differs from the section's)."""
    sec = section(cfg, name) or {}
    table = _affects(name)
    fields = sorted(k for k in sec if "model" in table.get(k, ()) and k not in (at or {}))
    keys = [f"{_prefix(name)}.{k}" for k in fields]
    for f in sorted(at or {}):
        keys += _narrowed(_prefix(name), f, at)
    backbone = backbone or sec.get("backbone")
    return (*keys, "seed", *((f"backbones.{backbone}",) if backbone else ()))


def variant_model_id(name: str, variant: str | None, signature: Callable[[str | None], Mapping[str, Any]],
                     earlier: Sequence[str] = (), prefix: str = "") -> str:
    """The model a variant trains: ``name`` for the main model and for a variant whose training
    settings (``signature(variant)``, the fields listing ``model``) equal the main model's (it reuses
    that model: the two train jobs' hashes would agree); else the model of the first of the
    ``earlier`` variants (those declared before it) whose settings equal its own (DensePhrases'
    ``nodistill`` and ``pb-c2`` train the same model on small: one is trained); else ``<name>.<variant>``.
    ``prefix`` goes before a variant's name in its model id (VDR's ablations: ``svdr.abl-<a>``)."""
    if variant is None:
        return name
    own = signature(variant)
    first = next((v for v in (None, *earlier) if v != variant and signature(v) == own), variant)
    return name if first is None else f"{name}.{prefix}{first}"


#: settings only a training loop reads, common to the methods' schemas (each method adds its losses'):
#: a variant that differs from another in these alone starts from the same checkpoint (:func:`start_key`)
TRAINING_ONLY = frozenset({"epochs", "batch_size", "lr", "weight_decay", "warmup_ratio", "grad_clip", "grad_accum",
                           "save_every", "log_every", "max_train_questions", "hard_negatives", "variants",
                           "variant_overrides"})


def start_key(job_id: str, variant: str | None, settings: Mapping[str, Any], training_only: Iterable[str]) -> Any:
    """What makes a variant model's initial checkpoint, and its learning twins' index and search, what
    they are (harness.plan.learning_twins: checked models of a method with equal keys share one
    ``@init`` twin): its effective ``settings`` but for ``training_only`` and :data:`TRAINING_ONLY`.
    The main model (``variant`` None) keys on its own id: its indexes and searches are its own."""
    if variant is None:
        return job_id
    skip = TRAINING_ONLY | set(training_only)
    return sorted((k, repr(x)) for k, x in settings.items() if k not in skip)


def wants_gpu(cfg: Mapping[str, Any], name: str) -> bool:
    """A job of method ``name`` asks a cluster for a GPU when its section says ``device: cuda``."""
    return (section(cfg, name) or {}).get("device", "cpu") == "cuda"
