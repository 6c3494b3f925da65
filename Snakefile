# The reproduction DAG: datasets -> decontam -> negatives -> train -> index -> search -> measure ->
# evaluate -> tables -> regression and claims. Rules are generic stages; the jobs come from the plan
# that the methods declare (harness/plan.py; `python -m harness plan` lists them). Every rule runs
# `python -m harness ...`; the package works without Snakemake. Profiles: --configfile configs/profiles/small.yaml (or paper.yaml).
from snakemake.utils import min_version

min_version("9.0")


configfile: "configs/default.yaml"


# Stage jobs skip importing torch and transformers: a warm server per numerics mode forks them
# (harness/warm.py; HARNESS_WARM=0 turns it off). Jobs that cannot reach one run cold.
onstart:
    from harness import warm

    if not CONFIG_WRITTEN:  # workflow/rules/common.smk: a run whose flags read as a dry run wrote nothing yet
        write_resolved_config()
    warm.precompile()  # the jobs read the package's bytecode instead of compiling it each
    warm.start()
    hwf.steady_scheduler(workflow)  # no spinning scheduler loop on a local run (snakemake#3744)


onsuccess:
    from harness import warm

    warm.stop()


onerror:
    from harness import warm

    warm.stop()


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/decontam.smk"
include: "workflow/rules/negatives.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/index.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/claims.smk"
include: "workflow/rules/learning.smk"
include: "workflow/rules/regression.smk"
include: "workflow/rules/report.smk"
