# BPR (Yamada et al.; harness/methods/bpr.py) and the extractive reader (harness/methods/reader.py).
# System ids, as the tables and claims name them:
#   bpr.bflat / bpr.bhash                 linear scan / hash lookup, top l Hamming candidates reranked (Table 1)
#   bpr.no-rerank / bpr.no-cand           hash lookup in Hamming order / rerank of every passage (Table 2)
#   bpr.l<n>                              linear scan with l = n (Table 8; search time only)
#   bpr.<train variant>                   one training per methods.bpr.train_variants entry (Tables 7, 9)
#   dpr.<baseline>                        DPR's vectors in methods.bpr.dpr_baselines indexes (hnsw, lsh, pq)
# Index bytes and query time of Table 1/2 systems and the reader's EM go to
# metrics/<dataset>/<system>.json (parts in metrics-parts/, merged by rule bpr_metrics).
# Commands: `python -m harness.methods.bpr ...`, `python -m harness.methods.reader ...`, and the
# generic `python -m harness train|index|search|timing --method bpr`.


rule bpr_train:
    """BPR: L_cand (ranking loss on tanh codes) + L_rerank, in-batch + one BM25 negative, seeded."""
    input:
        unpack(bpr_train_inputs),
    output:
        directory(f"{R}/models/bpr"),
    params:
        cfg=CFG,
        h=bpr_train_hash,
    log:
        f"{R}/logs/train/bpr.log",
    benchmark:
        f"{R}/benchmarks/train/bpr.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.bpr train --config {params.cfg} --negatives {input.negatives} --out {output} "
        "> {log} 2>&1"


rule bpr_train_variant:
    """One BPR model of Tables 7/9 (methods.bpr.train_variants.<tvariant> over train_variant_overrides)."""
    input:
        unpack(bpr_train_inputs),
    output:
        directory(f"{R}/models/bpr-variant/{{tvariant}}"),
    wildcard_constraints:
        tvariant=BPR_TRAIN_RE,
    params:
        cfg=CFG,
        h=bpr_train_hash,
    log:
        f"{R}/logs/train/bpr-variant-{{tvariant}}.log",
    benchmark:
        f"{R}/benchmarks/train/bpr-variant-{{tvariant}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.bpr train --config {params.cfg} --variant {wildcards.tvariant} "
        "--negatives {input.negatives} --out {output} > {log} 2>&1"


rule bpr_index:
    """sign(E_p(D)) packed to bits; faiss binary index (methods.bpr.index, linear scan) + codes."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/bpr",
    output:
        directory(f"{R}/indexes/bpr/{{dataset}}"),
    params:
        cfg=CFG,
        h=bpr_index_hash,
    log:
        f"{R}/logs/index/bpr-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/index/bpr-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness index --config {params.cfg} --method bpr --dataset {wildcards.dataset} --model {input.model} "
        "--out {output} > {log} 2>&1"


rule bpr_hash_index:
    """The hash lookup (methods.bpr.hash_index) over the codes of the linear-scan index."""
    input:
        f"{R}/indexes/bpr/{{dataset}}",
    output:
        directory(f"{R}/indexes/bpr-hash/{{dataset}}"),
    params:
        cfg=CFG,
        h=bpr_index_hash,
    log:
        f"{R}/logs/index/bpr-hash-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/index/bpr-hash-{{dataset}}.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "python -m harness.methods.bpr index --config {params.cfg} --dataset {wildcards.dataset} --source {input} "
        "--out {output} > {log} 2>&1"


rule bpr_search:
    """Runs of every search variant of the main model (one model load, one question encoding)."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/bpr",
        index=f"{R}/indexes/bpr/{{dataset}}",
        hash=f"{R}/indexes/bpr-hash/{{dataset}}",
    output:
        [f"{R}/runs/{{dataset}}/bpr.{v}.trec" for v in BPR_SEARCH_VARIANTS],
    params:
        cfg=CFG,
        h=bpr_hash,
        systems=bpr_search_systems,
    log:
        f"{R}/logs/search/bpr-variants-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/bpr-variants-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.bpr search --config {params.cfg} --dataset {wildcards.dataset} --model {input.model} "
        "--index {input.index} --hash-index {input.hash} --systems {params.systems} --out {output} > {log} 2>&1"


rule bpr_variant_search:
    """A train variant's run: its binary index (built in a temporary folder) searched by linear scan + rerank."""
    input:
        unpack(bpr_variant_search_inputs),
    output:
        f"{R}/runs/{{dataset}}/bpr.{{tvariant}}.trec",
    wildcard_constraints:
        tvariant=BPR_TRAIN_RE,
    params:
        cfg=CFG,
        h=bpr_hash,
    log:
        f"{R}/logs/search/bpr.{{tvariant}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/bpr.{{tvariant}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.bpr search --config {params.cfg} --dataset {wildcards.dataset} "
        "--variant {wildcards.tvariant} --model {input.model} --systems bpr.{wildcards.tvariant} --out {output} "
        "> {log} 2>&1"


rule bpr_dpr_index:
    """A DPR baseline (methods.bpr.dpr_baselines: HNSW, LSH, PQ) over the vectors of DPR's Flat index."""
    input:
        f"{R}/indexes/dpr/{{dataset}}",
    output:
        directory(f"{R}/indexes/dpr-baseline/{{dvariant}}/{{dataset}}"),
    wildcard_constraints:
        dvariant=BPR_BASELINE_RE,
    params:
        cfg=CFG,
        h=bpr_hash,
    log:
        f"{R}/logs/index/dpr-baseline-{{dvariant}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/index/dpr-baseline-{{dvariant}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.bpr dpr-index --config {params.cfg} --dataset {wildcards.dataset} "
        "--variant {wildcards.dvariant} --dpr-index {input} --out {output} > {log} 2>&1"


rule bpr_dpr_search:
    """Run of a DPR baseline index with DPR's question encoder."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/dpr",
        index=f"{R}/indexes/dpr-baseline/{{dvariant}}/{{dataset}}",
    output:
        f"{R}/runs/{{dataset}}/dpr.{{dvariant}}.trec",
    wildcard_constraints:
        dvariant=BPR_BASELINE_RE,
    params:
        cfg=CFG,
        h=bpr_hash,
    log:
        f"{R}/logs/search/dpr.{{dvariant}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/dpr.{{dvariant}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.bpr dpr-search --config {params.cfg} --dataset {wildcards.dataset} "
        "--variant {wildcards.dvariant} --model {input.model} --index {input.index} --out {output} > {log} 2>&1"


rule bpr_efficiency:
    """Index bytes (file size) and query time (protocol bpr-query-time) of every Table 1/2 system."""
    input:
        data=f"{R}/data/{{dataset}}",
        dpr_model=f"{R}/models/dpr",
        bpr_model=f"{R}/models/bpr",
        dpr_index=f"{R}/indexes/dpr/{{dataset}}",
        bpr_index=f"{R}/indexes/bpr/{{dataset}}",
        hash_index=f"{R}/indexes/bpr-hash/{{dataset}}",
        baselines=bpr_baseline_indexes,
    output:
        [f"{R}/metrics-parts/{{dataset}}/{s}.efficiency.json" for s in BPR_EFF_SYSTEMS],
    params:
        cfg=CFG,
        h=bpr_efficiency_hash,
        outdir=metrics_parts_dir,
    log:
        f"{R}/logs/metrics/bpr-efficiency-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/metrics/bpr-efficiency-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.bpr efficiency --config {params.cfg} --dataset {wildcards.dataset} "
        "--dpr-model {input.dpr_model} --bpr-model {input.bpr_model} --dpr-index {input.dpr_index} "
        "--bpr-index {input.bpr_index} --hash-index {input.hash_index} --baseline-index {input.baselines} "
        "--out-dir {params.outdir} > {log} 2>&1"


rule reader_train_run:
    """The reader's training passages: methods.reader.retriever's search over the training questions."""
    input:
        unpack(reader_train_run_inputs),
    output:
        f"{R}/reader/train-runs/{{dataset}}/{{method}}.trec",
    params:
        cfg=CFG,
        h=method_hash,
        model=model_arg,
    log:
        f"{R}/logs/reader/train-run-{{method}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/reader/train-run-{{method}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness search --config {params.cfg} --method {wildcards.method} --dataset {wildcards.dataset} "
        "--index {input.index} {params.model} --split train --out {output} > {log} 2>&1"


rule reader_train:
    """The extractive reader (App. A.4): one positive + negative_passages retrieved passages per question."""
    input:
        data=READER_TRAIN_DATA,
        run=READER_TRAIN_RUN,
    output:
        directory(f"{R}/models/reader"),
    params:
        cfg=CFG,
        h=reader_hash,
    log:
        f"{R}/logs/train/reader.log",
    benchmark:
        f"{R}/benchmarks/train/reader.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.reader train --config {params.cfg} --run {input.run} --out {output} > {log} 2>&1"


rule reader_em:
    """Reader EM over the top-k passages of each methods.reader.systems run (metrics parts em)."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/reader",
        runs=reader_em_runs,
    output:
        [f"{R}/metrics-parts/{{dataset}}/{s}.em.json" for s in READER_SYSTEMS],
    params:
        cfg=CFG,
        h=reader_hash,
        systems=reader_em_systems,
    log:
        f"{R}/logs/reader/em-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/reader/em-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.reader em --config {params.cfg} --dataset {wildcards.dataset} "
        "--systems {params.systems} --model {input.model} --run {input.runs} --out {output} > {log} 2>&1"


rule bpr_metrics:
    """metrics/<dataset>/<system>.json of a Table 1/2 system: efficiency and reader EM merged."""
    input:
        unpack(bpr_metrics_parts),
    output:
        f"{R}/metrics/{{dataset}}/{{msystem}}.json",
    wildcard_constraints:
        msystem=BPR_METRICS_RE,
    params:
        cfg=CFG,
        not_run=bpr_metrics_not_run,
    log:
        f"{R}/logs/metrics/{{msystem}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/metrics/{{msystem}}-{{dataset}}.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=500,
        gpu=0,
    shell:
        "python -m harness.methods.bpr merge-metrics --config {params.cfg} --system {wildcards.msystem} "
        "--dataset {wildcards.dataset} --parts {input} --not-run {params.not_run} --out {output} > {log} 2>&1"
