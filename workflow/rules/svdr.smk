# SVDR / VDR (Zhou et al.; harness/methods/vdr.py). System ids, as the tables and claims name them:
#   <m>.full / <m>.alpha / <m>.beta          search functions of §4.4 (m = svdr or vdr)
#   <m>.beta-m<k>                             beta search + re-rank of the top k (on-the-fly E_θ(p))
#   <m>.abl-<ablation>-full|beta              Figure 3 ablations (methods.<m>.ablations)
#   dpr.bm25-m<k>                             BM25 + DPR re-rank of the top k (Table 1 baseline)
#   <m>.index, <m>.lat-*, svdr.lat-bm25|dpr, svdr.intrain-*, svdr.synth-*   efficiency figures
#                                             (metrics/<dataset>/<system>.json; Tables 2, 3, 5, claims)
# Commands: `python -m harness index|timing` (generic) and `python -m harness.methods.svdr_cli ...`.


rule vdr_token_index:
    """T(D): the binary token index of a dataset (spec token-csr; tokenizer only, no model)."""
    input:
        f"{R}/data/{{dataset}}",
    output:
        directory(f"{R}/indexes/{{vmethod}}/{{dataset}}"),
    wildcard_constraints:
        vmethod=VDR_RE,
    params:
        cfg=CFG,
        h=vdr_token_index_hash,
    log:
        f"{R}/logs/index/{{vmethod}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/index/{{vmethod}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "python -m harness index --config {params.cfg} --method {wildcards.vmethod} --dataset {wildcards.dataset} "
        "--out {output} > {log} 2>&1"


rule vdr_train:
    """Train E_θ: L_p (+ L_sp for SVDR), BM25 then in-training beta-search negatives (§4.2-4.3)."""
    input:
        unpack(vdr_train_inputs),
    output:
        directory(f"{R}/models/{{vmethod}}"),
    wildcard_constraints:
        vmethod=VDR_RE,
    params:
        cfg=CFG,
        h=vdr_train_hash,
    log:
        f"{R}/logs/train/{{vmethod}}.log",
    benchmark:
        f"{R}/benchmarks/train/{{vmethod}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli train --config {params.cfg} --method {wildcards.vmethod} "
        "--negatives {input.negatives} --token-index {input.index} --out {output} > {log} 2>&1"


rule vdr_train_ablation:
    """One Figure 3 ablation model (methods.<m>.ablations.<ablation> over ablation_overrides)."""
    input:
        unpack(vdr_train_inputs),
    output:
        directory(f"{R}/models/{{vmethod}}-ablation/{{ablation}}"),
    wildcard_constraints:
        vmethod=VDR_RE,
        ablation="[a-z0-9]+",
    params:
        cfg=CFG,
        h=vdr_ablation_hash,
    log:
        f"{R}/logs/train/{{vmethod}}-ablation-{{ablation}}.log",
    benchmark:
        f"{R}/benchmarks/train/{{vmethod}}-ablation-{{ablation}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli train --config {params.cfg} --method {wildcards.vmethod} "
        "--ablation {wildcards.ablation} --negatives {input.negatives} --token-index {input.index} --out {output} "
        "> {log} 2>&1"


rule vdr_emb_index:
    """E_θ(D): the embedding-based index (sparse top-k vectors, scipy CSR)."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/{{vmethod}}",
    output:
        directory(f"{R}/indexes/{{vmethod}}-emb/{{dataset}}"),
    wildcard_constraints:
        vmethod=VDR_RE,
    params:
        cfg=CFG,
        h=vdr_hash,
    log:
        f"{R}/logs/index/{{vmethod}}-emb-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/index/{{vmethod}}-emb-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli emb-index --config {params.cfg} --method {wildcards.vmethod} "
        "--dataset {wildcards.dataset} --model {input.model} --out {output} > {log} 2>&1"


rule vdr_ablation_emb_index:
    """E_θ(D) of an ablation model."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/{{vmethod}}-ablation/{{ablation}}",
    output:
        directory(f"{R}/indexes/{{vmethod}}-ablation/{{ablation}}/{{dataset}}"),
    wildcard_constraints:
        vmethod=VDR_RE,
        ablation="[a-z0-9]+",
    params:
        cfg=CFG,
        h=vdr_ablation_hash,
    log:
        f"{R}/logs/index/{{vmethod}}-ablation-{{ablation}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/index/{{vmethod}}-ablation-{{ablation}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli emb-index --config {params.cfg} --method {wildcards.vmethod} "
        "--dataset {wildcards.dataset} --model {input.model} --out {output} > {log} 2>&1"


rule vdr_search:
    """full <E(q),E(D)> / alpha <T(q),E(D)> (embedding index) or beta <E(q),T(D)> (token index)."""
    input:
        unpack(vdr_search_inputs),
    output:
        f"{R}/runs/{{dataset}}/{{vmethod}}.{{svariant}}.trec",
    wildcard_constraints:
        vmethod=VDR_RE,
        svariant="full|alpha|beta",
    params:
        cfg=CFG,
        h=vdr_hash,
    log:
        f"{R}/logs/search/{{vmethod}}.{{svariant}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/{{vmethod}}.{{svariant}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli search --config {params.cfg} --method {wildcards.vmethod} "
        "--dataset {wildcards.dataset} --variant {wildcards.svariant} --system {wildcards.vmethod}.{wildcards.svariant} "
        "--model {input.model} --index {input.index} --out {output} > {log} 2>&1"


rule vdr_ablation_search:
    """An ablation model's full or beta run (reuses a main model when the settings are the same)."""
    input:
        unpack(vdr_ablation_search_inputs),
    output:
        f"{R}/runs/{{dataset}}/{{vmethod}}.abl-{{ablation}}-{{avariant}}.trec",
    wildcard_constraints:
        vmethod=VDR_RE,
        ablation="[a-z0-9]+",
        avariant="full|beta",
    params:
        cfg=CFG,
        h=vdr_ablation_hash,
    log:
        f"{R}/logs/search/{{vmethod}}.abl-{{ablation}}-{{avariant}}-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/{{vmethod}}.abl-{{ablation}}-{{avariant}}-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli search --config {params.cfg} --method {wildcards.vmethod} "
        "--dataset {wildcards.dataset} --variant {wildcards.avariant} "
        "--system {wildcards.vmethod}.abl-{wildcards.ablation}-{wildcards.avariant} "
        "--model {input.model} --index {input.index} --out {output} > {log} 2>&1"


rule vdr_rerank:
    """Beta search + re-rank(m): the top m of the beta run embedded on the fly and re-scored."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/{{vmethod}}",
        run=f"{R}/runs/{{dataset}}/{{vmethod}}.beta.trec",
    output:
        [f"{R}/runs/{{dataset}}/{{vmethod}}.beta-m{m}.trec" for m in VDR_RERANK_DEPTHS],
    wildcard_constraints:
        vmethod=VDR_RE,
    params:
        cfg=CFG,
        h=vdr_hash,
        depths=" ".join(str(m) for m in VDR_RERANK_DEPTHS),
    log:
        f"{R}/logs/search/{{vmethod}}.beta-rerank-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/{{vmethod}}.beta-rerank-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli rerank --config {params.cfg} --method {wildcards.vmethod} "
        "--dataset {wildcards.dataset} --model {input.model} --run {input.run} --depths {params.depths} "
        "--out {output} > {log} 2>&1"


rule dpr_bm25_rerank:
    """BM25 + DPR (m): the BM25 run's top m re-scored by the trained DPR encoders."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/dpr",
        run=f"{R}/runs/{{dataset}}/bm25.trec",
    output:
        [f"{R}/runs/{{dataset}}/dpr.bm25-m{m}.trec" for m in VDR_RERANK_DEPTHS],
    params:
        cfg=CFG,
        h=dpr_rerank_hash,
        depths=" ".join(str(m) for m in VDR_RERANK_DEPTHS),
    log:
        f"{R}/logs/search/dpr.bm25-rerank-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/search/dpr.bm25-rerank-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli rerank-dpr --config {params.cfg} --dataset {wildcards.dataset} "
        "--model {input.model} --run {input.run} --depths {params.depths} --out {output} > {log} 2>&1"


rule vdr_index_metrics:
    """Bytes on disk and in memory, and build time, of the token and the embedding index."""
    input:
        token=f"{R}/indexes/{{vmethod}}/{{dataset}}",
        emb=f"{R}/indexes/{{vmethod}}-emb/{{dataset}}",
    output:
        both=f"{R}/metrics/{{dataset}}/{{vmethod}}.index.json",
        token=f"{R}/metrics/{{dataset}}/{{vmethod}}.index-token.json",
        emb=f"{R}/metrics/{{dataset}}/{{vmethod}}.index-emb.json",
    wildcard_constraints:
        vmethod=VDR_RE,
    params:
        cfg=CFG,
        h=vdr_hash,
    log:
        f"{R}/logs/metrics/{{vmethod}}.index-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/metrics/{{vmethod}}.index-{{dataset}}.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=500,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli index-metrics --config {params.cfg} --method {wildcards.vmethod} "
        "--dataset {wildcards.dataset} --token-index {input.token} --emb-index {input.emb} --out {output.both} > {log} 2>&1"


rule vdr_latency:
    """Table 2 rows full, alpha, beta: per-stage latency with the SVDR timing protocol (App. B)."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/{{vmethod}}",
    output:
        [f"{R}/metrics/{{dataset}}/{{vmethod}}.lat-{row}.json" for row in ("full", "alpha", "beta")],
    wildcard_constraints:
        vmethod=VDR_RE,
    params:
        cfg=CFG,
        outdir=metrics_dir,
        h=vdr_latency_hash,
    log:
        f"{R}/logs/metrics/{{vmethod}}.lat-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/metrics/{{vmethod}}.lat-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli latency --config {params.cfg} --method {wildcards.vmethod} "
        "--dataset {wildcards.dataset} --model {input.model} --out-dir {params.outdir} > {log} 2>&1"


rule vdr_latency_rerank:
    """Table 2 rows SVDR_β (k=m): the beta row plus E_θ(p) of the top m."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/{{vmethod}}",
        base=f"{R}/metrics/{{dataset}}/{{vmethod}}.lat-beta.json",
    output:
        [f"{R}/metrics/{{dataset}}/{{vmethod}}.lat-beta-m{m}.json" for m in VDR_LATENCY_DEPTHS],
    wildcard_constraints:
        vmethod=VDR_RE,
    params:
        cfg=CFG,
        outdir=metrics_dir,
        h=vdr_latency_hash,
        depths=" ".join(str(m) for m in VDR_LATENCY_DEPTHS),
    log:
        f"{R}/logs/metrics/{{vmethod}}.lat-rerank-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/metrics/{{vmethod}}.lat-rerank-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli latency-rerank --config {params.cfg} --method {wildcards.vmethod} "
        "--dataset {wildcards.dataset} --model {input.model} --base {input.base} --depths {params.depths} "
        "--out-dir {params.outdir} > {log} 2>&1"


rule svdr_latency_baselines:
    """Table 2 rows BM25 and DPR, from the generic timing rule's JSON (same protocol)."""
    input:
        data=f"{R}/data/{{dataset}}",
        bm25=f"{R}/timing/bm25-{{dataset}}.json",
        dpr=f"{R}/timing/dpr-{{dataset}}.json",
    output:
        f"{R}/metrics/{{dataset}}/svdr.lat-bm25.json",
        f"{R}/metrics/{{dataset}}/svdr.lat-dpr.json",
    params:
        cfg=CFG,
        outdir=metrics_dir,
        h=svdr_baselines_hash,
    log:
        f"{R}/logs/metrics/svdr.lat-baselines-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/metrics/svdr.lat-baselines-{{dataset}}.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=500,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli latency-baselines --config {params.cfg} --dataset {wildcards.dataset} "
        "--bm25-timing {input.bm25} --dpr-timing {input.dpr} --out-dir {params.outdir} > {log} 2>&1"


rule svdr_intrain:
    """Table 3: in-training retrieval latency per batch, storage, memory (BM25, DPR, SVDR_β)."""
    input:
        data=f"{R}/data/{{dataset}}",
        model=f"{R}/models/svdr",
        token=f"{R}/indexes/svdr/{{dataset}}",
        bm25=f"{R}/indexes/bm25/{{dataset}}",
        dpr_model=f"{R}/models/dpr",
        dpr_index=f"{R}/indexes/dpr/{{dataset}}",
    output:
        f"{R}/metrics/{{dataset}}/svdr.intrain-bm25.json",
        f"{R}/metrics/{{dataset}}/svdr.intrain-dpr.json",
        f"{R}/metrics/{{dataset}}/svdr.intrain-beta.json",
    params:
        cfg=CFG,
        outdir=metrics_dir,
        h=svdr_intrain_hash,
    log:
        f"{R}/logs/metrics/svdr.intrain-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/metrics/svdr.intrain-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli intrain --config {params.cfg} --dataset {wildcards.dataset} "
        "--model {input.model} --token-index {input.token} --bm25-index {input.bm25} --dpr-model {input.dpr_model} "
        "--dpr-index {input.dpr_index} --out-dir {params.outdir} > {log} 2>&1"


rule svdr_synthetic:
    """Table 5: synthetic binary token index, density a and query batch size (methods.svdr.synthetic)."""
    output:
        [f"{R}/metrics/{{dataset}}/svdr.synth-a{a}.json" for a in SVDR_SYNTH["densities"]],
        [f"{R}/metrics/{{dataset}}/svdr.synth-bs{b}.json" for b in SVDR_SYNTH["batch_sizes"]],
    params:
        cfg=CFG,
        outdir=metrics_dir,
        h=svdr_synthetic_hash,
    log:
        f"{R}/logs/metrics/svdr.synthetic-{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/metrics/svdr.synthetic-{{dataset}}.tsv"
    threads: 2
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "python -m harness.methods.svdr_cli synthetic --config {params.cfg} --dataset {wildcards.dataset} "
        "--out-dir {params.outdir} > {log} 2>&1"
