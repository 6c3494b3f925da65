"""The marker ``smoke_dag`` that tests/conftest.py sets on every test that uses the smoke DAG
(``smoke_run``, directly or through a fixture), so that ``-m "not smoke_dag"`` runs the rest of the
suite without running the DAG."""
from __future__ import annotations

import subprocess
import sys


def test_every_user_of_the_smoke_dag_carries_the_marker(repo):
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "smoke_dag", "-p",
                        "no:cacheprovider", "tests/"], cwd=repo, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    dag = {line for line in r.stdout.splitlines() if "::" in line}
    assert "tests/test_workflow.py::test_full_smoke_run" in dag
    # a test reaches the DAG through a module fixture too (test_api's models read it)
    assert any(t.startswith("tests/test_api.py::") for t in dag)
    assert not any(t.startswith("tests/test_suite_split.py::") for t in dag)
