from __future__ import annotations

import contextlib
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


@pytest.fixture(scope="session")
def smoke_context():
    """``smoke_context(root, method, settings, overrides=None) -> ctx``: ``method``'s context on the
    smoke fixture, with its results under ``root``, ``settings`` over its config section (and
    ``overrides`` over the rest of the config), the smoke data prepared (BPR: its variant context)."""
    def make(root: Path, method: str, settings: dict, overrides: dict | None = None):
        from harness.config import load_config
        from harness.datasets import prepare
        from harness.methods import bpr
        from harness.methods.base import Context

        cfg = load_config([], overrides={**(overrides or {}), "results_dir": str(root / "results"),
                                         "methods": {method: dict(settings)}})
        ctx = bpr.variant_context(cfg, None, "smoke") if method == "bpr" else Context(cfg, method, "smoke")
        ctx.data_dir().mkdir(parents=True)
        prepare("smoke", cfg["datasets"]["smoke"], cfg, ctx.data_dir())
        return ctx

    return make


@pytest.fixture(scope="session")
def train_on_smoke():
    """``train_on_smoke(ctx, root) -> (model folder, trainer info)``: DPR's, BPR's or VDR/SVDR's trainer
    (``ctx.method``'s) run into ``root/model`` with an empty negatives file (random passages stand in for
    BM25's)."""
    def train(ctx, root: Path):
        from harness.io import write_jsonl
        from harness.methods import bpr, dpr, vdr

        negs = root / "negs.jsonl"
        write_jsonl(negs, [])
        model = root / "model"
        model.mkdir()
        return model, {"dpr": dpr.train, "bpr": bpr.train}.get(ctx.method, vdr.train)(ctx, model, negs)

    return train


def pytest_sessionstart(session):
    """The package's bytecode for the suite's many ``python -m harness`` and Snakemake processes
    (where PYTHONDONTWRITEBYTECODE is set each would compile every module it imports again)."""
    from harness import warm

    warm.precompile()


@pytest.hookimpl(tryfirst=True)  # before pytest's -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    """Every test that reads the smoke DAG (through ``smoke_run``, directly or by a fixture) gets the
    marker ``smoke_dag``: ``-m "not smoke_dag"`` runs the rest of the suite without running the DAG;
    and ``slow`` (the DAG takes minutes): ``-m "not slow"`` never starts it."""
    for item in items:
        if "smoke_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.smoke_dag)
            item.add_marker(pytest.mark.slow)


class _DagLast:
    @pytest.hookimpl(trylast=True)  # after the -m selection and pytest's own fixture ordering
    def pytest_collection_modifyitems(self, items):
        _reorder(items)


def pytest_configure(config):
    config.pluginmanager.register(_DagLast(), "harness-smoke-dag-last")


def _reorder(items):
    """Modules with no test that reads the smoke DAG first, then the others, each module's tests
    together and in their order (module fixtures are set up once): the DAG, started in the
    background as collection ends (:func:`pytest_collection_finish`), runs beside the first group."""
    def module(item) -> str:
        return item.nodeid.split("::")[0]

    dag_modules = {module(item) for item in items if item.get_closest_marker("smoke_dag")}
    items[:] = sorted(items, key=lambda item: module(item) in dag_modules)


class _SmokeDag:
    """The whole DAG on the smoke profile (``snakemake reproduce_all``) into a temporary results
    folder, run once per session in the background: started when collection ends if a selected test
    reads it, waited for by :func:`smoke_run`, stopped if the session ends first."""

    def __init__(self) -> None:
        self.proc = None
        self.out: Path | None = None
        self.started = 0.0

    def start(self, tmp_factory) -> None:
        import subprocess
        import sys
        import time

        self.out = tmp_factory.mktemp("smoke-run")
        logs = self.out.parent / f"{self.out.name}-snakemake"
        logs.mkdir()
        self.logs = (open(logs / "stdout", "w+"), open(logs / "stderr", "w+"))  # noqa: SIM115 (closed in result)
        self.proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--nolock", "--cores", "2", "reproduce_all",
                                      "--config", f"results_dir={self.out}"], cwd=REPO, stdout=self.logs[0],
                                     stderr=self.logs[1], text=True, start_new_session=True)
        self.started = time.monotonic()

    def result(self):
        import subprocess
        import time

        try:
            self.proc.wait(timeout=max(1.0, 2400 - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.stop()
        texts = []
        for f in self.logs:
            f.seek(0)
            texts.append(f.read())
            f.close()
        return self.out, subprocess.CompletedProcess(self.proc.args, self.proc.returncode, *texts)

    def stop(self) -> None:
        import signal

        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except Exception:  # noqa: BLE001 (it must not outlive the session)
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


_DAG = _SmokeDag()


def pytest_collection_finish(session):
    if session.config.option.collectonly or not any(i.get_closest_marker("smoke_dag") for i in session.items):
        return
    _DAG.start(session.config._tmp_path_factory)


def pytest_sessionfinish(session):
    _DAG.stop()


@pytest.fixture(scope="session")
def smoke_run():
    """The whole DAG on the smoke profile, once per session, into a temporary results folder:
    (results folder, the finished snakemake process). Tests that use it carry the marker smoke_dag."""
    if _DAG.proc is None:
        pytest.fail("the smoke DAG was not started as collection ended (tests/conftest.py pytest_collection_finish)")
    return _DAG.result()


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
