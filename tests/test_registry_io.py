"""harness.registry.Registry and the atomic-write / JSON helpers of harness.io."""
from __future__ import annotations

import json

import pytest

from harness.errors import ConfigError, DataError
from harness.io import atomic_path, atomic_write_text, iter_jsonl, read_json, write_json, write_jsonl
from harness.registry import Registry


# --------------------------------------------------------------------------- Registry

def test_add_get_names_iteration_contains():
    reg: Registry[int] = Registry("widget")
    assert reg.add("zeta", 3) == 3
    reg.add("alpha", 1)
    reg.add("mid", 2)
    assert reg.get("alpha") == 1 and reg.get("zeta") == 3
    assert reg.names() == ["alpha", "mid", "zeta"]        # sorted, not insertion order
    assert list(reg) == ["alpha", "mid", "zeta"]
    assert reg.items() == [("alpha", 1), ("mid", 2), ("zeta", 3)]
    assert "mid" in reg and "nope" not in reg


def test_register_decorator_returns_object_unchanged():
    reg: Registry = Registry("method")

    @reg.register("bm25")
    def bm25():
        return "ran"

    assert bm25() == "ran"
    assert reg.get("bm25") is bm25

    @reg.register("klass")
    class Klass:
        pass

    assert reg.get("klass") is Klass


def test_duplicates_refused_and_first_kept():
    reg: Registry[str] = Registry("backend")
    reg.add("faiss", "first")
    with pytest.raises(ValueError, match="'faiss'"):
        reg.add("faiss", "second")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("faiss")(lambda: None)
    assert reg.get("faiss") == "first"
    assert reg.names() == ["faiss"]


def test_unknown_name_suggests_close_matches():
    reg: Registry[int] = Registry("index backend")
    for i, name in enumerate(["faiss", "faiss-binary", "lucene", "token-csr"]):
        reg.add(name, i)
    with pytest.raises(ConfigError) as exc:
        reg.get("fiass")
    msg = str(exc.value)
    assert "unknown index backend 'fiass'" in msg
    assert "did you mean 'faiss'" in msg
    assert "known: faiss, faiss-binary, lucene, token-csr" in msg
    # nothing close: no suggestion, but the known names are still listed
    with pytest.raises(ConfigError) as exc:
        reg.get("qqqqqqq")
    assert "did you mean" not in str(exc.value)
    assert "token-csr" in str(exc.value)


def test_empty_registry_error():
    with pytest.raises(ConfigError, match=r"unknown dataset 'x'.*known: none"):
        Registry("dataset").get("x")


# --------------------------------------------------------------------------- atomic_path

def _entries(folder):
    return sorted(p.name for p in folder.iterdir())


def test_atomic_path_file_success(tmp_path):
    target = tmp_path / "out" / "result.txt"
    with atomic_path(target) as tmp:
        assert tmp != target
        assert not target.exists()              # nothing finished-looking while writing
        tmp.write_text("done", encoding="utf-8")
    assert target.read_text(encoding="utf-8") == "done"
    assert _entries(target.parent) == ["result.txt"]


def test_atomic_path_file_replaces_existing(tmp_path):
    target = tmp_path / "result.txt"
    target.write_text("old", encoding="utf-8")
    with atomic_path(target) as tmp:
        tmp.write_text("new", encoding="utf-8")
        assert target.read_text(encoding="utf-8") == "old"
    assert target.read_text(encoding="utf-8") == "new"
    assert _entries(tmp_path) == ["result.txt"]


def test_atomic_path_file_error_leaves_nothing(tmp_path):
    target = tmp_path / "result.txt"
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_path(target) as tmp:
            tmp.write_text("half", encoding="utf-8")
            raise RuntimeError("killed")
    assert not target.exists()
    assert _entries(tmp_path) == []


def test_atomic_path_error_keeps_previous_version(tmp_path):
    target = tmp_path / "result.txt"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half", encoding="utf-8")
            raise RuntimeError("killed")
    assert target.read_text(encoding="utf-8") == "old"
    assert _entries(tmp_path) == ["result.txt"]


def test_atomic_path_folder_success(tmp_path):
    target = tmp_path / "index"
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "meta.json").write_text("{}", encoding="utf-8")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "data.bin").write_bytes(b"\x00\x01")
        assert not target.exists()
    assert target.is_dir()
    assert _entries(target) == ["meta.json", "sub"]
    assert (target / "sub" / "data.bin").read_bytes() == b"\x00\x01"
    assert _entries(tmp_path) == ["index"]


def test_atomic_path_folder_replaces_existing_folder(tmp_path):
    target = tmp_path / "index"
    target.mkdir()
    (target / "stale.txt").write_text("stale", encoding="utf-8")
    (target / "meta.json").write_text("old", encoding="utf-8")
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "meta.json").write_text("new", encoding="utf-8")
    assert _entries(target) == ["meta.json"]            # no stale file survives
    assert (target / "meta.json").read_text(encoding="utf-8") == "new"
    assert _entries(tmp_path) == ["index"]


def test_atomic_path_folder_error_leaves_nothing(tmp_path):
    target = tmp_path / "index"
    with pytest.raises(KeyError):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "part.bin").write_bytes(b"x")
            raise KeyError("boom")
    assert not target.exists()
    assert _entries(tmp_path) == []


def test_atomic_path_folder_replaces_directory_by_file(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old", encoding="utf-8")
    with atomic_path(target) as tmp:
        tmp.write_text("now a file", encoding="utf-8")
    assert target.is_file() and target.read_text(encoding="utf-8") == "now a file"
    assert _entries(tmp_path) == ["out"]


def test_atomic_path_folder_replaces_existing_file(tmp_path):
    target = tmp_path / "out"
    target.write_text("stale file from an older version", encoding="utf-8")
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "meta.json").write_text("{}", encoding="utf-8")
    assert target.is_dir() and _entries(target) == ["meta.json"]
    assert _entries(tmp_path) == ["out"]


def test_atomic_write_text_and_write_json(tmp_path):
    atomic_write_text(tmp_path / "a.txt", "h\u00e9llo")
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "h\u00e9llo"
    write_json(tmp_path / "b.json", {"x": [1, 2], "y": None})
    assert read_json(tmp_path / "b.json") == {"x": [1, 2], "y": None}
    assert _entries(tmp_path) == ["a.txt", "b.json"]


# --------------------------------------------------------------------------- JSON / JSONL

def test_write_jsonl_round_trip(tmp_path):
    records = [{"id": "q1", "text": "Z\u00fcrich caf\u00e9", "n": 1}, {"id": "q2", "answers": ["a", "b"]}, {}]
    path = tmp_path / "data.jsonl"
    assert write_jsonl(path, iter(records)) == 3
    assert list(iter_jsonl(path)) == records
    assert path.read_text(encoding="utf-8").count("\n") == 3
    assert "Z\u00fcrich" in path.read_text(encoding="utf-8")   # written as UTF-8, not \\u escapes
    assert _entries(tmp_path) == ["data.jsonl"]


def test_write_jsonl_empty(tmp_path):
    path = tmp_path / "empty.jsonl"
    assert write_jsonl(path, []) == 0
    assert path.exists() and list(iter_jsonl(path)) == []


def test_write_jsonl_error_in_records_leaves_nothing(tmp_path):
    def records():
        yield {"a": 1}
        raise RuntimeError("producer died")

    with pytest.raises(RuntimeError):
        write_jsonl(tmp_path / "x.jsonl", records())
    assert _entries(tmp_path) == []


def test_iter_jsonl_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2\n{"a": 3}\n', encoding="utf-8")   # line 3 is broken
    it = iter_jsonl(path)
    assert next(it) == {"a": 1}
    with pytest.raises(DataError) as exc:
        next(it)
    assert f"{path}:3" in str(exc.value)


def test_iter_jsonl_non_object_line(tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text('{"a": 1}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(DataError, match=f"{path.name}:2"):
        list(iter_jsonl(path))


def test_iter_jsonl_skips_blank_lines(tmp_path):
    path = tmp_path / "blank.jsonl"
    path.write_text('\n{"a": 1}\n   \n{"b": 2}\n\n', encoding="utf-8")
    assert list(iter_jsonl(path)) == [{"a": 1}, {"b": 2}]


def test_read_json_truncated_names_file(tmp_path):
    path = tmp_path / "meta.json"
    full = json.dumps({"kind": "index", "spec": "faiss:Flat", "bytes": [1, 2, 3]}, indent=2)
    path.write_text(full[: len(full) // 2], encoding="utf-8")
    with pytest.raises(DataError) as exc:
        read_json(path)
    assert str(path) in str(exc.value)


def test_read_json_missing_names_file(tmp_path):
    path = tmp_path / "missing.json"
    with pytest.raises(DataError, match="missing.json"):
        read_json(path)


def test_atomic_path_removes_its_own_stale_temporaries_only(tmp_path):
    """A killed job leaves ``.<name>.<8 random>.tmp`` beside its output; the next write of that
    output removes it, and never a temporary of another output whose name starts the same."""
    from harness.io import stale_temporaries

    left = tmp_path / ".lightretriever.k2j4x9q0.tmp"      # a folder a SIGKILL left
    (left / "lightretriever").mkdir(parents=True)
    (left / "lightretriever" / "big.bin").write_bytes(b"x" * 100)
    left_file = tmp_path / ".lightretriever.ab_cd123.tmp"  # a file-shaped one
    left_file.write_text("half")
    other = tmp_path / ".lightretriever.speed.k2j4x9q0.tmp"  # another output's, maybe in flight
    other.mkdir()
    unrelated = tmp_path / ".lightretriever.short.tmp"
    unrelated.mkdir()
    assert stale_temporaries(tmp_path / "lightretriever") == [left_file, left]
    with atomic_path(tmp_path / "lightretriever") as t:
        t.mkdir()
    assert not left.exists() and not left_file.exists()
    assert other.exists() and unrelated.exists() and (tmp_path / "lightretriever").is_dir()
    assert stale_temporaries(tmp_path / "missing" / "x") == []
