"""Measure names in configs/expected and configs/claims.yaml: a typo is an unknown measure, not a missing value."""
from __future__ import annotations

import pytest

from harness import claims, regress
from harness.config import REPO
from harness.errors import ConfigError
from harness.measured import check_measure


@pytest.mark.parametrize("name", ["nDCG@10", "Success@20", "Success@1", "R@100", "RR@10", "AP", "P@5",
                                  "nDCG(judged_only=True)@10", "metric:query_ms", "metric:index_bytes"])
def test_known_measures_pass(name):
    check_measure(name, "here")


@pytest.mark.parametrize("name, close", [
    ("Sucess@20", "Success@20"),
    ("success@20", "Success@20"),
    ("ndcg@10", "nDCG@10"),
    ("nDGC@10", "nDCG@10"),
    ("Recal@100", "R@100"),          # the suggestion is printed the way ir_measures prints it
])
def test_typo_is_unknown_with_closest_name(name, close):
    with pytest.raises(ConfigError) as exc:
        check_measure(name, "f.yaml: entry e")
    msg = str(exc.value)
    assert msg.startswith(f"f.yaml: entry e: unknown measure {name!r}")
    assert f"did you mean {close!r}?" in msg
    assert "metric:<name>" in msg     # the fix names the two forms


@pytest.mark.parametrize("name", ["foo", "nDCG@", "@10", "metric:", "metric:query ms", "metric:a/b"])
def test_malformed_measures_are_unknown(name):
    with pytest.raises(ConfigError, match="unknown measure"):
        check_measure(name, "here")


@pytest.mark.parametrize("alias, canonical", [("MRR@10", "RR@10"), ("NDCG@10", "nDCG@10"), ("Recall@100", "R@100")])
def test_alias_must_be_written_as_ir_measures_prints_it(alias, canonical):
    # the evaluation files key measures by the printed form: an alias would never be found
    with pytest.raises(ConfigError, match=f"is written '{canonical}'"):
        check_measure(alias, "here")


def test_expected_file_with_typo(tmp_path):
    path = tmp_path / "smoke.yaml"
    path.write_text("profile: smoke\nvalues:\n"
                    "- {key: smoke/bm25/Success@1, value: 0.3, tol: 0.05}\n"
                    "- {key: smoke/dpr/Sucess@20, value: 0.9, tol: 0.05}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        regress.load_expected("smoke", path)
    msg = str(exc.value)
    assert str(path) in msg and "smoke/dpr/Sucess@20" in msg
    assert "unknown measure 'Sucess@20' (did you mean 'Success@20'?)" in msg
    assert "missing" not in msg


def test_expected_file_without_typo_loads(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("profile: x\nvalues:\n- {key: smoke/svdr/metric:token_index_bytes, value: 1.0, tol: 0.1}\n",
                    encoding="utf-8")
    assert regress.load_expected("x", path)["values"][0]["tol"] == 0.1


def test_claims_file_with_typo(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text(
        "claims:\n"
        "  - id: ok-claim\n    paper: svdr\n    statement: s\n"
        "    lhs: {system: dpr, dataset: NQ, measure: Success@20}\n    op: '>'\n    rhs: {value: 0.1}\n"
        "  - id: typo-claim\n    paper: svdr\n    statement: s\n"
        "    lhs: {system: dpr, dataset: NQ, measure: Success@20}\n    op: '>'\n"
        "    rhs: {system: bm25, dataset: NQ, measure: nDGC@10}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        claims.load_claims(path)
    msg = str(exc.value)
    assert str(path) in msg and "claim typo-claim (rhs)" in msg
    assert "unknown measure 'nDGC@10' (did you mean 'nDCG@10'?)" in msg


def test_committed_expected_values_and_claims_load():
    assert claims.load_claims()
    for path in sorted((REPO / "configs" / "expected").glob("*.yaml")):
        assert regress.load_expected(path.stem, path)["values"]
        assert regress.load_expected(path.stem)["values"]     # the old call form still works
