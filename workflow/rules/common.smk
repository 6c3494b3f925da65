# Shared set-up: validate the config (same schema as `python -m harness`), write the resolved
# config that every rule reads, and the named functions the rules use as inputs/params.
import re
import sys
from pathlib import Path

from harness import config as hconfig
from harness.errors import HarnessError
from harness.methods import METHODS as HMETHODS
from harness.tables import matrix as hmatrix
from harness.tables.published import PAPERS

try:
    hconfig.validate(config, "config", source="Snakemake config (configs/default.yaml + --configfile/--config)")
    hconfig.check_references(config)
except HarnessError as exc:
    sys.stderr.write(f"error: {exc}\n")
    sys.exit(2)

# Rules call `python -m harness ...` with this interpreter first on PATH.
shell.prefix(f"export PATH={Path(sys.executable).parent}:$PATH; ")
R = str(hconfig.results_root(config))
TABLES_DIR = f"{config['results_dir']}/tables"
CFG = f"{R}/config.yaml"
_text = __import__("yaml").safe_dump(dict(config), sort_keys=False)
if not Path(CFG).exists() or Path(CFG).read_text() != _text:
    hconfig.dump(config, Path(CFG))

DATASETS = list(config["datasets"])
METHODS = [m for m, mc in config["methods"].items() if mc.get("enabled", True)]
PUBLISHED = {p: hmatrix.published(p) for p in PAPERS}
TABLES = [(p, t["id"]) for p in PAPERS for t in PUBLISHED[p]["tables"]]


wildcard_constraints:
    dataset="|".join(re.escape(d) for d in DATASETS),
    method="|".join(re.escape(m) for m in METHODS) or "none",
    system="(" + "|".join(re.escape(m) for m in METHODS) + r")(\.[A-Za-z0-9_-]+)?",
    paper="|".join(PAPERS),
    table="|".join(re.escape(t) for _, t in TABLES),


def method_hash(wildcards):
    return hconfig.section_hash(config, f"methods.{wildcards.method}", "seed", "evaluate")


def system_hash(wildcards):
    method = wildcards.system.split(".")[0]
    return hconfig.section_hash(config, f"methods.{method}", "seed", "evaluate", f"datasets.{wildcards.dataset}")


def dataset_hash(wildcards):
    return hconfig.section_hash(config, f"datasets.{wildcards.dataset}", "data.offline")


def dpr_hash(wildcards):
    return hconfig.section_hash(config, "methods.dpr", "seed")


def profile_hash(wildcards):
    return hconfig.section_hash(config, "profile", "substitutions", "tables", "methods", "datasets")


def method_runs():
    """(method, dataset) pairs this profile searches and evaluates."""
    return [(m, d) for m in METHODS for d in config["methods"][m].get("datasets", [])]


def table_slug(table):
    return re.sub(r"[^0-9A-Za-z]", "_", table)


def search_inputs(wildcards):
    inputs = {
        "data": f"{R}/data/{wildcards.dataset}",
        "index": f"{R}/indexes/{wildcards.method}/{wildcards.dataset}",
    }
    if HMETHODS.get(wildcards.method).trained:
        inputs["model"] = f"{R}/models/{wildcards.method}"
    return inputs


def model_arg(wildcards, input):
    return f"--model {input.model}" if "model" in input.keys() else ""


def table_inputs(wildcards):
    return hmatrix.required_inputs(config, wildcards.paper, wildcards.table)


# Decontamination (config key decontam; harness/decontam/report.py resolves the query sets).
from harness.decontam import report as hdecontam


def decontam_inputs(wildcards):
    return hdecontam.data_dirs(config)


def decontam_args(wildcards):
    return hdecontam.stage_args(config)


def decontam_hash(wildcards):
    return hdecontam.config_hash(config)


# SVDR / VDR (harness/methods/vdr.py; rules in workflow/rules/svdr.smk). Named functions only.
from harness.methods import vdr as hvdr

VDR_METHODS = [m for m in METHODS if HMETHODS.get(m).module == "harness.methods.vdr"]
VDR_RE = "|".join(re.escape(m) for m in VDR_METHODS) or "none"
_SVDR = config["methods"].get("svdr", {})
VDR_RERANK_DEPTHS = sorted({d for m in VDR_METHODS for d in config["methods"][m].get("rerank_depths", [])}) or [20]
VDR_LATENCY_DEPTHS = sorted({d for m in VDR_METHODS
                             for d in (config["methods"][m].get("latency") or {}).get("rerank_depths", [])}) or [20]
SVDR_SYNTH = {**hvdr.synthetic_defaults(), **(_SVDR.get("synthetic") or {})}


def _vdr_train_dataset(wildcards):
    return config["methods"][wildcards.vmethod]["train_dataset"]


def vdr_train_inputs(wildcards):
    td = _vdr_train_dataset(wildcards)
    return {"negatives": f"{R}/negatives/{td}.jsonl", "data": f"{R}/data/{td}",
            "index": f"{R}/indexes/{wildcards.vmethod}/{td}"}


def vdr_train_hash(wildcards):
    keys = [f"methods.{wildcards.vmethod}.{k}" for k in hvdr.TRAIN_KEYS]
    return hconfig.section_hash(config, "seed", f"datasets.{_vdr_train_dataset(wildcards)}", *keys)


def vdr_ablation_hash(wildcards):
    m = f"methods.{wildcards.vmethod}"
    keys = [f"{m}.{k}" for k in hvdr.TRAIN_KEYS] + [f"{m}.ablation_overrides", f"{m}.ablations.{wildcards.ablation}"]
    return hconfig.section_hash(config, "seed", f"datasets.{_vdr_train_dataset(wildcards)}", *keys)


def vdr_token_index_hash(wildcards):
    keys = [f"methods.{wildcards.vmethod}.{k}" for k in hvdr.TOKEN_INDEX_KEYS]
    return hconfig.section_hash(config, f"datasets.{wildcards.dataset}", *keys)


def _vdr_keys(method, *extra):
    return [f"methods.{method}.{k}" for k in (*hvdr.TRAIN_KEYS, *hvdr.TOKEN_INDEX_KEYS, *extra)]


def vdr_hash(wildcards):
    """Embedding index, searches, re-ranking: the model's and the index's settings (not ablations)."""
    return hconfig.section_hash(config, "seed", "evaluate", f"datasets.{wildcards.dataset}",
                                *_vdr_keys(wildcards.vmethod, "rerank_depths"))


def vdr_latency_hash(wildcards):
    return hconfig.section_hash(config, "seed", "evaluate", "timing", f"datasets.{wildcards.dataset}",
                                *_vdr_keys(wildcards.vmethod, "latency"))


def dpr_rerank_hash(wildcards):
    return hconfig.section_hash(config, "seed", "evaluate", f"datasets.{wildcards.dataset}", "methods.dpr",
                                "methods.bm25", "methods.svdr.rerank_depths", "methods.vdr.rerank_depths")


def svdr_baselines_hash(wildcards):
    return hconfig.section_hash(config, "timing", f"datasets.{wildcards.dataset}", "methods.dpr", "methods.bm25")


def svdr_intrain_hash(wildcards):
    return hconfig.section_hash(config, "seed", "timing", f"datasets.{wildcards.dataset}", "methods.dpr",
                                "methods.bm25", *_vdr_keys("svdr", "intrain"))


def svdr_synthetic_hash(wildcards):
    return hconfig.section_hash(config, "seed", "timing", "methods.svdr.synthetic")


def _vdr_ablation_source(wildcards):
    return hvdr.ablation_model_source(config, wildcards.vmethod, wildcards.ablation)


def vdr_ablation_search_inputs(wildcards):
    """An ablation whose settings equal a main model's (ablation_overrides empty) reuses that model."""
    src = _vdr_ablation_source(wildcards)
    model = f"{R}/models/{src}" if src else f"{R}/models/{wildcards.vmethod}-ablation/{wildcards.ablation}"
    if wildcards.avariant == "beta":
        index = f"{R}/indexes/{wildcards.vmethod}/{wildcards.dataset}"
    elif src:
        index = f"{R}/indexes/{src}-emb/{wildcards.dataset}"
    else:
        index = f"{R}/indexes/{wildcards.vmethod}-ablation/{wildcards.ablation}/{wildcards.dataset}"
    return {"data": f"{R}/data/{wildcards.dataset}", "model": model, "index": index}


def vdr_search_inputs(wildcards):
    kind = wildcards.vmethod if wildcards.svariant == "beta" else f"{wildcards.vmethod}-emb"
    return {"data": f"{R}/data/{wildcards.dataset}", "model": f"{R}/models/{wildcards.vmethod}",
            "index": f"{R}/indexes/{kind}/{wildcards.dataset}"}


def metrics_dir(wildcards):
    """Folder of the efficiency figures of a dataset (results/<profile>/metrics/<dataset>)."""
    return f"{R}/metrics/{wildcards.dataset}"


# BPR (harness/methods/bpr.py; rules in workflow/rules/bpr.smk) and the extractive reader
# (harness/methods/reader.py). Named functions only.
import shlex

from harness.methods import bpr as hbpr
from harness.methods import reader as hreader

BPR_ON = "bpr" in METHODS
BPR_SEARCH_VARIANTS = hbpr.search_variants(config) if BPR_ON else []
BPR_TRAIN_VARIANTS = hbpr.train_variants(config) if BPR_ON else []
BPR_DPR_BASELINES = list(hbpr.dpr_baselines(config)) if BPR_ON else []
BPR_EFF_SYSTEMS = hbpr.efficiency_systems(config) if BPR_ON else []
READER_SYSTEMS = hreader.reader_systems(config)
BPR_TRAIN_RE = "|".join(re.escape(v) for v in BPR_TRAIN_VARIANTS) or "none"
BPR_BASELINE_RE = "|".join(re.escape(v) for v in BPR_DPR_BASELINES) or "none"
BPR_METRICS_RE = "|".join(re.escape(s) for s in sorted(set(BPR_EFF_SYSTEMS) | set(READER_SYSTEMS))) or "none"
_READER = hreader.settings(config) if "reader" in config["methods"] else {}
READER_TRAIN_RUN = (f"{R}/reader/train-runs/{_READER.get('train_dataset')}/{_READER.get('retriever')}.trec"
                    if READER_SYSTEMS else [])
READER_TRAIN_DATA = f"{R}/data/{_READER['train_dataset']}" if READER_SYSTEMS else []


def _bpr_train_dataset(wildcards):
    return hbpr.settings(config, getattr(wildcards, "tvariant", None))["train_dataset"]


def bpr_train_inputs(wildcards):
    td = _bpr_train_dataset(wildcards)
    return {"negatives": f"{R}/negatives/{td}.jsonl", "data": f"{R}/data/{td}"}


def bpr_train_hash(wildcards):
    return hbpr.train_hash(config, getattr(wildcards, "tvariant", None))


def bpr_index_hash(wildcards):
    return hconfig.section_hash(config, "methods.bpr.index", "methods.bpr.hash_index", "methods.bpr.hash_nflip",
                                f"datasets.{wildcards.dataset}") + hbpr.train_hash(config)


def bpr_hash(wildcards):
    return hconfig.section_hash(config, "methods.bpr", "seed", "evaluate", f"datasets.{wildcards.dataset}")


def bpr_efficiency_hash(wildcards):
    return hconfig.section_hash(config, "methods.bpr", "methods.dpr", "seed", "evaluate", "timing",
                                f"datasets.{wildcards.dataset}")


def bpr_variant_search_inputs(wildcards):
    """A train variant's model: models/bpr when its settings equal the main model's, else its own."""
    src = hbpr.model_source(config, wildcards.tvariant)
    return {"data": f"{R}/data/{wildcards.dataset}", "model": f"{R}/models/{src}"}


def bpr_search_systems(wildcards):
    return " ".join(f"bpr.{v}" for v in BPR_SEARCH_VARIANTS)


def bpr_baseline_indexes(wildcards):
    return [f"{R}/indexes/dpr-baseline/{v}/{wildcards.dataset}" for v in BPR_DPR_BASELINES]


def bpr_metrics_parts(wildcards):
    """Parts of a Table 1/2 system's metrics file: efficiency (index bytes, query time), reader EM."""
    parts = {}
    if wildcards.msystem in BPR_EFF_SYSTEMS:
        parts["efficiency"] = f"{R}/metrics-parts/{wildcards.dataset}/{wildcards.msystem}.efficiency.json"
    if wildcards.msystem in READER_SYSTEMS:
        parts["em"] = f"{R}/metrics-parts/{wildcards.dataset}/{wildcards.msystem}.em.json"
    return parts


def bpr_metrics_not_run(wildcards):
    """NAME=REASON arguments (shell-quoted) for the figures a system's metrics file lacks."""
    reasons = []
    if wildcards.msystem not in READER_SYSTEMS:
        reasons.append(f"em=the reader reads only methods.reader.systems ({', '.join(READER_SYSTEMS) or 'none'})")
    if wildcards.msystem not in BPR_EFF_SYSTEMS:
        reasons.append("index_bytes=index size is measured for the Table 1/2 systems only")
        reasons.append("query_ms=query time is measured for the Table 1/2 systems only")
    return " ".join(shlex.quote(r) for r in reasons)


def reader_em_runs(wildcards):
    return [f"{R}/runs/{wildcards.dataset}/{s}.trec" for s in READER_SYSTEMS]


def reader_em_systems(wildcards):
    return " ".join(READER_SYSTEMS)


def reader_train_run_inputs(wildcards):
    td, retriever = _READER["train_dataset"], _READER["retriever"]
    inputs = {"data": f"{R}/data/{td}", "index": f"{R}/indexes/{retriever}/{td}"}
    if HMETHODS.get(retriever).trained:
        inputs["model"] = f"{R}/models/{retriever}"
    return inputs


def reader_retriever(wildcards):
    return _READER["retriever"]


def reader_train_dataset(wildcards):
    return _READER["train_dataset"]


def reader_hash(wildcards):
    return hconfig.section_hash(config, "methods.reader", "seed")


def metrics_parts_dir(wildcards):
    return f"{R}/metrics-parts/{wildcards.dataset}"
