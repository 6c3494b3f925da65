rule data:
    """Fetch (cache -> mirror -> URL, checksummed), verify and convert one dataset."""
    output:
        directory(f"{R}/data/{{dataset}}"),
    params:
        h=dataset_hash,
    log:
        f"{R}/logs/data/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/data/{{dataset}}.tsv"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "{PY} -m harness data --config {CFG} --dataset {wildcards.dataset} --out {output} > {log} 2>&1"
