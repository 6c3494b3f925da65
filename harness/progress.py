"""Progress a person can follow in a rule's log: a tqdm bar over the batches of a long loop (encoding
a corpus, dumping vectors), on stderr, redrawn twice a second on a terminal and every 10 s in a log
file (so a log gets a line per 10 s, not per batch). The training loop (harness/train.py) has its own."""
from __future__ import annotations

import sys
from collections.abc import Iterator


def batches(n: int, batch_size: int, desc: str, unit: str = "item") -> Iterator[int]:
    """``range(0, n, batch_size)`` with a bar counting items (not batches) done of ``n``."""
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    with tqdm(total=n, desc=desc, unit=unit, file=sys.stderr, mininterval=0.5 if tty else 10.0,
              dynamic_ncols=tty, unit_scale=True) as bar:
        for i in range(0, n, batch_size):
            yield i
            bar.update(min(batch_size, n - i))
