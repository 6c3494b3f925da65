rule index_html:
    """results/index.html linking every table and the claims report."""
    input:
        tables=ALL_TABLES,
        claims=f"{config['results_dir']}/claims/{config['profile']}.csv",
    output:
        f"{config['results_dir']}/index.html",
    params:
        cfg=CFG,
        h=report_hash,
    log:
        f"{R}/logs/tables/index-html.log",
    benchmark:
        f"{R}/benchmarks/tables/index-html.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=500,
        gpu=0,
    shell:
        "python -m harness --log {log} index-html --config {params.cfg} --tables {input.tables} --claims {input.claims} --out {output}"


rule reproduce_all:
    """Every table, the index page, claims, regression, and every run and measurement of the plan."""
    input:
        ALL_TABLES,
        f"{config['results_dir']}/index.html",
        f"{config['results_dir']}/claims/{config['profile']}.csv",
        REGRESSION,
        DECONTAM_REPORT,
        hwf.all_outputs(config),
    default_target: True
    localrule: True
