rule evaluate:
    """QA top-k accuracy (answer rule of the dataset) and/or ir_measures on qrels, for any system
    <method>[.<variant>] whose run lies at runs/<dataset>/<system>.trec."""
    input:
        data=f"{R}/data/{{dataset}}",
        run=f"{R}/runs/{{dataset}}/{{system}}.trec",
    output:
        f"{R}/eval/{{dataset}}/{{system}}.json",
    params:
        cfg=CFG,
        h=system_hash,
    log:
        f"{R}/logs/evaluate/{{system}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/evaluate/{{system}}-{{dataset}}.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "python -m harness evaluate --config {params.cfg} --dataset {wildcards.dataset} --run {input.run} "
        "--system {wildcards.system} --out {output} > {log} 2>&1"
