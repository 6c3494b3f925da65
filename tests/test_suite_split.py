"""The marker ``smoke_dag`` that tests/conftest.py sets on every test that uses the smoke DAG
(``smoke_run``, directly or through a fixture), so that ``-m "not smoke_dag"`` runs the rest of the
suite without running the DAG."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def test_every_user_of_the_smoke_dag_carries_the_marker(repo, request):
    opt, cfg = request.config.option, request.config
    whole = (not opt.keyword and not opt.markexpr and not opt.deselect and not opt.ignore
             and {(Path(cfg.invocation_params.dir) / a).resolve() for a in cfg.args} == {Path(repo, "tests").resolve()})
    if whole:                                 # this session collected the whole suite (make test): its markers
        dag = {i.nodeid for i in request.session.items if i.get_closest_marker("smoke_dag")}
    else:                                     # collect the suite as -m smoke_dag selects it
        r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "smoke_dag", "-p",
                            "no:cacheprovider", "tests/"], cwd=repo, capture_output=True, text=True, timeout=600,
                           check=False)
        assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
        dag = {line for line in r.stdout.splitlines() if "::" in line}
    assert "tests/test_workflow.py::test_full_smoke_run" in dag
    # a test reaches the DAG through a module fixture too (test_api's models read it)
    assert any(t.startswith("tests/test_api.py::") for t in dag)
    assert not any(t.startswith("tests/test_suite_split.py::") for t in dag)


def test_a_reader_of_the_dag_is_slow_too():
    """``-m "not slow"`` (the quick loop) never starts the DAG: its readers are marked slow as well."""
    conftest = sys.modules["conftest"]   # pytest imports tests/conftest.py under this name (rootdir-relative)

    item = type("Item", (), {})()
    item.fixturenames, item.markers = ("tree", "smoke_run"), []
    item.add_marker = item.markers.append
    other = type("Item", (), {"fixturenames": ("tmp_path",), "add_marker": lambda self, m: pytest.fail(m)})()
    conftest.pytest_collection_modifyitems(None, [item, other])
    assert {m.name for m in item.markers} == {"smoke_dag", "slow"}
