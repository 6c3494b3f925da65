rule bm25_negatives:
    """BM25 hard negatives (no answer, not gold) for the training questions, as DPR mines them."""
    input:
        data=f"{R}/data/{{dataset}}",
        index=f"{R}/indexes/bm25/{{dataset}}",
    output:
        f"{R}/negatives/{{dataset}}.jsonl",
    params:
        cfg=CFG,
        h=dpr_hash,
    log:
        f"{R}/logs/negatives/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/negatives/{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "python -m harness bm25-negatives --config {params.cfg} --dataset {wildcards.dataset} --index {input.index} "
        "--out {output} > {log} 2>&1"


rule train_dpr:
    """DPR: in-batch negatives + one BM25 hard negative per question, seeded."""
    input:
        negatives=f"{R}/negatives/{config['methods']['dpr']['train_dataset']}.jsonl",
        data=f"{R}/data/{config['methods']['dpr']['train_dataset']}",
    output:
        directory(f"{R}/models/dpr"),
    params:
        cfg=CFG,
        h=dpr_hash,
    log:
        f"{R}/logs/train/dpr.log",
    benchmark:
        f"{R}/benchmarks/train/dpr.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness train --config {params.cfg} --method dpr --negatives {input.negatives} --out {output} > {log} 2>&1"
