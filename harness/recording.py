"""Which config settings a job's step reads: a recording view of the config.

A job's hash must cover every setting its step reads (``harness.plan``); a setting read but not
hashed is a stale artifact waiting to happen (change it, and nothing re-runs). The stage runner
(:func:`harness.stages.run_stage`) hands the step a :func:`recording` view of the config and
writes the dotted keys it read to the artifact's meta.json (``settings_read``);
:func:`harness.plan.Plan.unhashed_reads` names the reads that neither the job's hash nor its
inputs' hashes cover, and the smoke DAG's test fails on any.

What counts as a read: ``view[k]``, ``view.get(k)``, ``k in view`` record ``<path>.<k>`` (a nested
mapping is returned as a view of its own, so only the leaves actually used are recorded);
copying or iterating a mapping (``{**view}``, ``dict(view)``, ``view.items()``, ``for k in view``,
``json.dumps``) records every key under it, because whoever copies a section reads all of it.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any


class Reads(set):
    """The dotted keys read through one recording view (and the views made from it)."""


class RecordingDict(dict):
    """A dict over the same values whose reads are recorded in ``reads`` under ``path``.

    A dict subclass so that ``isinstance(x, dict)`` code keeps working; its iteration methods are
    overridden, which also sends ``{**x}`` and ``dict(x)`` through them (they record)."""

    __slots__ = ("_path", "_reads")

    def __init__(self, data: Mapping[str, Any], path: str, reads: Reads) -> None:
        super().__init__(data)
        self._path = path
        self._reads = reads

    # ---- recording ----------------------------------------------------------------------
    def _key(self, key: Any) -> str:
        return f"{self._path}.{key}" if self._path else str(key)

    def _wrap(self, key: Any, value: Any) -> Any:
        if isinstance(value, Mapping) and not isinstance(value, RecordingDict):
            return RecordingDict(value, self._key(key), self._reads)
        self._reads.add(self._key(key))
        return value

    def _read_all(self) -> None:
        for key, value in dict.items(self):
            if isinstance(value, Mapping):
                RecordingDict(value, self._key(key), self._reads)._read_all()
            else:
                self._reads.add(self._key(key))
        if not dict.__len__(self) and self._path:
            self._reads.add(self._path)

    # ---- the dict interface --------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        try:
            value = dict.__getitem__(self, key)
        except KeyError:
            self._reads.add(self._key(key))  # its absence was read
            raise
        return self._wrap(key, value)

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self._wrap(key, dict.__getitem__(self, key))
        self._reads.add(self._key(key))
        return default

    def __contains__(self, key: object) -> bool:
        self._reads.add(self._key(key))
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[Any]:
        self._read_all()
        return dict.__iter__(self)

    def keys(self):  # type: ignore[override]
        self._read_all()
        return dict.keys(self)

    def items(self):  # type: ignore[override]
        self._read_all()
        return dict.items(self)

    def values(self):  # type: ignore[override]
        self._read_all()
        return dict.values(self)

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        self._read_all()
        return dict(dict.items(self))

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        self._read_all()
        return copy.deepcopy(dict(dict.items(self)), memo)

    def __reduce__(self) -> tuple[Any, ...]:  # pickling (e.g. to a worker process): a plain dict
        self._read_all()
        return (dict, (dict(dict.items(self)),))

    def unwrapped(self) -> dict[str, Any]:
        """The plain dict underneath, read without recording (for the plan's own bookkeeping)."""
        return dict(dict.items(self))


def recording(cfg: Mapping[str, Any]) -> tuple[RecordingDict, Reads]:
    """A recording view of ``cfg`` and the set its reads go to."""
    reads = Reads()
    return RecordingDict(cfg, "", reads), reads


def plain(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """``cfg`` itself, or the dict under a recording view (reads through it are not recorded)."""
    return cfg.unwrapped() if isinstance(cfg, RecordingDict) else cfg


def _plain_tree(value: Any) -> Any:
    """A deep copy of a value with every recording view replaced by a plain dict (nothing recorded)."""
    if isinstance(value, Mapping):
        return {k: _plain_tree(v) for k, v in (dict.items(value) if isinstance(value, dict) else value.items())}
    return copy.deepcopy(value)


def merged(*layers: Mapping[str, Any] | None, depth: int = 0) -> dict[str, Any]:
    """Deep copies of the layers merged left to right (a later layer's key wins; mappings ``depth``
    levels down are merged key by key, deeper ones replaced), without reading them: the result is a
    recording view at the path of the first recording layer, so that only what the step then reads
    is recorded (``{**defaults, **section}`` would read every key). Use it for settings with
    defaults (``merged(DEFAULTS, section)``) and for variants (``merged(base, overrides, own)``)."""
    out: dict[str, Any] = {}
    view: RecordingDict | None = None
    for layer in layers:
        if not layer:
            continue
        if view is None and isinstance(layer, RecordingDict):
            view = layer
        for key, value in (dict.items(layer) if isinstance(layer, dict) else layer.items()):
            value = _plain_tree(value)
            if depth > 0 and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                value = merged(out[key], value, depth=depth - 1)
            out[key] = value
    return RecordingDict(out, view._path, view._reads) if view is not None else out


def snapshot(value: Any) -> Any:
    """A plain deep copy of a (recording) value, read without recording: for provenance only (a
    copy of the settings saved beside a model), never for values a step computes with."""
    return _plain_tree(value)


def covered(key: str, hashed: set[str]) -> bool:
    """Whether a read ``key`` is covered by a hashed key: the same key or one above it."""
    parts = key.split(".")
    return any(".".join(parts[:i]) in hashed for i in range(1, len(parts) + 1))
