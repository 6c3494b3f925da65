rule search:
    """Search the test queries; TREC run + <run>.meta.json."""
    input:
        unpack(search_inputs),
    output:
        f"{R}/runs/{{dataset}}/{{method}}.trec",
    params:
        cfg=CFG,
        h=method_hash,
        model=model_arg,
    log:
        f"{R}/logs/search/{{method}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/{{method}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness search --config {params.cfg} --method {wildcards.method} --dataset {wildcards.dataset} "
        "--index {input.index} {params.model} --out {output} > {log} 2>&1"


rule timing:
    """Index build and search timed with the profile's protocol (harness/timing.py)."""
    input:
        unpack(search_inputs),
    output:
        f"{R}/timing/{{method}}-{{dataset}}.json",
    params:
        cfg=CFG,
        h=method_hash,
        model=model_arg,
    log:
        f"{R}/logs/timing/{{method}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/timing/{{method}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness timing --config {params.cfg} --method {wildcards.method} --dataset {wildcards.dataset} "
        "--index {input.index} {params.model} --out {output} > {log} 2>&1"
