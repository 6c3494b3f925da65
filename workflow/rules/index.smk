rule bm25_index:
    """Lucene index through pyserini (spec lucene:bm25)."""
    input:
        f"{R}/data/{{dataset}}",
    output:
        directory(f"{R}/indexes/bm25/{{dataset}}"),
    params:
        cfg=CFG,
        h=dataset_hash,
    log:
        f"{R}/logs/index/bm25-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/index/bm25-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "python -m harness index --config {params.cfg} --method bm25 --dataset {wildcards.dataset} --out {output} > {log} 2>&1"


rule dpr_index:
    """Encode the corpus with DPR's passage encoder; faiss index (spec methods.dpr.index)."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/dpr",
    output:
        directory(f"{R}/indexes/dpr/{{dataset}}"),
    params:
        cfg=CFG,
        h=dpr_hash,
    log:
        f"{R}/logs/index/dpr-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/index/dpr-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness index --config {params.cfg} --method dpr --dataset {wildcards.dataset} --model {input.model} "
        "--out {output} > {log} 2>&1"
