rule data:
    """Fetch (cache -> mirror -> URL, checksummed), verify and convert one dataset."""
    input:
        data_files,
    output:
        directory(hplan.pattern(config, "data")),
    params:
        cfg=CFG,
        h=data_hash,
    log:
        f"{R}/logs/data/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/data/{{dataset}}.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "python -m harness --log {log} data --config {params.cfg} --dataset {wildcards.dataset} --out {output}"
