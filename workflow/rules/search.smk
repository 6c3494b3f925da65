rule search:
    """Every run of one search job (one model load): runs/<dataset>/<job>/<system>.trec + meta."""
    input:
        unpack(stage_inputs("search")),
    output:
        directory(hplan.pattern(config, "run")),
    wildcard_constraints:
        job=alternation(hwf.ids(config, "search")),
    params:
        cfg=CFG,
        h=stage_hash("search"),
    log:
        f"{R}/logs/search/{{job}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/{{job}}-{{dataset}}.tsv"
    threads: stage_resource("search", "threads")
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=stage_resource("search", "mem_mb"),
        gpu=stage_resource("search", "gpu"),
        runtime=stage_resource("search", "runtime"),
    shell:
        "python -m harness --log {log} search --config {params.cfg} --job {wildcards.job} --dataset {wildcards.dataset} --out {output}"
