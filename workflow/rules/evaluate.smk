rule evaluate:
    """QA top-k accuracy (the dataset's answer rule) and/or ir_measures of every run of a search job."""
    input:
        unpack(stage_inputs("evaluate")),
    output:
        directory(hplan.pattern(config, "eval")),
    wildcard_constraints:
        job=alternation(hwf.ids(config, "evaluate")),
    params:
        cfg=CFG,
        h=stage_hash("evaluate"),
    log:
        f"{R}/logs/evaluate/{{job}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/evaluate/{{job}}-{{dataset}}.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "python -m harness --log {log} evaluate --config {params.cfg} --job {wildcards.job} --dataset {wildcards.dataset} --out {output}"
