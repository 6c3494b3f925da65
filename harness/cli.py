"""`python -m harness <command> ...`: the one entry point every Snakemake rule calls.

Each command lives in its own module and is imported only when used, so that
`python -m harness --help` stays fast (pyserini and torch are slow to import).

Global option ``--log FILE`` (before the command): the process's stdout and stderr (file
descriptors 1 and 2, so that child processes such as the JVM write there too) go to FILE,
overwritten per run, while the one line that says why a command failed also reaches the console.
Snakemake rules run ``python -m harness --log {log} <command> ...``, so a failed rule's error is
seen without opening its log.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

from harness import progress
from harness.errors import HarnessError

# command -> (module, one-line help). Each module defines `main(argv: list[str]) -> int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "config": ("harness.config", "validate and print the resolved configuration"),
    "data": ("harness.stages:data", "prepare a dataset (download/verify/convert) into the results tree"),
    "negatives": ("harness.stages:negatives", "mine BM25 hard negatives for a training dataset"),
    "plan": ("harness.stages:plan_main", "list every job (train, index, search, measure) of the config"),
    "train": ("harness.stages:train", "run a train job of the plan (a model)"),
    "index": ("harness.stages:index", "run an index job of the plan (an index of one dataset)"),
    "search": ("harness.api:search_main", "search an index with a topics file (--index), or run a search job of "
                                           "the plan (--job)"),
    "measure": ("harness.stages:measure", "run a measure job of the plan (efficiency figures)"),
    "evaluate": ("harness.api:evaluate_main", "ir_measures of a run (QRELS RUN MEASURE...), or every run of a "
                                               "search job (--job)"),
    "table": ("harness.tables.render", "render one paper table (measured beside published)"),
    "report": ("harness.report.site", "build the static site of every table, figure and claim (--open: print its path)"),
    "published": ("harness.published", "print the published numbers of a paper"),
    "regress": ("harness.regress", "compare measured values with configs/expected/<profile>.yaml"),
    "claims": ("harness.claims", "evaluate configs/claims.yaml on measured values"),
    "results": ("harness.results", "export every rendered table cell (or --claims) as csv, parquet or md (harness.results)"),
    "learning": ("harness.learning", "the learning check of every trained model (loss fell; beats its initial checkpoint)"),
    "decontam": ("harness.stages:decontam", "remove test-set near-duplicates from training queries"),
    "decontam-report": ("harness.stages:decontam_report", "render LightRetriever Tables 6/7 for this profile's decontamination"),
    "datasets": ("harness.datasets.catalog", "the dataset registry: --cards (docs/datasets.md), --list, --check"),
    "bench": ("harness.bench", "run a benchmark and print its figures"),
    "estimate": ("harness.estimate", "project a profile's cost (GPU-hours, wall, memory) from the rehearsal's measured jobs"),
    "mteb": ("harness.interop", "evaluate a trained retriever with MTEB's retrieval evaluator on a dataset folder"),
}


def _usage() -> str:
    lines = ["usage: python -m harness [--log FILE] <command> [options]", "",
             "  --log FILE      stdout and stderr go to FILE (overwritten); why a command failed also goes",
             "                  to the console", "", "commands:"]
    lines += [f"  {name:<15} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


@contextlib.contextmanager
def _redirect_to(log: Path) -> Iterator[None]:
    """For the block, send fds 1 and 2 to ``log`` (overwritten) and keep the original fd 2 as the console (harness.progress.console)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    saved = (os.dup(1), os.dup(2))
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    line_buffered = getattr(sys.stdout, "line_buffering", None)
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(line_buffering=True)  # keeps stdout and stderr lines in order in the log
    progress.set_console(saved[1])
    try:
        yield
    finally:
        progress.set_console(None)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(ValueError, OSError):
                stream.flush()
        with contextlib.suppress(AttributeError, ValueError, TypeError):
            sys.stdout.reconfigure(line_buffering=line_buffered)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _last_line(path: Path) -> str:
    """The last non-blank line of a log file."""
    with contextlib.suppress(OSError):
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return ""


def _run_logged(log: Path, argv: list[str]) -> int:
    """`main(argv)` with its output in ``log``; why it failed also goes to the original stderr:
    a HarnessError's `error:` line, else the last line of the traceback or of the log, and "see FILE"."""
    with _redirect_to(log):
        name = argv[0] if argv else ""
        if name and name not in COMMANDS and name not in {"-h", "--help"}:
            progress.error_line(f"error: unknown command {name!r}; commands: {', '.join(COMMANDS)}")
            return 2
        echoed = progress.echoed()
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse prints its usage error to stderr (the log) and exits 2
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        except Exception:  # noqa: BLE001 (any crash: its traceback to the log, its last line to the console)
            traceback.print_exc()
            last = traceback.format_exc().strip().splitlines()[-1]
            progress.error_line(f"error: python -m harness {name} failed: {last} (see {log})")
            return 1
        if rc and progress.echoed() == echoed:  # failed without a HarnessError (breaches, a usage error): its last line
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            progress.error_line(f"error: python -m harness {name} exited with status {rc}: {_last_line(log)} (see {log})")
        return rc


def split_log(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the ``--log FILE`` / ``--log=FILE`` that leads ``argv``, or None; the rest): FILE is "" when missing."""
    if argv and argv[0] == "--log":
        return (argv[1] if len(argv) > 1 else ""), argv[2:]
    if argv and argv[0].startswith("--log="):
        return argv[0].partition("=")[2], argv[1:]
    return None, list(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    log, rest = split_log(argv)
    if log is not None:
        if not log or log.startswith("-"):
            print("error: --log needs a file name: python -m harness --log FILE <command> ...", file=sys.stderr)
            return 2
        return _run_logged(Path(log), rest)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n{_usage()}", file=sys.stderr)
        return 2
    try:
        if name == "bench":
            from harness.bench import BENCHMARKS, run

            if not rest or rest[0] in {"-h", "--help"}:
                print("usage: python -m harness bench <name> [options]\nbenchmarks: " + ", ".join(BENCHMARKS))
                return 0
            return run(rest[0], rest[1:])
        target, _, fn = COMMANDS[name][0].partition(":")
        module = importlib.import_module(target)
        return int(getattr(module, fn or "main")(rest) or 0)
    except HarnessError as exc:
        progress.error_line(f"error: {exc}")
        return 2
