#!/usr/bin/env bash
# The README's test command: set up a virtualenv, install the package with its test extras, run the gates and the tests.
#
#   bash scripts/test.sh                    # ruff, mypy --strict, import-linter, pytest (slow tests excluded)
#   bash scripts/test.sh -m slow            # extra arguments go to pytest
#   VENV=/path/to/venv bash scripts/test.sh # reuse another virtualenv
#
# Every gate runs even when an earlier one fails, so one run shows every problem; the exit code is 1 if any
# gate failed. pytest collecting no test at all (its exit code 5) counts as a failure, never as a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
# ruff does not follow vgpu_scheduler/'s two links (docs/layout.md): the folders they point at are named here
LINT_PATHS=(vgpu_scheduler shared services tests benchmarks scripts)
started=$(date +%s)

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "error: $VENV needs Python >= 3.11 (has $("$VENV/bin/python" -V 2>&1)); set PYTHON=python3.11 and remove $VENV" >&2
    exit 1
fi
"$VENV/bin/python" -m pip install -qq --disable-pip-version-check -e '.[test,plot]'

failed=()
gate() {
    local name=$1
    shift
    echo "== $name"
    if "$@"; then
        return 0
    fi
    failed+=("$name")
}

gate ruff "$VENV/bin/ruff" check "${LINT_PATHS[@]}"
# Formatting is advisory: it lists files `ruff format` would change without failing the run.
echo "== ruff format (advisory)"
"$VENV/bin/ruff" format --check "${LINT_PATHS[@]}" || echo "(advisory) run: ruff format ${LINT_PATHS[*]}"
gate mypy "$VENV/bin/mypy"
gate import-linter "$VENV/bin/lint-imports"

echo "== pytest"
set +e
"$VENV/bin/pytest" -q --durations=10 "$@"
rc=$?
set -e
case $rc in
    0) ;;
    5)
        echo "error: pytest collected no tests (exit code 5): a run that tests nothing is a failure" >&2
        failed+=("pytest (no tests collected)")
        ;;
    *) failed+=("pytest (exit code $rc)") ;;
esac

elapsed=$(($(date +%s) - started))
if [ ${#failed[@]} -gt 0 ]; then
    echo "== FAILED gates: ${failed[*]} (${elapsed}s)" >&2
    exit 1
fi
echo "== all gates passed (${elapsed}s)"
