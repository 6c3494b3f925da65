"""Reference harness for reproducing neural-retrieval papers (see README.md)."""
from __future__ import annotations

__version__ = "0.1.0"
