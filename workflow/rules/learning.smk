from harness import learning as hlearning


rule learning:
    """The learning check of every trained model (harness/learning.py): loss fell, and each checked
    model beats its own initial checkpoint on the same queries (paired test)."""
    input:
        hlearning.required_all(config),
    output:
        f"{config['results_dir']}/learning/{config['profile']}.csv",
    params:
        cfg=CFG,
        h=report_hash,
    log:
        f"{R}/logs/learning.log",
    benchmark:
        f"{R}/benchmarks/learning.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=500,
        gpu=0,
    shell:
        "python -m harness --log {log} learning --config {params.cfg} --out {output}"
