"""The harness as a library: one interface every method implements, and pyserini/ir_measures-style
commands on top of it.

- :class:`Encoder`: ``load(path)`` (a trained model folder), ``encode_queries(texts)`` and, where the
  method encodes documents on their own, ``encode_docs(docs)``.
- :class:`Retriever`: ``search(queries, k) -> run`` (``{qid: [(docid, score), ...]}``, best first),
  queries as a mapping ``qid -> text`` or a sequence of :class:`harness.datasets.Query`.
- :func:`load_retriever` / :func:`load_encoder`: open trained artifacts without a config. Every
  artifact folder has a meta.json (:mod:`harness.meta`) naming its method, its job, the config values
  its hash covers and its inputs; the method's settings are rebuilt from those values (and the model's
  and source index's, followed through ``inputs``) over the method's schema defaults, and handed to the
  method's own loader (``harness.methods.<m>.Retriever`` / ``.Encoder``). Settings no artifact records
  (search-time ones such as BM25's ``k1``/``b``, QCR's ``rescore_depth``, ``device``) take the schema
  default unless ``settings=`` says otherwise.

Commands (:func:`search_main`, :func:`evaluate_main`; the stage forms with ``--job`` are unchanged):

    python -m harness search --index DIR --topics FILE --output RUN [--k 1000] [--model DIR]
    python -m harness evaluate QRELS RUN "nDCG@10" [MEASURE ...] [--per-query]
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.errors import ConfigError, DataError

#: a run: query id -> [(doc id, score), ...], best first
Run = dict[str, list[tuple[str, float]]]

META = "meta.json"


@runtime_checkable
class Encoder(Protocol):
    """A trained model's encoders. ``encode_docs`` exists where the method encodes documents on their
    own (not DensePhrases' phrases, not BM25)."""

    @classmethod
    def load(cls, path: str | Path) -> Encoder: ...

    def encode_queries(self, texts: Sequence[str]) -> Any: ...


@runtime_checkable
class Retriever(Protocol):
    """A model with its index: ``search`` returns the method's main system (``system``)."""

    system: str

    def search(self, queries: Mapping[str, str] | Sequence[Any], k: int = 1000) -> Run: ...


# ---- artifacts -> a minimal config ---------------------------------------------------------------


def read_artifact(folder: str | Path) -> dict[str, Any]:
    """The meta.json of an artifact folder (model or index), with a clear error when there is none."""
    from harness.io import read_json

    path = Path(folder) / META
    if not path.is_file():
        raise DataError(f"{folder} has no {META}: not a model or index folder the harness built",
                        fix="pass the folder a `python -m harness train|index` job wrote (results/<profile>/models/<id> "
                            "or results/<profile>/indexes/<id>/<dataset>)")
    return read_json(path)


def resolve_input(path: str | Path, near: str | Path) -> Path:
    """An ``inputs`` path of a meta.json: absolute, or relative to the directory the job ran in (the
    checkout): tried from the working directory, then from each folder above ``near``."""
    p = Path(path)
    if p.is_absolute():
        return p
    for base in (Path.cwd(), *Path(near).resolve().parents):
        if (base / p).exists():
            return base / p
    raise DataError(f"{near}/{META} names input {path}, which is not found from here or from any folder above {near}",
                    fix="run from the checkout that built it, or pass the folder explicitly (model_dir=..., --model)")


def model_of(folder: str | Path, meta: Mapping[str, Any] | None = None) -> Path | None:
    """The model an index was built from: its ``inputs.model``, else its source index's (``source``,
    ``dpr_index``: BPR's hash index, the DPR baselines), followed down; None if it has none."""
    meta = meta if meta is not None else read_artifact(folder)
    inputs = meta.get("inputs") or {}
    if "model" in inputs:
        return resolve_input(inputs["model"], folder)
    for role in ("source", "dpr_index"):
        if role in inputs:
            src = resolve_input(inputs[role], folder)
            return model_of(src, read_artifact(src))
    return None


def _values(folder: Path, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The config values of an artifact and of its model and source indexes (theirs first, its own win)."""
    out: dict[str, Any] = {}
    inputs = meta.get("inputs") or {}
    for role in ("model", "source", "dpr_index"):
        if role in inputs:
            src = resolve_input(inputs[role], folder)
            if (src / META).is_file():
                out.update(_values(src, read_artifact(src)))
    out.update(meta.get("config_values") or {})
    return out


def _module(method: str):
    from harness.methods import METHODS, method_module

    if method not in METHODS:
        raise ConfigError(f"{method!r} is not a retrieval method (methods: {', '.join(METHODS)}): it has no "
                          f"Retriever or Encoder", fix="pass a model or index folder of a retrieval method")
    return method_module(method)


def artifact_config(values: Mapping[str, Any], method: str,
                    settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A minimal config from an artifact's config values: ``methods.<m>`` for every method named
    (schema defaults, then the recorded values but nulls), ``backbones``, ``seed``; ``settings``
    overrides ``methods.<method>`` (e.g. ``{"device": "cuda", "k1": 1.2}``; dotted keys nest)."""
    from harness.config import deep_merge, expand_dotted, fragment_defaults
    from harness.methods import METHODS

    nested: dict[str, Any] = {}
    for key, value in values.items():
        # meta.json records a key the config leaves out as null (harness.config.lookup_key): the
        # method then read its schema default, which a recorded null must not replace
        if value is None or not key.startswith(("methods.", "backbones.")):
            continue
        one = {key: value}
        try:
            expand_dotted(one, source="meta.json")
        except ConfigError:
            continue  # a key this version's schema no longer has: nothing reads it
        nested = deep_merge(nested, one)
    sections = dict(nested.get("methods") or {})
    names = [m for m in dict.fromkeys([method, *sections]) if m in METHODS]
    methods = {}
    for name in names:
        mod = _module(name)
        methods[name] = deep_merge(fragment_defaults(mod.__file__, mod.SCHEMA), sections.get(name) or {})
    over: dict[str, Any] = {}
    for key, value in (settings or {}).items():  # dotted keys (--set instructions.nq=...) nest
        node = over
        *path, last = str(key).split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    methods[method] = deep_merge(methods[method], over)
    return {"seed": values.get("seed", 0), "methods": methods, "backbones": dict(nested.get("backbones") or {}),
            "datasets": {}, "evaluate": {"depth": 1000}}


def _index_candidates(model_dir: Path) -> list[Path]:
    """Index folders under the model's results tree (``<root>/indexes/*/*``) built from ``model_dir``:
    the model their meta.json names, or one at the same place in its tree (``models/<id>``: a tree
    copied or moved since, whose meta.json files name the absolute paths it was built at)."""
    root = next((p.parent for p in model_dir.resolve().parents if p.name == "models"), None)
    if root is None or not (root / "indexes").is_dir():
        return []
    place = model_dir.resolve().relative_to(root).parts
    found = []
    for meta_file in sorted((root / "indexes").glob(f"*/*/{META}")):
        try:
            src = (read_artifact(meta_file.parent).get("inputs") or {}).get("model")
            if src and (Path(src).parts[-len(place):] == place if Path(src).is_absolute()
                        else resolve_input(src, meta_file.parent).resolve() == model_dir.resolve()):
                found.append(meta_file.parent)
        except (DataError, ValueError, OSError):
            continue
    return found


def _open(model_dir: str | Path | None, index_dir: str | Path | None):
    """(method, index job, dataset, index dir, its inputs, model dir, config values) of the artifacts."""
    if model_dir is None and index_dir is None:
        raise ConfigError("load_retriever needs model_dir or index_dir (or both)")
    model_dir = Path(model_dir) if model_dir is not None else None
    mmeta = read_artifact(model_dir) if model_dir is not None else None
    if mmeta is not None and mmeta.get("kind") != "model":
        raise ConfigError(f"{model_dir} holds a {mmeta.get('kind')!r}, not a model",
                          fix="pass an index folder as index_dir (--index), a model folder as model_dir (--model)")
    if mmeta is not None:
        _module(mmeta.get("method", "?"))  # a retrieval method's model (not the reader's)
    if index_dir is None:
        base = (mmeta.get("inputs") or {}).get("model")  # a model fine-tuned from another searches its index
        found = _index_candidates(model_dir) or (_index_candidates(resolve_input(base, model_dir)) if base else [])
        if len(found) != 1:
            where = ("; built from it: " + ", ".join(map(str, found))) if found else \
                " (none was built from it in this results tree)"
            raise ConfigError(f"model {model_dir} ({mmeta.get('method')}) searches an index: pass index_dir "
                              f"(--index){where}", fix=f"python -m harness index --job {mmeta.get('job')} "
                                                        "--dataset KEY --out DIR builds one")
        index_dir = found[0]
    index_dir = Path(index_dir)
    imeta = read_artifact(index_dir)
    if imeta.get("kind") != "index":
        raise ConfigError(f"{index_dir} holds a {imeta.get('kind')!r}, not an index",
                          fix="pass results/<profile>/indexes/<id>/<dataset> as index_dir (--index)")
    method = imeta["method"]
    values = _values(index_dir, imeta)  # the index's own model (and source indexes) first
    if model_dir is None:
        model_dir = model_of(index_dir, imeta)
    else:  # another model on this index (e.g. DensePhrases' query-side fine-tuned one): its values win
        if mmeta["method"] != method and not (imeta["job"].startswith("dpr.") and mmeta["method"] == "dpr"):
            raise ConfigError(f"model {model_dir} is a {mmeta['method']} model, index {index_dir} a {method} index")
        values = {**values, **_values(model_dir, mmeta), **(imeta.get("config_values") or {})}
    inputs = {r: resolve_input(p, index_dir) for r, p in (imeta.get("inputs") or {}).items()
              if r in ("data", "source", "dpr_index")}
    return method, imeta["job"], imeta.get("dataset"), index_dir, inputs, model_dir, values


def load_retriever(model_dir: str | Path | None = None, index_dir: str | Path | None = None, *,
                   settings: Mapping[str, Any] | None = None) -> Retriever:
    """The trained method's :class:`Retriever` over an index, without a config.

    ``index_dir``: an index folder (``results/<profile>/indexes/<id>/<dataset>``); its model is the one
    its meta.json names (``inputs.model``) unless ``model_dir`` is given (e.g. DensePhrases'
    query-side fine-tuned model on the base phrase index). With ``model_dir`` alone, the one index of
    that results tree built from the model is used; with none or several, the error lists what to pass.
    ``settings`` overrides keys of the method's section (``device``, ``encode_batch_size``, BM25's
    ``k1``/``b``, ...). The system each method returns is in its Retriever's docstring and ``system``.
    """
    method, job, dataset, index_dir, inputs, model_dir, values = _open(model_dir, index_dir)
    mod = _module(method)
    cls = getattr(mod, "Retriever", None)
    if cls is None:
        raise ConfigError(f"method {method} has no Retriever (harness.methods.{method}.Retriever)")
    cfg = artifact_config(values, method, settings)
    return cls(cfg, index_dir, model_dir, method=method, job=job, dataset=dataset, inputs=inputs)


def load_encoder(model_dir: str | Path, *, settings: Mapping[str, Any] | None = None) -> Encoder:
    """The trained model's :class:`Encoder` (methods with one: dpr, bpr, svdr/vdr, qcr)."""
    meta = read_artifact(model_dir)
    mod = _module(meta["method"])
    cls = getattr(mod, "Encoder", None)
    if cls is None:
        raise ConfigError(f"method {meta['method']} has no Encoder of queries and documents apart",
                          fix="use load_retriever(model_dir, index_dir) to search with it")
    return cls.load(model_dir, cfg=artifact_config(_values(Path(model_dir), meta), meta["method"], settings))


# ---- topics and runs --------------------------------------------------------------------------


def read_topics(path: str | Path) -> dict[str, str]:
    """Topics as pyserini takes them, ``qid<TAB>text`` per line, or JSON lines ``{"id", "text"}`` (the
    harness's queries-<split>.jsonl; ``qid``/``query`` are read too)."""
    import json

    path = Path(path)
    if not path.is_file():
        raise DataError(f"topics file {path} does not exist")
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n\r")
            if not line.strip():
                continue
            if line.lstrip().startswith("{"):
                try:
                    rec = json.loads(line)
                    qid = rec.get("id", rec.get("qid", rec.get("_id")))
                    text = rec.get("text", rec.get("query"))
                except (json.JSONDecodeError, AttributeError):
                    raise DataError(f"{path}:{lineno}: not a JSON object") from None
                if qid is None or text is None:
                    raise DataError(f"{path}:{lineno}: a JSON topic needs \"id\" and \"text\"")
            else:
                qid, sep, text = line.partition("\t")
                if not sep:
                    raise DataError(f"{path}:{lineno}: expected 'qid<TAB>text' or a JSON object")
            out[str(qid)] = str(text)
    if not out:
        raise DataError(f"topics file {path} holds no topic")
    return out


def _numerics(values: Mapping[str, Any]) -> None:
    """The artifact's numeric code path (portable: the kernels its stage used) before numpy loads."""
    from harness import numerics

    mode = str(values.get("numerics") or "native").partition("/")[0]
    if mode in numerics.MODES and not any(m in sys.modules for m in ("numpy", "torch", "faiss")):
        numerics.apply(mode)


def _search_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m harness search",
        description="Search an index with a file of topics and write a TREC run, as pyserini's search "
                    "command does (the model is the one the index's meta.json names).",
        epilog="The stage form, a search job of the plan: python -m harness search --job ID --dataset KEY "
               "--out DIR [--config YAML ...] (`python -m harness plan` lists the jobs).")
    ap.add_argument("--index", type=Path, required=True, help="index folder (results/<profile>/indexes/<id>/<dataset>)")
    ap.add_argument("--topics", type=Path, required=True,
                    help="topics: 'qid<TAB>text' lines, or JSON lines with id and text")
    ap.add_argument("--output", type=Path, required=True, help="the TREC run to write")
    ap.add_argument("--k", "--hits", dest="k", type=int, default=1000, help="hits per query (default 1000)")
    ap.add_argument("--model", type=Path, help="model folder (default: the index's own, from its meta.json)")
    ap.add_argument("--tag", help="run tag (default: the system id, e.g. dpr, bpr.bflat)")
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the method's section, e.g. --set device=cuda --set k1=1.2 (repeatable)")
    return ap.parse_args(argv)


def _search(argv: list[str]) -> int:
    import time

    from harness.config import parse_overrides
    from harness.runs import write_run

    args = _search_args(argv)
    if args.k < 1:
        raise ConfigError(f"--k must be at least 1, got {args.k}")
    topics = read_topics(args.topics)
    _numerics(read_artifact(args.index).get("config_values") or {})
    t0 = time.perf_counter()
    retriever = load_retriever(args.model, args.index, settings=parse_overrides(args.settings))
    run = retriever.search(topics, args.k)
    write_run(args.output, run, tag=args.tag or retriever.system)
    print(f"{retriever.system}: {len(topics)} topics searched, {sum(map(len, run.values()))} hits -> {args.output} "
          f"({time.perf_counter() - t0:.1f}s)")
    return 0


def _stage_form(argv: list[str]) -> bool:
    return any(a == "--job" or a.startswith("--job=") for a in argv)


def search_main(argv: list[str]) -> int:
    """``python -m harness search``: ``--job`` runs a search job of the plan (harness.stages.search);
    ``--index`` searches an index with a topics file."""
    if _stage_form(argv):
        from harness import stages

        return stages.search(argv)
    return _search(argv)


def evaluate_main(argv: list[str]) -> int:
    """``python -m harness evaluate``: ``--job`` evaluates every run of a search job (harness.stages
    .evaluate); ``QRELS RUN MEASURE...`` prints ir_measures' values."""
    if _stage_form(argv):
        from harness import stages

        return stages.evaluate(argv)
    return _evaluate(argv)


def _measures(names: list[str]) -> list:
    """ir_measures' measures of the arguments (one or several per argument, space-separated), once each."""
    import ir_measures

    out = []
    for name in (m for arg in names for m in arg.split()):
        try:
            m = ir_measures.parse_measure(name)
        except Exception as exc:  # ir_measures raises NameError/ValueError/SyntaxError
            raise ConfigError(f"{name!r} is not an ir_measures measure ({exc})",
                              fix='write e.g. "nDCG@10" "RR@10" "R@100" "AP" "P@5"') from None
        if m not in out:
            out.append(m)
    if not out:
        raise ConfigError("no measure given", fix='name one, e.g. "nDCG@10"')
    return out


def _evaluate(argv: list[str]) -> int:
    """`python -m harness evaluate QRELS RUN MEASURE... [--per-query]`: as ``ir_measures qrels run
    measures`` (the same library, readers and output): ``measure<TAB>value`` per measure; with
    ``--per-query`` (``-q``) ``qid<TAB>measure<TAB>value`` per query, then the ``all`` lines."""
    import ir_measures

    ap = argparse.ArgumentParser(
        prog="python -m harness evaluate",
        description="Score a TREC run against TREC qrels with ir_measures, as `ir_measures QRELS RUN MEASURE...` "
                    "does: one 'measure<TAB>value' line per measure.",
        epilog="The stage form, every run of a search job of the plan (QA top-k accuracy, the profile's "
               "ir_measures): python -m harness evaluate --job ID --dataset KEY --out DIR [--config YAML ...].")
    ap.add_argument("qrels", type=Path, help="TREC qrels file: 'qid 0 docid relevance' lines")
    ap.add_argument("run", type=Path, help="TREC run file: 'qid Q0 docid rank score tag' lines")
    ap.add_argument("measures", nargs="+", help='ir_measures names, e.g. "nDCG@10" "RR@10" R@100')
    ap.add_argument("--per-query", "-q", "--by_query", dest="per_query", action="store_true",
                    help="one line per query and measure, then the aggregates (qid 'all')")
    ap.add_argument("--places", "-p", type=int, default=4, help="decimal places (default 4)")
    args = ap.parse_args(argv)
    for what, path in (("qrels", args.qrels), ("run", args.run)):
        if not path.is_file():
            raise DataError(f"{what} file {path} does not exist")
    measures = _measures(args.measures)
    qrels = list(ir_measures.read_trec_qrels(str(args.qrels)))
    run = list(ir_measures.read_trec_run(str(args.run)))
    fmt = f".{args.places}f" if args.places >= 0 else ""
    if args.per_query:
        aggs = {m: m.aggregator() for m in measures}
        for res in ir_measures.iter_calc(measures, qrels, run):
            print(f"{res.query_id}\t{res.measure}\t{res.value:{fmt}}")
            aggs[res.measure].add(res.value)
        for m in measures:
            print(f"all\t{m}\t{aggs[m].result():{fmt}}")
        return 0
    agg = ir_measures.calc_aggregate(measures, qrels, run)
    for m in measures:
        print(f"{m}\t{agg[m]:{fmt}}")
    return 0
