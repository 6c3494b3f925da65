"""`python -m harness bench phrase-search` at a tiny size: the structure of its figures, never speed."""
from __future__ import annotations

import json

import pytest

from harness.bench import BENCHMARKS
from harness.bench import phrase_search as ps
from harness.errors import ConfigError

TINY = ["--vectors", "20000", "--coarse-lists", "4096", "--recall-vectors", "4000", "--recall-queries", "24",
        "--dim", "64", "--batches", "1", "--batch", "8", "--k", "20", "--opq-niter", "2"]


def test_registered():
    assert BENCHMARKS.get("phrase-search") == "harness.bench.phrase_search"


def test_tiny_run_figures(tmp_path, capsys):
    out = tmp_path / "ps.json"
    assert ps.main([*TINY, "--json", str(out), "--workdir", str(tmp_path)]) == 0
    report = json.loads(out.read_text())
    assert report["benchmark"] == "phrase-search" and report["label"] == ps.LABEL
    assert report["target"] == "at least 13.6 Q/s on CPU, projected to 770M vectors"
    assert isinstance(report["target_met"], bool)
    m = report["measured_index"]
    assert m["vectors"] == 20000 and m["nlist"] == round(20000 / ps.LIST_LEN) and m["nprobe"] == m["nlist"]
    for key in ("search_s_questions", "scan_s_questions", "coarse_s_questions", "qps_measured", "bytes_per_vector"):
        assert m[key] > 0
    # SQ4 codes + 8-byte ids + the coarse centroids spread over ~734 vectors per list
    assert m["bytes_per_vector"] == pytest.approx(64 / 2 + 8 + 64 * 4 / ps.LIST_LEN, rel=0.02)
    assert m["codes_scanned_per_query_questions"] == pytest.approx(20000)  # every list probed
    c = report["coarse_1m"]
    assert c["scaled_to_1m"] and c["scale"] == pytest.approx(ps.PAPER_NLIST / 4096)
    p = report["projection"]
    for key in ("qps_questions", "qps_half", "qps_questions_with_span", "index_gb_at_770m"):
        assert p[key] > 0
    assert p["qps_questions"] == pytest.approx(8 / (c["coarse_s_questions"] + m["scan_s_questions"]))
    assert p["qps_questions_faiss_coarse"] == pytest.approx(8 / (c["faiss_coarse_s_questions"] + m["scan_s_questions"]))
    assert report["target_met"] == (p["qps_questions"] >= 13.6)
    acc = report["accuracy"]
    assert set(acc["indexes"]) == {"flat", "ivf-sq4", "opq-ivf-pq"}
    assert acc["indexes"]["flat"]["recall"]["exact"] == {"R@1": 1.0, "R@10": 1.0, "R@100": 1.0}
    assert acc["indexes"]["opq-ivf-pq"]["spec"] == "phrase:OPQ8,IVF5,PQ8x8"
    for row in acc["indexes"].values():
        for vals in row["recall"].values():
            assert all(0.0 <= v <= 1.0 for v in vals.values())
        assert 0.0 <= row["phrase_top1_agreement_with_flat"] <= 1.0
    assert acc["span"]["span_s_per_batch"] > 0 and acc["span"]["L"] == 10
    text = capsys.readouterr().out
    assert "projected to 770M vectors" in text and ("MET" in text)
    assert not list(tmp_path.glob("phrase-search-*"))  # the subset's dump is removed


def test_bad_options():
    with pytest.raises(ConfigError, match="--opq-m 7 must divide --dim 64"):
        ps.run(["--dim", "64", "--opq-m", "7"])
    with pytest.raises(ConfigError, match="--batch must be >= 1"):
        ps.run(["--batch", "0"])
