rule report:
    """The static site (results/site/): every table of every profile found under results/, the figures
    drawn from them (configs/figures.yaml), the claims; results/index.html points to it."""
    input:
        tables=TABLE_RECORDS,
        claims=f"{config['results_dir']}/claims/{config['profile']}.csv",
        learning=f"{config['results_dir']}/learning/{config['profile']}.csv",
        figures="configs/figures.yaml",
    output:
        site=directory(f"{config['results_dir']}/site"),
        index=f"{config['results_dir']}/index.html",
    params:
        cfg=CFG,
        h=report_hash,
    log:
        f"{R}/logs/report.log",
    benchmark:
        f"{R}/benchmarks/report.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=1000,
        gpu=0,
    shell:
        "python -m harness --log {log} report --config {params.cfg} --out {output.site} --index {output.index}"


rule reproduce_all:
    """Every table, the report site, claims, regression, and every run and measurement of the plan."""
    input:
        TABLE_RECORDS,
        f"{config['results_dir']}/site",
        f"{config['results_dir']}/claims/{config['profile']}.csv",
        REGRESSION,
        DECONTAM_REPORT,
        hwf.all_outputs(config),
    default_target: True
    localrule: True
