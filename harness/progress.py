"""Progress a person can follow in a rule's log: a tqdm bar over a long loop (encoding a corpus,
timing batches), on stderr, redrawn twice a second on a terminal and every 10 s in a log
file (so a log gets a line per 10 s, not per batch). The training loop (harness/train.py) has its own."""
from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
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
