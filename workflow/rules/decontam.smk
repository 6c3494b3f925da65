# Decontamination before training (LightRetriever, following tDRO): 64-bit SimHash of every
# training query against the test queries of every evaluation set of the profile; a training
# query within Hamming distance k of a test query is dropped. Config key decontam; the report
# shows LightRetriever's Tables 6 and 7 for this profile beside the published Table 6.
try:
    DECONTAM_TRAIN, DECONTAM_TEST = hdecontam.plan(config)
except HarnessError as exc:
    sys.stderr.write(f"error: {exc}\n")
    sys.exit(2)

DECONTAM_REPORT = [f"{TABLES_DIR}/lightretriever/6-measured.md"] if DECONTAM_TRAIN else []


rule decontam:
    """SimHash near-duplicates of test queries removed from the training query sets."""
    input:
        decontam_inputs,
    output:
        directory(f"{R}/decontam"),
    params:
        cfg=CFG,
        h=decontam_hash,
        args=decontam_args,
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
        "python -m harness --log {log} decontam {params.args} --out-dir {output}"


rule decontam_report:
    """LightRetriever Tables 6 and 7 measured on this profile's training sets, beside the published Table 6."""
    input:
        decontam=f"{R}/decontam",
        published="configs/published/lightretriever.yaml",
    output:
        md6=f"{TABLES_DIR}/lightretriever/6-measured.md",
        csv6=f"{TABLES_DIR}/lightretriever/6-measured.csv",
        md7=f"{TABLES_DIR}/lightretriever/7-measured.md",
        csv7=f"{TABLES_DIR}/lightretriever/7-measured.csv",
    params:
        cfg=CFG,
        h=decontam_hash,
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
