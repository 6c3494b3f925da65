"""`python -m harness ...`. A stage job of a Snakemake run is handed to a warm server first
(:mod:`harness.warm`: numpy, torch and transformers already imported), else it runs here. Every
output is written atomically and closed before ``main`` returns, so the process ends with
``os._exit`` after flushing: tearing down torch, transformers, faiss and the JVM at interpreter
exit costs 0.5-0.9 s a job on these machines and does nothing for us."""
from __future__ import annotations

import logging
import os
import sys

from harness import warm

if __name__ == "__main__":
    rc = warm.run(sys.argv[1:])
    if rc is None:
        from harness.cli import main

        rc = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(rc or 0))
