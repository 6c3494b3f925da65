rule index:
    """An index of the plan on one dataset (spec backend:spec; meta.json beside it)."""
    input:
        unpack(stage_inputs("index")),
    output:
        directory(hplan.pattern(config, "index")),
    wildcard_constraints:
        job=alternation(hwf.ids(config, "index")),
    params:
        cfg=CFG,
        h=stage_hash("index"),
    log:
        f"{R}/logs/index/{{job}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/index/{{job}}-{{dataset}}.tsv"
    threads: stage_resource("index", "threads")
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=stage_resource("index", "mem_mb"),
        gpu=stage_resource("index", "gpu"),
        runtime=stage_resource("index", "runtime"),
    shell:
        "python -m harness --log {log} index --config {params.cfg} --job {wildcards.job} --dataset {wildcards.dataset} --out {output}"
