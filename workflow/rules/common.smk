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
