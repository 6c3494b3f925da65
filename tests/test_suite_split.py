"""The marker ``smoke_dag`` that tests/conftest.py sets on every test that uses the smoke DAG
(``smoke_run``) splits the suite in two: ``-m "not smoke_dag"`` must not run the DAG, and no test may
fall out of both halves."""
from __future__ import annotations

import subprocess
import sys


def _collected(repo, marker: str | None) -> set[str]:
    select = ["-m", marker] if marker else []
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *select, "-p", "no:cacheprovider",
                        "tests/"], cwd=repo, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    return {line for line in r.stdout.splitlines() if "::" in line}


def test_the_two_halves_split_the_suite_at_the_smoke_dag(repo):
    dag, rest = _collected(repo, "smoke_dag"), _collected(repo, "not smoke_dag")
    everything = _collected(repo, None)
    assert dag and rest and not dag & rest and dag | rest == everything
    assert "tests/test_workflow.py::test_full_smoke_run" in dag
    # a test reaches the DAG through a module fixture too (test_api's models read it)
    assert any(t.startswith("tests/test_api.py::") for t in dag)
    assert not any("smoke_run" in t for t in rest)
    assert "tests/test_suite_split.py::test_the_two_halves_split_the_suite_at_the_smoke_dag" in rest
