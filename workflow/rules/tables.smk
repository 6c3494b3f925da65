rule table:
    """One paper table: measured beside published (md + csv), and the profile's copy as data for the report."""
    input:
        table_inputs,
        published="configs/published/{paper}.yaml",
    output:
        md=f"{TABLES_DIR}/{{paper}}/{{table}}.md",
        csv=f"{TABLES_DIR}/{{paper}}/{{table}}.csv",
        record=f"{R}/tables/{{paper}}/{{table}}.json",
    params:
        cfg=CFG,
        h=report_hash,
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
        "python -m harness --log {log} table --config {params.cfg} --paper {wildcards.paper} --table {wildcards.table} --out {output.md} --record {output.record}"


# Targets are the profile's own record of each table: the .md/.csv under results/tables are shared by
# every profile (the one rendered last), so another profile's copy there must not count as done.
TABLE_RECORDS = [f"{R}/tables/{p}/{t}.json" for p, t in TABLES]


# One named target per paper table: `snakemake --cores all svdr_table1`.
for _paper, _table in TABLES:

    rule:
        name:
            f"{_paper}_table{table_slug(_table)}"
        input:
            f"{R}/tables/{_paper}/{_table}.json",
        localrule: True
