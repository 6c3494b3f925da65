from harness import claims as hclaims
from harness import regress as hregress


rule claims:
    """The papers' directional claims checked on this profile's measurements."""
    input:
        hclaims.required_inputs(config),
        claims="configs/claims.yaml",
    output:
        f"{config['results_dir']}/claims/{config['profile']}.csv",
    params:
        cfg=CFG,
        h=profile_hash,
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
        "python -m harness claims --config {params.cfg} --out {output} > {log} 2>&1"


rule regression:
    """Measured values vs configs/expected/<profile>.yaml; fails, printing each breach."""
    input:
        hregress.required_inputs(config),
        expected=f"configs/expected/{config['profile']}.yaml",
    output:
        f"{R}/regression.json",
    params:
        cfg=CFG,
    log:
        f"{R}/logs/regression.log",
    benchmark:
        f"{R}/benchmarks/regression.tsv"
    conda:
        "../envs/harness.yaml"
    resources:
        mem_mb=500,
        gpu=0,
    shell:
        "python -m harness regress --config {params.cfg} --out {output} 2>&1 | tee {log}; exit ${{PIPESTATUS[0]}}"


# The regression check joins reproduce_all when the profile has recorded expected values
# (configs/expected/<profile>.yaml, from a real run); `snakemake regression` asks for it anyway.
REGRESSION = [f"{R}/regression.json"] if hregress.expected_path(config["profile"]).exists() else []


rule reproduce_all:
    """Every table, the index page, the claims and regression reports, and the timings."""
    input:
        ALL_TABLES,
        f"{config['results_dir']}/index.html",
        f"{config['results_dir']}/claims/{config['profile']}.csv",
        REGRESSION,
        DECONTAM_REPORT,
        [f"{R}/timing/{m}-{d}.json" for m, d in method_runs()],
    default_target: True
    localrule: True
