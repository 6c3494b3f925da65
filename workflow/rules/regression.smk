from harness import regress as hregress


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
