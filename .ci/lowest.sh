#!/usr/bin/env bash
# Prove the declared lower bounds: install fairsched with the lowest version of each
# direct dependency its pyproject.toml allows (uv's lowest-direct resolution; uv comes
# from PyPI through pip) into a fresh .venv-lowest, print what was installed, and run
# the given test paths on it (default: the unit and database tiers).
#   bash .ci/lowest.sh                      # tests/unit tests/db
#   bash .ci/lowest.sh tests/db/test_cli.py  # any pytest paths or options
# The test server is $FAIRSCHED_TEST_DATABASE_URL when set, else the embedded one.
set -euo pipefail

cd "$(dirname "$0")/.."
# --clear: packages left by an earlier run must not stand in for the lowest ones.
python3 -m venv --clear .venv-lowest
.venv-lowest/bin/pip install --quiet --upgrade pip uv
.venv-lowest/bin/uv pip install --quiet --python .venv-lowest/bin/python \
    --resolution lowest-direct -e '.[binary,test]'

echo "lowest direct versions installed:"
.venv-lowest/bin/pip list 2>/dev/null | grep -iE '^(psycopg|psycopg[-_]binary|psycopg[-_]pool|pydantic|pydantic[-_]settings|typer|click|rich|prometheus[-_]client|embedded[-_]postgres|pytest|pytest[-_]timeout|pytest[-_]xdist|hypothesis|ruff|mypy|pyyaml|opentelemetry[-_]api|opentelemetry[-_]sdk|greenlet|pytest[-_]asyncio|fastapi|starlette|httpx|django|sqlalchemy|psycopg2[-_]binary|cronsim|jinja2|uvicorn|playwright) '

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
