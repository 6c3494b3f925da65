rule table:
    """One paper table: measured beside published (md + csv)."""
    input:
        table_inputs,
        published="configs/published/{paper}.yaml",
    output:
        md=f"{TABLES_DIR}/{{paper}}/{{table}}.md",
        csv=f"{TABLES_DIR}/{{paper}}/{{table}}.csv",
    params:
        cfg=CFG,
        h=profile_hash,
    log:
        f"{R}/logs/tables/{{paper}}-{{table}}.log",
    benchmark:
        f"{R}/benchmarks/tables/{{paper}}-{{table}}.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=1000,
        gpu=0,
    shell:
        "python -m harness table --config {params.cfg} --paper {wildcards.paper} --table {wildcards.table} "
        "--out {output.md} > {log} 2>&1"


ALL_TABLES = [f"{TABLES_DIR}/{p}/{t}.md" for p, t in TABLES]


rule index_html:
    """results/index.html linking every table and the claims report."""
    input:
        tables=ALL_TABLES,
        claims=f"{config['results_dir']}/claims/{config['profile']}.csv",
    output:
        f"{config['results_dir']}/index.html",
    params:
        cfg=CFG,
        h=profile_hash,
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
        "python -m harness index-html --config {params.cfg} --tables {input.tables} --claims {input.claims} "
        "--out {output} > {log} 2>&1"


# One named target per paper table: `snakemake --cores all svdr_table1`.
for _paper, _table in TABLES:

    rule:
        name:
            f"{_paper}_table{table_slug(_table)}"
        input:
            f"{TABLES_DIR}/{_paper}/{_table}.md",
        localrule: True
