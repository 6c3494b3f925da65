from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data mirror {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _no_network_downloads(monkeypatch):
    # Tests never reach the internet: any download that is not served from a mirror fails fast.
    monkeypatch.setenv("HARNESS_OFFLINE", os.environ.get("HARNESS_OFFLINE", "1"))
