"""``fairsched bench`` runs its scenarios end to end on real workers and reports figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def run_bench(server_dsn: str, *args: str) -> dict[str, object]:
    env = {**os.environ, "FAIRSCHED_DATABASE_URL": server_dsn}
    env.pop("FAIRSCHED_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "fairsched", "bench", "--repeats", "1", "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def figures_by_name(result: dict[str, object]) -> dict[str, dict[str, float]]:
    figures = result["figures"]
    assert isinstance(figures, list)
    return {f["name"]: f for f in figures}


def test_bench_e2e_and_memory_report_measured_ratios(server_dsn: str) -> None:
    result = run_bench(
        server_dsn,
        *("--scenario", "e2e", "--scenario", "memory", "--jobs", "2000", "--slots", "16"),
        *("--large-backlog", "5000"),
    )
    figures = figures_by_name(result)
    ours = figures["fairsched jobs/s (weighted+aging+serial)"]
    plain = figures["plain SKIP LOCKED loop, 50/txn, jobs/s"]
    ratio = figures["fairsched / plain loop"]
    assert ours["median"] > 0 and plain["median"] > 0
    assert ratio["median"] == pytest.approx(ours["median"] / plain["median"], rel=1e-6)
    alone = figures["fairsched statements alone, 50/txn, no worker, jobs/s"]
    alone_ratio = figures["fairsched statements alone / plain loop"]
    assert alone["median"] > 0
    assert alone_ratio["median"] == pytest.approx(alone["median"] / plain["median"], rel=1e-6)
    # The same workers timed over their first seconds on a larger backlog, against the drain.
    large = figures["fairsched jobs/s, first 5 s on a 5,000 backlog"]
    large_ratio = figures["fairsched jobs/s, 5,000 backlog / 2,000"]
    assert large["median"] > 0
    assert large_ratio["median"] == pytest.approx(large["median"] / ours["median"], rel=1e-6)
    # The server is on this machine: the CPU per job of both runners' clients and backends.
    cpu = {
        (runner, side): figures[f"{runner} {side}, CPU ms per 1k jobs"]["median"]
        for runner, sides in (("fairsched", ("workers", "backends")), ("plain loop", ("client", "backends")))
        for side in sides
    }
    assert all(value > 0 for value in cpu.values()), cpu
    cpu_ratio = figures["fairsched / plain loop, CPU per job (clients + backends)"]["median"]
    ours_cpu = cpu["fairsched", "workers"] + cpu["fairsched", "backends"]
    plain_cpu = cpu["plain loop", "client"] + cpu["plain loop", "backends"]
    assert cpu_ratio == pytest.approx(ours_cpu / plain_cpu, rel=1e-6)
    rss = figures["worker RSS at 64 slots"]["median"]
    assert 10 < rss < 1000
    assert "admin_dsn" not in json.dumps(result["config"])


def test_bench_churn_reports_fresh_and_churned_claim_cost(server_dsn: str) -> None:
    result = run_bench(server_dsn, "--scenario", "churn", "--churn-backlog", "2000", "--policies", "weighted")
    figures = figures_by_name(result)
    for stack in ("fifo", "weighted"):
        fresh = figures[f"{stack} buffers/claim, fresh 2,000 backlog"]["median"]
        churned = figures[f"{stack} buffers/claim after 2,000 claims+completions"]["median"]
        ratio = figures[f"{stack} buffers/claim after churn / fresh"]
        assert fresh > 0 and churned > 0
        assert ratio["median"] == pytest.approx(churned / fresh, rel=1e-6)
        assert ratio["bar"] == "<= 1.5"
        assert figures[f"{stack} claims+completions/s while churning"]["median"] > 0


def test_bench_refuses_an_unknown_scenario(server_dsn: str) -> None:
    env = {**os.environ, "FAIRSCHED_DATABASE_URL": server_dsn}
    done = subprocess.run(
        [sys.executable, "-m", "fairsched", "bench", "--scenario", "nope"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: unknown scenario nope; known: claims, backlog, churn, e2e, noisy, shares, memory"
    ]
