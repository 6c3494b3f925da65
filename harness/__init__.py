"""Reference harness for reproducing neural-retrieval papers (see README.md)."""
from __future__ import annotations

import os
from pathlib import Path

__version__ = "0.1.0"

#: the checkout this package runs from (configs/, workflow/ and results/ are found from it)
REPO = Path(__file__).resolve().parent.parent

# OpenMP threads (faiss, torch) spin while they wait by default; on a shared or oversubscribed
# machine that makes everything several times slower. Passive waiting unless the user says
# otherwise; it must be set before faiss/torch load, which the harness imports lazily.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
