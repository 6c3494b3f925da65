#!/usr/bin/env bash
# The test suite as two pytest processes side by side (`make test`): the tests that read the smoke DAG
# (marker smoke_dag, set in tests/conftest.py; the first of them runs the DAG once, on 2 cores) and the
# rest of the suite, mostly single-threaded, on the time the DAG leaves free. Arguments go to both.
# Not pytest-xdist's --dist loadgroup: xdist 3.8.0 names a test's group by rewriting item._nodeid, which
# pytest 9 no longer reads (item._id), so the group is silently ignored and every worker runs the DAG.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
log=$(mktemp)
dag=
trap '[ -n "$dag" ] && kill "$dag" 2>/dev/null; rm -f "$log"' EXIT
"$PY" -m pytest -q -m smoke_dag --durations=8 "$@" >"$log" 2>&1 &
dag=$!
t0=$(date +%s)
"$PY" -m pytest -q -m "not smoke_dag" --durations=8 "$@"
rest=$?
t1=$(date +%s)
wait "$dag"
rc=$?
echo "--- the tests that read the smoke DAG (pytest -m smoke_dag; the rest finished after $((t1 - t0)) s)"
cat "$log"
echo "test: the rest of the suite exit $rest, the smoke-DAG tests exit $rc, $(( $(date +%s) - t0 )) s in all"
# 5: pytest selected no test in that half (arguments that name only the other half's tests)
{ [ "$rest" -eq 0 ] || [ "$rest" -eq 5 ]; } && { [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ]; }
