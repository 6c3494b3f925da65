"""The smoke loader checks its fixture's records: a defect fails with file:line and the fix."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import cli
from harness.config import load_config
from harness.datasets import input_files, prepare, smoke, store
from harness.errors import ConfigError, DataError

Lines = list[bytes]


def _edit_record(lineno: int, change: Callable[[dict], None]) -> Callable[[Lines], None]:
    """A defect: change the JSON record on line ``lineno`` (1-based)."""
    def apply(lines: Lines) -> None:
        rec = json.loads(lines[lineno - 1])
        change(rec)
        lines[lineno - 1] = json.dumps(rec).encode() + b"\n"
    return apply


def _set(field: str, value: object) -> Callable[[dict], None]:
    return lambda rec: rec.__setitem__(field, value)


def _drop(field: str) -> Callable[[dict], None]:
    return lambda rec: rec.pop(field)


def _raw(lineno: int, data: bytes) -> Callable[[Lines], None]:
    def apply(lines: Lines) -> None:
        lines[lineno - 1] = data
    return apply


def _copy_id_of(src: int, dst: int) -> Callable[[Lines], None]:
    def apply(lines: Lines) -> None:
        rec = json.loads(lines[dst - 1])
        rec["id"] = json.loads(lines[src - 1])["id"]
        lines[dst - 1] = json.dumps(rec).encode() + b"\n"
    return apply


def defective_fixture(tmp_path: Path, name: str, defect: Callable[[Lines], None]) -> Path:
    folder = tmp_path / "fixture"
    shutil.copytree(smoke.FIXTURE, folder)
    path = folder / name
    lines = path.read_bytes().splitlines(keepends=True)
    defect(lines)
    path.write_bytes(b"".join(lines))
    return folder


DEFECTS = [
    # (file, defect, expected message: the line is named as file:line)
    ("corpus.jsonl", _raw(3, b'{"id": "p0002", "title": "Caf\xe9", "text": "x"}\n'), r"corpus.jsonl:3: not UTF-8"),
    ("questions.jsonl", _raw(7, b'{"id": "q0006", "question": "\xff\xfe"}\n'), r"questions.jsonl:7: not UTF-8"),
    ("corpus.jsonl", _raw(2, b'{"id": "p0001", "title": \n'), r"corpus.jsonl:2: invalid JSON"),
    ("corpus.jsonl", _edit_record(2, _drop("title")), r"corpus.jsonl:2: corpus record lacks field 'title'"),
    ("corpus.jsonl", _edit_record(4, _drop("id")), r"corpus.jsonl:4: corpus record lacks field 'id'"),
    ("corpus.jsonl", _edit_record(5, _drop("text")), r"corpus.jsonl:5: corpus record lacks field 'text'"),
    ("corpus.jsonl", _edit_record(5, _set("text", 7)), r"corpus.jsonl:5: field 'text' must be a string"),
    ("questions.jsonl", _edit_record(3, _drop("answers")), r"questions.jsonl:3: question record lacks field 'answers'"),
    ("questions.jsonl", _edit_record(3, _drop("gold")), r"questions.jsonl:3: question record lacks field 'gold'"),
    ("questions.jsonl", _edit_record(3, _drop("split")), r"questions.jsonl:3: question record lacks field 'split'"),
    ("questions.jsonl", _edit_record(3, _drop("question")), r"questions.jsonl:3: question record lacks field 'question'"),
    ("questions.jsonl", _edit_record(9, _set("answers", "1845")), r"questions.jsonl:9: field 'answers' must be a non-empty list"),
    ("questions.jsonl", _edit_record(4, _set("split", "dev")), r"questions.jsonl:4: unknown split 'dev' .*train, test"),
    ("questions.jsonl", _edit_record(6, _set("gold", ["p0000", "p9999"])), r"questions.jsonl:6: gold id 'p9999' .* not a document"),
    ("corpus.jsonl", _copy_id_of(1, 2), r"corpus.jsonl:2: duplicate document id 'p0000' \(first at .*corpus.jsonl:1\)"),
    ("questions.jsonl", _copy_id_of(2, 10), r"questions.jsonl:10: duplicate question id 'q0001' \(first at .*questions.jsonl:2\)"),
]


@pytest.mark.parametrize("name, defect, message", DEFECTS, ids=[m.split(": ")[1].split(" ")[0] + "-" + m[:6] for *_, m in DEFECTS])
def test_defect_fails_with_file_line_and_fix(tmp_path, monkeypatch, name, defect, message):
    folder = defective_fixture(tmp_path, name, defect)
    monkeypatch.setattr(smoke, "FIXTURE", folder)
    cfg = load_config()
    with pytest.raises(DataError, match=message) as exc:
        prepare("smoke", cfg["datasets"]["smoke"], cfg, tmp_path / "out")
    msg = str(exc.value)
    assert str(folder / name) in msg
    assert "\n" not in msg
    assert "fix:" in msg


def test_cli_prints_one_error_line_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(smoke, "FIXTURE", defective_fixture(tmp_path, "questions.jsonl", _edit_record(4, _set("split", "dev"))))
    rc = cli.main(["data", "--dataset", "smoke", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "questions.jsonl:4: unknown split 'dev'" in err and "make_smoke_fixture.py" in err
    assert not (tmp_path / "out").exists()


def test_real_fixture_loads(tmp_path):
    cfg = load_config()
    out = tmp_path / "smoke"
    out.mkdir()
    info = prepare("smoke", cfg["datasets"]["smoke"], cfg, out)
    assert info["documents"] == 122
    assert info["queries"] == {"train": 187, "test": 63}
    assert info["source"] == "harness/datasets/smoke"
    docs = {d.id for d in store.iter_corpus(out)}
    test = store.read_queries(out, "test")
    assert all(q.answers and set(q.gold) <= docs for q in test)
    assert set(store.read_qrels(out / store.QRELS)) == {q.id for q in test}


def test_meta_counts_questions_with_empty_answers(tmp_path, monkeypatch):
    cfg = load_config()
    out = tmp_path / "real"
    out.mkdir()
    assert prepare("smoke", cfg["datasets"]["smoke"], cfg, out)["empty_answers"] == {"test": 0, "train": 0}
    # line 1 is a train question: one empty answer beside a real one; line 2 (train): a blank one;
    # the first test question: a white-space-only answer
    lines = (smoke.FIXTURE / "questions.jsonl").read_bytes().splitlines(keepends=True)
    first_test = next(i for i, line in enumerate(lines, 1) if json.loads(line)["split"] == "test")

    def defect(lines: Lines) -> None:
        _edit_record(1, lambda rec: rec["answers"].append(""))(lines)
        _edit_record(2, _set("answers", [" \t"]))(lines)
        _edit_record(first_test, _set("answers", ["\n", ""]))(lines)

    monkeypatch.setattr(smoke, "FIXTURE", defective_fixture(tmp_path, "questions.jsonl", defect))
    out = tmp_path / "edited"
    out.mkdir()
    info = prepare("smoke", cfg["datasets"]["smoke"], cfg, out)
    assert info["empty_answers"] == {"test": 1, "train": 2}   # questions, not answers


def test_input_files(repo, tmp_path, monkeypatch):
    cfg = load_config()
    files = input_files(cfg, "smoke")
    assert files == ["harness/datasets/smoke/corpus.jsonl", "harness/datasets/smoke/questions.jsonl"]
    assert all((repo / f).is_file() for f in files)
    small = load_config([repo / "configs" / "profiles" / "small.yaml"])
    assert input_files(small, "squad-open") == []   # downloads are checksummed, not tracked
    with pytest.raises(ConfigError, match="did you mean 'smoke'"):
        input_files(cfg, "smoek")
    monkeypatch.setattr(smoke, "FIXTURE", tmp_path)
    assert input_files(cfg, "smoke") == [str(tmp_path / "corpus.jsonl"), str(tmp_path / "questions.jsonl")]
