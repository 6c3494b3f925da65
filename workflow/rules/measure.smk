rule measure:
    """Efficiency figures of one measure job (timing protocol, sizes, memory): metrics/<dataset>/<job>/<system>.json."""
    input:
        unpack(stage_inputs("measure")),
    output:
        directory(hplan.pattern(config, "metrics")),
    wildcard_constraints:
        job=alternation(hwf.ids(config, "measure")),
    params:
        cfg=CFG,
        h=stage_hash("measure"),
    log:
        f"{R}/logs/measure/{{job}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/measure/{{job}}-{{dataset}}.tsv"
    threads: stage_resource("measure", "threads")
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=stage_resource("measure", "mem_mb"),
        gpu=stage_resource("measure", "gpu"),
        runtime=stage_resource("measure", "runtime"),
    shell:
        "python -m harness --log {log} measure --config {params.cfg} --job {wildcards.job} --dataset {wildcards.dataset} --out {output}"
