#!/usr/bin/env bash
# The README's test command: set up a virtualenv, install the package with its test extras, run the gates and the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check -e '.[test]'
echo "== ruff"; "$VENV/bin/ruff" check shared services tests benchmarks
echo "== mypy"; "$VENV/bin/mypy"
echo "== import-linter"; "$VENV/bin/lint-imports"
echo "== pytest"; "$VENV/bin/pytest" -q "$@"
