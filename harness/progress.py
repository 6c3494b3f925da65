"""Progress a person can follow in a rule's log: a tqdm bar over a long loop (encoding a corpus,
timing batches), on stderr, redrawn twice a second on a terminal and every 10 s in a log
file (so a log gets a line per 10 s, not per batch). The training loop (harness/train.py) has its own."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TypeVar

T = TypeVar("T")


def _bar(total: int, desc: str, unit: str, scale: bool) -> object:
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, mininterval=0.5 if tty else 10.0,
                dynamic_ncols=tty, unit_scale=scale)


def steps(items: Iterable[T], total: int, desc: str, unit: str = "step") -> Iterator[T]:
    """``items`` with a bar that advances after each one is done (timing loops: the bar is drawn
    between items, never inside a timed section)."""
    with _bar(total, desc, unit, False) as bar:
        for item in items:
            yield item
            bar.update(1)


def batches(n: int, batch_size: int, desc: str, unit: str = "item") -> Iterator[int]:
    """``range(0, n, batch_size)`` with a bar counting items (not batches) done of ``n``."""
    with _bar(n, desc, unit, True) as bar:
        for i in range(0, n, batch_size):
            yield i
            bar.update(min(batch_size, n - i))


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last shorter), read a list at a time (itertools.batched from
    Python 3.12)."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def counted_batches(items: Iterable[T], n: int, batch_size: int, what: str, unit: str = "item",
                    bar: bool = True) -> Iterator[list[T]]:
    """``items``, an iterable of ``n`` (a corpus streamed from its file into a preallocated array), in
    lists of ``batch_size``, with :func:`batches`' bar (``bar``); fewer or more than ``n`` fails,
    naming ``what`` and the count."""
    from harness.errors import DataError

    it = iter(items)
    for i in (batches(n, batch_size, what, unit) if bar else range(0, n, batch_size)):
        batch = list(islice(it, min(batch_size, n - i)))
        if len(batch) != min(batch_size, n - i):
            raise DataError(f"{what}: {i + len(batch)} {unit}s where {n} were announced")
        yield batch
    if next(it, None) is not None:
        raise DataError(f"{what}: more than the {n} {unit}s announced")


# ----------------------------------------------------------------------------- the console
# Under ``python -m harness --log FILE`` (harness.cli) fds 1 and 2 go to the log; the original
# stderr is kept here, so that what a job is for, and why it failed, still reach Snakemake's output.
_CONSOLE: int | None = None
_echoed = 0  # error lines written to _CONSOLE


def set_console(fd: int | None) -> None:
    """The file descriptor of the console while output goes to a log (None: no log)."""
    global _CONSOLE
    _CONSOLE = fd


def echoed() -> int:
    """How many error lines reached the console so far."""
    return _echoed


def console(line: str) -> None:
    """Print a line on stdout and, under --log, on the console too (Snakemake's output): what a job
    is for, as it starts."""
    print(line, flush=True)
    if _CONSOLE is not None:
        os.write(_CONSOLE, (line.rstrip("\n") + "\n").encode("utf-8", errors="replace"))


def error_line(line: str) -> None:
    """Print a one-line error on stderr and, under --log, on the console too."""
    global _echoed
    print(line, file=sys.stderr)
    if _CONSOLE is not None:
        sys.stderr.flush()
        os.write(_CONSOLE, (line.rstrip("\n") + "\n").encode("utf-8", errors="replace"))
        _echoed += 1
