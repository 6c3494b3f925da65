# Shared set-up: validate the config (the same schema as `python -m harness`), write the resolved
# config every rule reads, and the named functions the generic rules use. Everything a job needs
# comes from the plan (harness/plan.py, harness/workflow.py); nothing here names a method.
import re
import sys
from pathlib import Path

from harness import config as hconfig
from harness import plan as hplan
from harness import workflow as hwf
from harness.errors import HarnessError
from harness.tables import matrix as hmatrix
from harness.published import PAPERS

try:
    hconfig.expand_dotted(config)
    hconfig.validate(config, "config", source="Snakemake config (configs/default.yaml + --configfile/--config)")
    hconfig.check_references(config)
    hwf.all_outputs(config)  # builds the plan: an unknown index spec, system or variant fails here
except HarnessError as exc:
    sys.stderr.write(f"error: {exc}\n")
    sys.exit(2)

# Rules call `python -m harness ...` with this interpreter first on PATH.
shell.prefix(f"export PATH={Path(sys.executable).parent}:$PATH; ")
R = str(hconfig.results_root(config))
TABLES_DIR = f"{config['results_dir']}/tables"
CFG = f"{R}/config.yaml"


def write_resolved_config():
    """The resolved config every job reads (rewritten only when it changes), its validation stamp, and
    which paper tables each job serves (every job prints its line when it starts)."""
    text = __import__("yaml").safe_dump(dict(config), sort_keys=False)
    if not Path(CFG).exists() or Path(CFG).read_text() != text:
        hconfig.dump(config, Path(CFG))
    hconfig.mark_validated(config, Path(CFG))  # validated above: the jobs need not validate it again
    hwf.write_serves(config)


# A dry run writes nothing: with another config (`snakemake -n --configfile ...`) it would rewrite the
# config.yaml that a run going on in the same results tree reads. Snakemake tells a Snakefile nothing
# of a dry run while it is read, so the command line says it; a real run whose flags read as one
# still writes, before its first job (the Snakefile's onstart, not called in a dry run).
CONFIG_WRITTEN = not hwf.dry_run_argv(sys.argv[1:])
if CONFIG_WRITTEN:
    write_resolved_config()

PUBLISHED = {p: hmatrix.published(p) for p in PAPERS}
TABLES = [(p, t["id"]) for p in PAPERS for t in PUBLISHED[p]["tables"]]


def alternation(names):
    return "|".join(re.escape(n) for n in names) or "none"


wildcard_constraints:
    dataset=alternation(config["datasets"]),
    paper=alternation(PAPERS),
    table=alternation(t for _, t in TABLES),


def table_slug(table):
    return re.sub(r"[^0-9A-Za-z]", "_", table)


def data_files(wildcards):
    return hwf.data_inputs(config, wildcards)


def data_hash(wildcards):
    return hwf.data_hash(config, wildcards)


def stage_inputs(stage):
    """Input function of a generic stage rule: the job's inputs, role -> path."""

    def inputs(wildcards):
        return hwf.inputs(config, stage, wildcards)

    return inputs


def stage_hash(stage):
    def job_hash(wildcards):
        return hwf.job_hash(config, stage, wildcards)

    return job_hash


def stage_resource(stage, what):
    def resource(wildcards):
        return hwf.resources(config, stage, wildcards, what)

    return resource


def table_inputs(wildcards):
    return hmatrix.required_inputs(config, wildcards.paper, wildcards.table)


def report_hash(wildcards):
    """Tables, claims and the index page re-render when the profile's captions, stand-ins or learning
    check settings change."""
    return hconfig.section_hash(config, "profile", "substitutions", "tables", "learning")
