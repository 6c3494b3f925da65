# Decontamination before training (following tDRO): 64-bit SimHash of every training query
# against the test queries of every evaluation set of the profile; a training query within
# Hamming distance k of a test query is dropped. Config key decontam; the job is the plan's
# (harness.decontam.report.decontam_job), the report's tables and their paper come from harness.decontam.report.
from harness.decontam import report as hdecontam

try:
    DECONTAM_TRAIN, DECONTAM_TEST = hdecontam.plan(config)
except HarnessError as exc:
    sys.stderr.write(f"error: {exc}\n")
    sys.exit(2)

DECONTAM_REPORT_FILES = hdecontam.report_files(config)
DECONTAM_REPORT = [DECONTAM_REPORT_FILES["md6"]] if DECONTAM_TRAIN else []


rule decontam:
    """SimHash near-duplicates of test queries removed from the training query sets."""
    input:
        unpack(stage_inputs("decontam")),
    output:
        directory(hplan.pattern(config, "decontam")),
    params:
        cfg=CFG,
        h=stage_hash("decontam"),
    log:
        f"{R}/logs/decontam.log",
    benchmark:
        f"{R}/benchmarks/decontam.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "python -m harness --log {log} decontam --config {params.cfg} --out-dir {output}"


rule decontam_report:
    """The decontamination tables measured on this profile's training sets, beside the published ones."""
    input:
        decontam=f"{R}/decontam",
        published=hdecontam.published_file(),
    output:
        **DECONTAM_REPORT_FILES,
    params:
        cfg=CFG,
        h=stage_hash("decontam"),
    log:
        f"{R}/logs/tables/decontam-report.log",
    benchmark:
        f"{R}/benchmarks/tables/decontam-report.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=1000,
        gpu=0,
    shell:
        "python -m harness --log {log} decontam-report --config {params.cfg} --decontam {input.decontam} --out {output.md6}"


rule decontam_tables:
    """Named target: snakemake decontam_tables."""
    input:
        DECONTAM_REPORT,
    localrule: True
