"""Overriding nested keys: dotted keys (methods.dpr.epochs) and the typed values of --config.

Snakemake 9's ``--config`` refuses a dotted key ("Config entry must start with a valid
identifier"), and hands the values of a nested override (``methods={dpr: {epochs: 3}}``) over
as strings (YAML BaseLoader); ``harness.config.expand_dotted`` (first thing the Snakefile does)
types them where the schema wants a number, boolean or null. Dotted keys work in
``python -m harness config --set``, in ``load_config(overrides=...)`` and in a YAML file given
with ``--configfile``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import config as hconfig
from harness.config import REPO, expand_dotted, load_config, parse_overrides, validate
from harness.errors import ConfigError

# ------------------------------------------------------------------------------ expand_dotted


def test_dotted_keys_move_to_their_place():
    cfg = {"seed": 1, "methods.dpr.epochs": 3, "methods": {"dpr": {"epochs": 8, "lr": 0.1}}}
    expand_dotted(cfg)
    assert cfg == {"seed": 1, "methods": {"dpr": {"epochs": 3, "lr": 0.1}}}


def test_dotted_mapping_merges_into_its_section():
    cfg = {"methods": {"dpr": {"epochs": 8, "lr": 0.1}}, "methods.dpr": {"epochs": 2}}
    expand_dotted(cfg)
    assert cfg == {"methods": {"dpr": {"epochs": 2, "lr": 0.1}}}


def test_load_config_overrides_with_dotted_keys():
    cfg = load_config(overrides={"methods.dpr.epochs": 3, "methods.dpr.shared_encoder": True, "seed": 5})
    assert cfg["methods"]["dpr"]["epochs"] == 3 and type(cfg["methods"]["dpr"]["epochs"]) is int
    assert cfg["methods"]["dpr"]["shared_encoder"] is True
    assert cfg["seed"] == 5
    assert "methods.dpr.epochs" not in cfg
    assert cfg["methods"]["dpr"]["batch_size"] == load_config()["methods"]["dpr"]["batch_size"]


@pytest.mark.parametrize("text, value", [
    ("3", 3), ("8", 8), ("2.5", 2.5), ("1e-4", 1e-4), ("3.0e-4", 3.0e-4), ("1E-3", 1e-3),
])
def test_numbers_given_as_strings_are_typed(text, value):
    # what Snakemake hands over for --config 'methods={dpr: {epochs: 3}}' (and YAML 1.1 for 1e-4)
    cfg = load_config(overrides={"methods": {"dpr": {"epochs": text, "lr": text}}})
    assert cfg["methods"]["dpr"]["epochs"] == value and cfg["methods"]["dpr"]["lr"] == value
    assert not isinstance(cfg["methods"]["dpr"]["lr"], str)


@pytest.mark.parametrize("text, value", [("true", True), ("false", False), ("True", True), ("yes", True)])
def test_booleans_given_as_strings_are_typed(text, value):
    assert load_config(overrides={"methods.dpr.shared_encoder": text})["methods"]["dpr"]["shared_encoder"] is value


def test_string_settings_stay_strings():
    cfg = load_config(overrides={"description": "true", "results_dir": "3"})
    assert cfg["description"] == "true" and cfg["results_dir"] == "3"


def test_integer_setting_refuses_a_fraction():
    with pytest.raises(ConfigError, match="methods.dpr.batch_size"):
        load_config(overrides={"methods.dpr.batch_size": "2.5"})
    assert load_config(overrides={"methods.dpr.batch_size": "32"})["methods"]["dpr"]["batch_size"] == 32


def test_misspelled_dotted_key_names_it_and_the_close_match():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"methods.dpr.epoch": 3})
    msg = str(exc.value)
    assert "unknown config key 'methods.dpr.epoch' (did you mean 'methods.dpr.epochs'?)" in msg
    assert "epochs" in msg.split("allowed keys:")[1]
    with pytest.raises(ConfigError, match=r"'methodz.dpr.epochs' \(did you mean 'methods.dpr.epochs'\?\)"):
        load_config(overrides={"methodz.dpr.epochs": 3})
    with pytest.raises(ConfigError, match=r"'methods.dprr.epochs' \(did you mean 'methods.dpr.epochs'\?\)"):
        load_config(overrides={"methods.dprr.epochs": 3})


def test_dotted_key_below_a_setting_or_with_an_empty_part():
    with pytest.raises(ConfigError, match=r"'seed.x': seed is a setting of type integer, not a section"):
        load_config(overrides={"seed.x": 1})
    with pytest.raises(ConfigError, match="has an empty part"):
        load_config(overrides={"methods..epochs": 1})


def test_wrong_type_names_the_key_and_configfile():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"methods.dpr.epochs": "abc"})
    msg = str(exc.value)
    assert "methods.dpr.epochs: 'abc' is not of type 'number'" in msg
    assert "--configfile" in msg
    assert "\n" not in msg


def test_dotted_keys_in_a_config_file(tmp_path):
    over = tmp_path / "over.yaml"
    over.write_text("methods.dpr.epochs: 4\nmethods.dpr.lr: 1e-4\n", encoding="utf-8")
    cfg = load_config([over])
    assert cfg["methods"]["dpr"]["epochs"] == 4 and cfg["methods"]["dpr"]["lr"] == 1e-4
    bad = tmp_path / "bad.yaml"
    bad.write_text("methods.dpr.epoch: 4\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"{bad}: unknown config key 'methods.dpr.epoch'"):
        load_config([bad])


def test_snakemake_config_values_reach_the_schema_typed():
    """The Snakefile's path, without building the DAG: Snakemake's own --config parser and merge,
    then expand_dotted and validate as in workflow/rules/common.smk."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    over = parse_config(["seed=7", "methods={dpr: {epochs: 3, shared_encoder: true, lr: 1e-4}}"])
    assert over["methods"]["dpr"] == {"epochs": "3", "shared_encoder": "true", "lr": "1e-4"}   # strings
    config = hconfig.read_yaml(hconfig.DEFAULT_CONFIG)
    update_config(config, over)
    expand_dotted(config)
    validate(config, "config")
    dpr = config["methods"]["dpr"]
    assert (dpr["epochs"], dpr["shared_encoder"], dpr["lr"], config["seed"]) == (3, True, 1e-4, 7)
    assert type(dpr["epochs"]) is int


# ------------------------------------------------------------------------ python -m harness config --set


def test_parse_overrides():
    assert parse_overrides(["a.b=3", "c=true", "d=[1, 2]", "e=", "f=x=y"]) == \
        {"a.b": 3, "c": True, "d": [1, 2], "e": None, "f": "x=y"}
    with pytest.raises(ConfigError, match="not KEY=VALUE"):
        parse_overrides(["methods.dpr.epochs"])


def test_config_command_set(capsys):
    assert hconfig.main(["--set", "methods.dpr.epochs=3", "--set", "methods.dpr.shared_encoder=true"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["methods"]["dpr"]["epochs"] == 3 and cfg["methods"]["dpr"]["shared_encoder"] is True


def test_config_command_set_typo_exits_2():
    r = subprocess.run([sys.executable, "-m", "harness", "config", "--set", "methods.dpr.epoch=3"],
                       cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 2
    assert r.stderr.startswith("error: overrides: unknown config key 'methods.dpr.epoch' "
                               "(did you mean 'methods.dpr.epochs'?)")


# ------------------------------------------------------------------------------ Snakemake dry runs


def smk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", "-n", "--nolock", "reproduce_all", *args],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=300)


def run_data(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """A real run of one quick job (a dry run writes nothing into the results tree)."""
    return subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "--cores", "1", *args, "--",
                           f"{tmp_path}/smoke/data/smoke"], cwd=REPO, capture_output=True, text=True, check=False,
                          timeout=300)


def test_a_run_with_nested_override_writes_typed_config(tmp_path):
    r = run_data(tmp_path, "--config", f"results_dir={tmp_path}", "methods={dpr: {epochs: 3, shared_encoder: true}}")
    written = tmp_path / "smoke" / "config.yaml"
    assert written.exists(), (r.stdout + r.stderr)[-3000:]
    dpr = yaml.safe_load(written.read_text())["methods"]["dpr"]
    assert dpr["epochs"] == 3 and type(dpr["epochs"]) is int
    assert dpr["shared_encoder"] is True
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


def test_a_run_with_dotted_configfile(tmp_path):
    over = tmp_path / "over.yaml"
    over.write_text("methods.dpr.epochs: 3\nmethods.dpr.shared_encoder: true\n", encoding="utf-8")
    assert smk("--configfile", str(over), "--config", f"results_dir={tmp_path}").returncode == 0  # a dry run accepts it
    r = run_data(tmp_path, "--configfile", str(over), "--config", f"results_dir={tmp_path}")
    written = tmp_path / "smoke" / "config.yaml"
    assert written.exists(), (r.stdout + r.stderr)[-3000:]
    cfg = yaml.safe_load(written.read_text())
    assert cfg["methods"]["dpr"]["epochs"] == 3 and cfg["methods"]["dpr"]["shared_encoder"] is True
    assert not any("." in k for k in cfg)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


def test_dry_run_misspelled_nested_key(tmp_path: Path):
    over = tmp_path / "over.yaml"
    over.write_text("methods.dpr.epoch: 3\n", encoding="utf-8")
    r = smk("--configfile", str(over), "--config", f"results_dir={tmp_path}")
    assert r.returncode != 0
    assert "unknown config key 'methods.dpr.epoch' (did you mean 'methods.dpr.epochs'?)" in r.stderr
    r = smk("--config", f"results_dir={tmp_path}", "methods={dpr: {epoch: 3}}")
    assert r.returncode != 0
    assert "unknown key 'epoch' (did you mean 'epochs'?) under methods.dpr" in r.stderr
    assert not (tmp_path / "smoke").exists()


def test_dry_run_wrong_type(tmp_path):
    r = smk("--config", f"results_dir={tmp_path}", "methods={dpr: {epochs: abc}}")
    assert r.returncode != 0
    assert "methods.dpr.epochs: 'abc' is not of type 'number'" in r.stderr and "--configfile" in r.stderr


def test_config_files_are_named_by_either_spelling():
    """``--configfile`` (Snakemake's spelling) is the same option as ``--config`` in every command."""
    import argparse

    from harness.config import add_config_argument, names_config

    ap = argparse.ArgumentParser()
    add_config_argument(ap)
    for argv in (["--config", "a.yaml", "b.yaml"], ["--configfile", "a.yaml", "b.yaml"]):
        assert ap.parse_args(argv).config == ["a.yaml", "b.yaml"]
        assert names_config(argv)
    assert names_config(["--configfile=a.yaml"]) and names_config(["--config=a.yaml"])
    assert not names_config(["--train", "x=y.tsv"]) and not names_config(["--configs", "a.yaml"])
