from harness import claims as hclaims


rule claims:
    """The papers' directional claims (configs/claims.yaml) checked on this profile's measurements."""
    input:
        hclaims.required_inputs(config),
        claims="configs/claims.yaml",
    output:
        f"{config['results_dir']}/claims/{config['profile']}.csv",
    params:
        cfg=CFG,
        h=report_hash,
    log:
        f"{R}/logs/claims.log",
    benchmark:
        f"{R}/benchmarks/claims.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=500,
        gpu=0,
    shell:
        "python -m harness --log {log} claims --config {params.cfg} --out {output}"
