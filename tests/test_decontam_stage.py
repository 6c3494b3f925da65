"""The decontam stage (`python -m harness decontam`) on tiny files."""
from __future__ import annotations

import csv
import json
import logging
import random
from pathlib import Path

import pytest

from harness import cli
from harness.bench.decontam import TEST_SOURCES, TRAIN_SOURCES, default_data_dir, load_queries
from harness.decontam import stage
from harness.decontam.simhash import format_query
from harness.errors import ConfigError, DataError


def write_jsonl(path: Path, records: list[dict], raw_tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records) + raw_tail, encoding="utf-8")
    return path


TEST_A = [
    {"id": "t1", "text": "Where did Abraham Lincoln die?"},
    {"id": "t2", "text": "Is there a framework for auditing social media?"},
    {"id": "t3", "text": "___"},  # empty after format_query: not indexed (tDRO)
]
TEST_B = [{"id": 7, "text": "北京大学在哪里？"}, {"id": 8, "text": "How does unemployment insurance work?"}]
TRAIN_X = [
    {"id": "x1", "text": "where did abraham lincoln died", "pos": ["p1"], "meta": {"src": "msmarco"}},
    {"id": "x2", "text": "a completely different question about cats"},
    {"id": "x3", "text": "Is there a framework for auditing social media"},
    {"id": "x4", "text": "how does unemployment insurance work?"},
]
TRAIN_Y = [{"id": "y1", "text": "北京大学在哪里"}, {"id": "y2", "text": "what is the boiling point of water"}]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "a": write_jsonl(tmp_path / "test_a.jsonl", TEST_A),
        "b": write_jsonl(tmp_path / "test_b.jsonl", TEST_B),
        # a blank line in the middle and no newline at the end
        "x": write_jsonl(tmp_path / "x.jsonl", TRAIN_X[:2], "\n" + "\n".join(json.dumps(r) for r in TRAIN_X[2:])),
        "y": write_jsonl(tmp_path / "y.jsonl", TRAIN_Y),
    }


def run_cli(files: dict[str, Path], out: Path, *extra: str) -> int:
    return cli.main(["decontam", "--train", f"x={files['x']}", "--train", f"y={files['y']}",
                     "--test", f"a={files['a']}", "--test", f"b={files['b']}", "--out-dir", str(out), *extra])


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_stage_outputs(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_cli(files, out) == 0
    assert sorted(p.name for p in out.iterdir()) == ["duplicates.jsonl", "meta.json", "table6.csv", "table7.csv", "train"]

    # kept lines are the input lines, verbatim (extra fields too)
    kept_x = (out / "train" / "x.jsonl").read_text(encoding="utf-8").splitlines()
    assert kept_x == [json.dumps(TRAIN_X[1])]
    kept_y = (out / "train" / "y.jsonl").read_text(encoding="utf-8").splitlines()
    assert kept_y == [json.dumps(TRAIN_Y[1], ensure_ascii=False)]

    dups = [json.loads(line) for line in (out / "duplicates.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(d["train_set"], d["train_id"], d["line"]) for d in dups] == [
        ("x", "x1", 1), ("x", "x3", 4), ("x", "x4", 5), ("y", "y1", 1)]
    assert [[(m["test_set"], m["test_id"]) for m in d["duplicates"]] for d in dups] == [
        [("a", "t1")], [("a", "t2")], [("b", 8)], [("b", 7)]]
    assert dups[0]["train_text"] == TRAIN_X[0]["text"]
    assert dups[0]["duplicates"][0]["test_text"] == TEST_A[0]["text"]
    assert all(0 <= m["distance"] <= 2 for d in dups for m in d["duplicates"])

    assert read_csv(out / "table6.csv") == [
        {"dataset": "x", "original": "4", "deduped": "1", "duplicates": "3"},
        {"dataset": "y", "original": "2", "deduped": "1", "duplicates": "1"},
    ]
    t7 = read_csv(out / "table7.csv")
    assert list(t7[0]) == ["train_set", "train_id", "train_query", "test_set", "test_id", "test_query"]
    assert [(r["train_id"], r["test_id"]) for r in t7] == [("x1", "t1"), ("x3", "t2"), ("x4", "8"), ("y1", "7")]

    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    assert meta["k"] == 2
    assert meta["train"]["x"] == {"path": str(files["x"]), "original": 4, "deduped": 1, "duplicates": 3,
                                  "pairs": 3, "blank_lines": 1}
    assert meta["test"]["a"] == {"path": str(files["a"]), "records": 3, "skipped_empty": 1, "indexed": 2}
    assert meta["totals"]["duplicates"] == 4 and meta["totals"]["test_indexed"] == 4
    assert meta["versions"]["simhash"] == "2.1.2"
    assert "total" in meta["seconds"]
    assert not any(p.name.startswith(".") for p in out.iterdir())  # no temp folder left


def test_k0_and_table7_limit(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_cli(files, out, "--k", "0", "--table7-per-set", "1") == 0
    rows = read_csv(out / "table6.csv")
    assert rows[0] == {"dataset": "x", "original": "4", "deduped": "2", "duplicates": "2"}  # x1 is at distance 2
    t7 = read_csv(out / "table7.csv")
    assert [(r["train_set"], r["train_id"]) for r in t7] == [("x", "x3"), ("y", "y1")]
    assert json.loads((out / "meta.json").read_text())["table7"]["per_train_set"] == 1


def test_workers_and_chunks_give_the_same_outputs(files: dict[str, Path], tmp_path: Path) -> None:
    specs_train = [("x", files["x"]), ("y", files["y"])]
    specs_test = [("a", files["a"]), ("b", files["b"])]
    stage.run(specs_train, specs_test, tmp_path / "one", table7_per_set=0)
    stage.run(specs_train, specs_test, tmp_path / "two", table7_per_set=0, workers=2, chunk=1)
    for rel in ("train/x.jsonl", "train/y.jsonl", "duplicates.jsonl", "table6.csv", "table7.csv"):
        assert (tmp_path / "one" / rel).read_bytes() == (tmp_path / "two" / rel).read_bytes(), rel


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "z", "text": "ok"', "invalid JSON"),
        ('["id", "text"]', "expected a JSON object"),
        ('{"text": "no id"}', "no 'id' field"),
        ('{"id": "z"}', "no 'text' field"),
        ('{"id": "z", "text": 5}', "'text' is int"),
    ],
)
def test_malformed_line_names_file_and_line(files: dict[str, Path], tmp_path: Path, line: str, message: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(TRAIN_Y[0]) + "\n\n" + line + "\n", encoding="utf-8")
    out = tmp_path / "out"
    with pytest.raises(DataError, match=rf"{bad}:3: .*{message}"):
        stage.run([("x", files["x"]), ("bad", bad)], [("a", files["a"])], out)
    # nothing that looks finished, no temp folder left behind
    assert not (out / "meta.json").exists() and not (out / "table6.csv").exists()
    assert not (out / "train" / "x.jsonl").exists()
    assert not out.exists()  # written whole at a temporary sibling (io.atomic_path), moved into place at the end
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_malformed_test_file_and_worker_errors(files: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad_test.jsonl"
    bad.write_bytes(b'{"id": 1, "text": "fine"}\n{"id": 2, "text": "\xff\xfe"}\n')
    with pytest.raises(DataError, match=rf"{bad}:2: invalid JSON"):
        stage.run([("x", files["x"])], [("bad", bad)], tmp_path / "o1")
    bad_train = tmp_path / "bad_train.jsonl"
    bad_train.write_text('{"id": 1, "text": "fine"}\n{"id": 2}\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"{bad_train}:2: "):
        stage.run([("bt", bad_train)], [("a", files["a"])], tmp_path / "o2", workers=2, chunk=1)


def test_cli_errors_exit_2(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out")
    cases = [
        (["--train", "x", "--test", f"a={files['a']}"], "expected NAME=PATH"),
        (["--train", f"x/y={files['x']}", "--test", f"a={files['a']}"], "the name must be"),
        (["--train", f"x={files['x']}", "--train", f"x={files['y']}", "--test", f"a={files['a']}"], "repeated"),
        (["--train", f"x={tmp_path / 'missing.jsonl'}", "--test", f"a={files['a']}"], "no such file"),
        (["--train", f"x={files['x']}", "--test", f"a={files['a']}", "--k", "-1"], "--k must be"),
        (["--test", f"a={files['a']}"], "at least one --train"),
    ]
    for args, message in cases:
        assert cli.main(["decontam", *args, "--out-dir", out]) == 2
        assert message in capsys.readouterr().err


def test_rerun_replaces_outputs(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    stage.run([("x", files["x"])], [("a", files["a"])], out)
    assert read_csv(out / "table6.csv")[0]["duplicates"] == "2"
    stage.run([("x", files["x"])], [("a", files["a"]), ("b", files["b"])], out)
    assert read_csv(out / "table6.csv")[0]["duplicates"] == "3"
    assert not any(p.name.startswith(".") for p in out.iterdir())


def test_errors_in_run_arguments(files: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        stage.run([("x", files["x"])], [("a", files["a"])], tmp_path / "o", table7_per_set=-1)
    with pytest.raises(ConfigError):
        stage.run([("x", files["x"])], [], tmp_path / "o")


@pytest.mark.skipif(not default_data_dir().is_dir(), reason="shared data folder is absent")
def test_stage_matches_package_on_real_queries(tmp_path: Path) -> None:
    simhash = pytest.importorskip("simhash")
    logging.getLogger("simhash").setLevel(logging.ERROR)
    rng = random.Random(0)
    test_q = [q for _, q in load_queries(default_data_dir(), TEST_SOURCES[:8])]
    train_q = [q for _, q in load_queries(default_data_dir(), TRAIN_SOURCES[:2])]
    test_q = rng.sample(test_q, 1500)
    train_q = rng.sample(train_q, 1000) + [q.lower().rstrip("?") for q in test_q[:300]]
    rng.shuffle(train_q)
    write_jsonl(tmp_path / "test.jsonl", [{"id": i, "text": q} for i, q in enumerate(test_q)])
    write_jsonl(tmp_path / "train.jsonl", [{"id": f"q{i}", "text": q} for i, q in enumerate(train_q)])
    out = tmp_path / "out"
    stage.run([("tr", tmp_path / "train.jsonl")], [("te", tmp_path / "test.jsonl")], out, chunk=333)

    indexed = [(i, q) for i, q in enumerate(test_q) if format_query(q)]
    index = simhash.SimhashIndex([(str(i), simhash.Simhash(format_query(q))) for i, q in indexed], k=2)
    expected = {f"q{i}" for i, q in enumerate(train_q) if index.get_near_dups(simhash.Simhash(format_query(q)))}
    dups = [json.loads(line) for line in (out / "duplicates.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {d["train_id"] for d in dups} == expected
    assert len(expected) >= 300
    kept = [json.loads(line)["id"] for line in (out / "train" / "tr.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(kept) + len(expected) == len(train_q)
