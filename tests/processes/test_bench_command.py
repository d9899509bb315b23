"""``fairsched bench``: the product's own end-to-end figure, on scratch databases of the
configured server that are gone afterwards, with real worker processes and no lab around."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from cli_support import cli, one_error_line


def scratch_databases(server_dsn: str, names: list[str]) -> list[str]:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)).fetchall()
    return [name for (name,) in rows]


def test_bench_reports_positive_rates_for_fifo_and_the_composed_stack_and_drops_its_databases(
    server_dsn: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    env["FAIRSCHED_DATABASE_URL"] = server_dsn
    done = subprocess.run(
        [sys.executable, "-m", "fairsched", "bench", "--jobs", "400", "--slots", "8", "--json"],
        env=env,
        cwd=tmp_path,  # no source tree around: the workers run the installed fairsched.bench:app
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["config"] == {"jobs": 400, "workers": 2, "slots": 8}
    stacks = result["stacks"]
    assert [s["policies"] for s in stacks] == [["fifo"], ["weighted", "aging", "serial"]]
    for stack in stacks:
        assert stack["jobs"] == 400
        assert stack["jobs_per_second"] > 0 and stack["seconds"] > 0, stack
        assert stack["jobs_per_second"] == pytest.approx(400 / stack["seconds"])
        assert stack["claims"] == 400 and stack["claims_per_second"] > 0, stack
    fifo, composed = stacks
    ratio = result["ratio"]
    assert ratio["stacks"] == ["weighted+aging+serial", "fifo"]
    assert ratio["jobs_per_second"] == pytest.approx(composed["jobs_per_second"] / fifo["jobs_per_second"])
    names = [s["database"] for s in stacks]
    assert len(set(names)) == 2 and all(name.startswith("fairsched_bench_") for name in names)
    assert scratch_databases(server_dsn, names) == [], "the scratch databases were dropped"
    assert "postgresql://" not in done.stdout


def test_bench_refuses_an_unknown_policy_before_making_a_database(server_dsn: str) -> None:
    result = cli(server_dsn, "bench", "--policies", "weighted,nope")
    assert result.exit_code == 1
    assert one_error_line(result).startswith("error: unknown policy 'nope'")
