rule negatives:
    """BM25 hard negatives of a training dataset (config key negatives), shared by every method that trains on it."""
    input:
        unpack(stage_inputs("negatives")),
    output:
        hplan.pattern(config, "negatives"),
    params:
        cfg=CFG,
        h=stage_hash("negatives"),
    log:
        f"{R}/logs/negatives/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/negatives/{{dataset}}.tsv"
    threads: stage_resource("negatives", "threads")
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=stage_resource("negatives", "mem_mb"),
        gpu=0,
    shell:
        "python -m harness --log {log} negatives --config {params.cfg} --dataset {wildcards.dataset} --out {output}"
