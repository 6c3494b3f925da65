rule evaluate:
    """QA top-k accuracy (answer rule of the dataset) and/or ir_measures on qrels."""
    input:
        data=f"{R}/data/{{dataset}}",
        run=f"{R}/runs/{{dataset}}/{{method}}.trec",
    output:
        f"{R}/eval/{{dataset}}/{{method}}.json",
    params:
        cfg=CFG,
        h=method_hash,
    log:
        f"{R}/logs/evaluate/{{method}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/evaluate/{{method}}-{{dataset}}.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "python -m harness evaluate --config {params.cfg} --dataset {wildcards.dataset} --run {input.run} "
        "--system {wildcards.method} --out {output} > {log} 2>&1"
