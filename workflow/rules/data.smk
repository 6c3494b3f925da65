rule data:
    """Fetch (cache -> mirror -> URL, checksummed), verify and convert one dataset."""
    output:
        directory(f"{R}/data/{{dataset}}"),
    params:
        cfg=CFG,
        h=dataset_hash,
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
        "python -m harness data --config {params.cfg} --dataset {wildcards.dataset} --out {output} > {log} 2>&1"
