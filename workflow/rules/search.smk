from harness.methods import METHODS as HMETHODS


def search_inputs(wildcards):
    inputs = {
        "data": f"{R}/data/{wildcards.dataset}",
        "index": f"{R}/indexes/{wildcards.method}/{wildcards.dataset}",
    }
    if HMETHODS.get(wildcards.method).trained:
        inputs["model"] = f"{R}/models/{wildcards.method}"
    return inputs


def model_arg(wildcards, input):
    return f"--model {input.model}" if "model" in input.keys() else ""


rule search:
    """Search the test queries; TREC run + <run>.meta.json."""
    input:
        unpack(search_inputs),
    output:
        f"{R}/runs/{{dataset}}/{{method}}.trec",
    params:
        h=method_hash,
        model=model_arg,
    log:
        f"{R}/logs/search/{{method}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/{{method}}-{{dataset}}.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "{PY} -m harness search --config {CFG} --method {wildcards.method} --dataset {wildcards.dataset} "
        "--index {input.index} {params.model} --out {output} > {log} 2>&1"


rule timing:
    """Index build and search timed with the profile's protocol (harness/timing.py)."""
    input:
        unpack(search_inputs),
    output:
        f"{R}/timing/{{method}}-{{dataset}}.json",
    params:
        h=method_hash,
        model=model_arg,
    log:
        f"{R}/logs/timing/{{method}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/timing/{{method}}-{{dataset}}.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "{PY} -m harness timing --config {CFG} --method {wildcards.method} --dataset {wildcards.dataset} "
        "--index {input.index} {params.model} --out {output} > {log} 2>&1"
