rule train:
    """A model of the plan (`python -m harness plan` lists them): the method's training step."""
    input:
        unpack(stage_inputs("train")),
    output:
        directory(hplan.pattern(config, "model")),
    wildcard_constraints:
        job=alternation(hwf.ids(config, "train")),
    params:
        cfg=CFG,
        h=stage_hash("train"),
    log:
        f"{R}/logs/train/{{job}}.log",
    benchmark:
        f"{R}/benchmarks/train/{{job}}.tsv"
    threads: stage_resource("train", "threads")
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=stage_resource("train", "mem_mb"),
        gpu=stage_resource("train", "gpu"),
        runtime=stage_resource("train", "runtime"),
    shell:
        "python -m harness --log {log} train --config {params.cfg} --job {wildcards.job} --out {output}"
