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


@pytest.fixture(scope="session")
def apt_install():
    """``install(packages, purpose)``: Debian packages with apt-get (as root), for a test whose tool
    the machine lacks; skips saying why (``purpose``) where it cannot install them."""
    import shutil
    import subprocess

    def install(packages: list[str], purpose: str) -> None:
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            pytest.skip(f"{purpose}: apt-get cannot install {' '.join(packages)} here (needs root and Debian's "
                        f"apt): apt-get install {' '.join(packages)}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends",
                                                   *packages]):
            try:
                r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900, env=env)
            except subprocess.TimeoutExpired:
                pytest.skip(f"{' '.join(cmd)} timed out: {purpose}")
            if r.returncode != 0:
                pytest.skip(f"{' '.join(cmd)} failed ({r.stderr.strip()[-300:]}): {purpose}")

    return install


def pytest_sessionstart(session):
    """The package's bytecode for the suite's many ``python -m harness`` and Snakemake processes
    (where PYTHONDONTWRITEBYTECODE is set each would compile every module it imports again)."""
    from harness import warm

    warm.precompile()


@pytest.hookimpl(tryfirst=True)  # before pytest's -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    """Every test that reads the smoke DAG (through ``smoke_run``, directly or by a fixture) gets the
    marker ``smoke_dag``: ``-m "not smoke_dag"`` runs the rest of the suite without running the DAG."""
    for item in items:
        if "smoke_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.smoke_dag)


@pytest.fixture(scope="session")
def smoke_run(repo, tmp_path_factory):
    """The whole DAG on the smoke profile, once per session, into a temporary results folder:
    (results folder, the finished snakemake process). Tests that use it are marked slow."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("smoke-run")
    r = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "--cores", "2", "reproduce_all",
                        "--config", f"results_dir={out}"], check=False, cwd=repo, capture_output=True, text=True, timeout=2400)
    return out, r


@pytest.fixture(autouse=True)
def _no_network_downloads(monkeypatch):
    # Tests never reach the internet: any download that is not served from a mirror fails fast.
    monkeypatch.setenv("HARNESS_OFFLINE", os.environ.get("HARNESS_OFFLINE", "1"))


@pytest.fixture
def one_torch_thread():
    """torch on one intra-op thread for the test (tiny matmuls: with 2 threads on a 2-core box, any
    other busy process makes every op wait for a time slice). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
