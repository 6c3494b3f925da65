"""Atomic writes and small file helpers: a killed rule never leaves a file that looks finished."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError, DataError


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary sibling path; on success it is renamed to ``path``, on error removed.

    Works for files and folders (write a folder at the yielded path, it is moved into place).
    A temporary of ``path`` that a killed process left behind is removed first (:func:`stale_temporaries`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in stale_temporaries(path):
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    try:
        yield target
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif target.is_dir() and (path.is_file() or path.is_symlink()):
            path.unlink()
        os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stale_temporaries(path: Path) -> list[Path]:
    """The temporaries :func:`atomic_path` made for ``path`` itself (``.<name>.<8 random>.tmp``
    beside it), never another output's: ``.lightretriever.speed.x1y2z3w4.tmp`` is not a temporary
    of ``lightretriever``. Only the job writing ``path`` calls this, and Snakemake runs one such
    job at a time, so whatever matches was left by a killed run."""
    path = Path(path)
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.iterdir() if pattern.fullmatch(p.name))


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path} does not exist; run the rule that produces it first") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg}); delete the file and re-run") from None


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Stream records from a JSONL file; a bad line raises DataError naming file:line."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object per line")
            yield rec


def write_jsonl(path: Path, records: Any) -> int:
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster on the published-numbers files


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; a syntax error names the file and line."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=_LOADER)  # noqa: S506 - a safe loader (libyaml's when built)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None


def read_benchmarks(bench_dir: Path, column: str = "s") -> dict[str, float]:
    """A column of Snakemake's benchmark files under ``bench_dir`` (``s``: a job's wall seconds;
    ``cpu_time``: its CPU seconds), by file (its path under ``bench_dir`` without ``.tsv``; a file that
    timed its job several times, the sum); a file or row without the column is skipped."""
    import csv

    out: dict[str, float] = {}
    for tsv in sorted(Path(bench_dir).rglob("*.tsv")) if Path(bench_dir).is_dir() else []:
        with tsv.open() as f:
            for row in csv.DictReader(f, delimiter="\t"):
                try:
                    value = float(row[column])
                except (KeyError, TypeError, ValueError):
                    continue
                key = tsv.relative_to(bench_dir).with_suffix("").as_posix()
                out[key] = out.get(key, 0.0) + value
    return out
