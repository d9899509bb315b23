"""``fairsched simulate``: the prediction of a weight change against a real run of the same
workload (real worker process, sleeping handlers, real clock), plus the command's inputs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_support import cli, one_error_line
from worker_support import running_workers, wait_listening

from fairsched import Client, QueueSettings
from fairsched.engine.enqueue import JobSpec
from fairsched.simplan import Scenario, arrivals, peak_concurrency
from fairsched.simulate import percentile, union_length

SHARE_TOLERANCE = 0.05
"""Predicted and real shares of claims agree within 5 points."""

SCENARIO = {
    "slots": 8,
    "duration_seconds": 3.0,
    "starving_after_seconds": 1.0,
    "queue": {"policies": ["weighted"]},
    "tenants": {
        "a": {"weight": 1, "backlog": 1000, "job_ms": 40},
        "b": {"weight": 3, "backlog": 1000, "job_ms": 40},
        "c": {"weight": 1, "rate": 5, "job_ms": 40},
    },
}
PROPOSED_WEIGHTS = {"a": 3.0, "b": 3.0, "c": 1.0}


def real_run(
    client: Client, db: psycopg.Connection, tmp_path: Path, weights: Mapping[str, float]
) -> dict[str, dict[str, float]]:
    """Play the scenario in real time on queue ``ops`` with one worker of 8 slots; per tenant
    the share of jobs started in the window and the median wait (censored at the window's end)."""
    scenario = Scenario.model_validate(SCENARIO)
    db.execute("DELETE FROM fairsched.jobs")
    db.execute("DELETE FROM fairsched.tenant_shares")
    tenants = {name: {"weight": w} for name, w in weights.items()}
    client.declare_queue("ops", QueueSettings(policies=["weighted"], tenants=tenants))  # type: ignore[arg-type]
    jobs = arrivals(scenario)
    backlog = [j for j in jobs if j.at == 0]
    later = [j for j in jobs if j.at > 0]
    with running_workers(client.dsn, tmp_path, app="apps.ops:app") as workers:
        workers.start({"ops": scenario.slots})
        wait_listening(db, 1)
        client.enqueue_many("ops", [JobSpec({"ms": j.seconds * 1000}, j.tenant) for j in backlog])
        start = time.monotonic()

        def produce() -> None:
            for job in later:
                time.sleep(max(0.0, start + job.at - time.monotonic()))
                client.enqueue("ops", {"ms": job.seconds * 1000}, tenant=job.tenant)

        producer = threading.Thread(target=produce)
        producer.start()
        producer.join()
        time.sleep(max(0.0, start + scenario.duration_seconds + 0.5 - time.monotonic()))
    row = db.execute("SELECT min(created_at) FROM fairsched.jobs").fetchone()
    assert row is not None
    t0 = row[0]
    end = t0 + timedelta(seconds=scenario.duration_seconds)
    rows = db.execute(
        "SELECT tenant, created_at, started_at FROM fairsched.jobs WHERE created_at < %s", (end,)
    ).fetchall()
    started = {name: 0 for name in weights}
    waits: dict[str, list[float]] = {name: [] for name in weights}
    for tenant, created, began in rows:
        if began is not None and began < end:
            started[tenant] += 1
            waits[tenant].append((began - created).total_seconds())
        else:
            waits[tenant].append((end - created).total_seconds())
    total = sum(started.values())
    return {
        name: {
            "share": started[name] / total,
            "p50_wait": percentile(waits[name], 0.5),
            "claimed": started[name],
        }
        for name in weights
    }


def ordered_pairs(figures: Mapping[str, Mapping[str, float]], key: str) -> set[tuple[str, str]]:
    """Pairs (x, y) where x waits clearly less than y (by more than a quarter)."""
    return {(x, y) for x in figures for y in figures if figures[x][key] < 0.75 * figures[y][key]}


def test_simulated_weight_change_agrees_with_a_real_run(
    client: Client, fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(SCENARIO))
    result = cli(fresh_db, "simulate", str(path), "--set", "tenant.a.weight=3", "--json")
    assert result.exit_code == 0, result.output
    predicted = json.loads(result.stdout)

    real = {
        "current": real_run(client, db, tmp_path, {n: t["weight"] for n, t in SCENARIO["tenants"].items()}),
        "proposed": real_run(client, db, tmp_path, PROPOSED_WEIGHTS),
    }
    for setting in ("current", "proposed"):
        sim = predicted[setting]["tenants"]
        print(f"{setting}: tenant, predicted share / real share, predicted p50 wait / real p50 wait")
        for name in sorted(sim):
            print(
                f"  {name}: {100 * sim[name]['share']:5.1f}% / {100 * real[setting][name]['share']:5.1f}%, "
                f"{sim[name]['p50_wait']:.2f}s / {real[setting][name]['p50_wait']:.2f}s "
                f"({sim[name]['claimed']} / {real[setting][name]['claimed']} claims)"
            )
        for name in sim:
            assert abs(sim[name]["share"] - real[setting][name]["share"]) <= SHARE_TOLERANCE, (setting, name)
        predicted_order = ordered_pairs(sim, "p50_wait")
        assert predicted_order, setting
        assert predicted_order <= ordered_pairs(real[setting], "p50_wait"), setting
    # The prediction shows the change: a's share rises to b's.
    assert (
        predicted["current"]["tenants"]["a"]["share"] < 0.3 < predicted["proposed"]["tenants"]["a"]["share"]
    )


def scenario_file(tmp_path: Path, **changes: Any) -> Path:
    text = """
slots = 4
duration_seconds = 2
starving_after_seconds = 0.5

[queue]
policies = ["weighted", "aging"]
aging_interval_seconds = 1

[tenants.big]
weight = 1
backlog = 300
job_ms = 20
priority = 0

[tenants.small]
weight = 1
rate = 10
job_ms = 20
"""
    path = tmp_path / "scenario.toml"
    path.write_text(text + "".join(f"{k} = {v}\n" for k, v in changes.items()))
    return path


def test_simulate_table_propose_file_and_runtime_charge(
    client: Client, fresh_db: str, tmp_path: Path
) -> None:
    proposal = tmp_path / "proposal.toml"
    proposal.write_text(
        'slots = 2\n[queue]\ncharge = "runtime"\ntenant_cap = 1\n[tenants.small]\nweight = 4\n'
    )
    result = cli(fresh_db, "simulate", str(scenario_file(tmp_path)), "--propose", str(proposal), "--json")
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["current"]["slots"] == 4 and figures["proposed"]["slots"] == 2
    # A cap of one running job per tenant: big runs one 20 ms job at a time for 2 s.
    assert figures["proposed"]["tenants"]["big"]["claimed"] <= 101
    assert figures["current"]["tenants"]["big"]["claimed"] > 150

    table = cli(fresh_db, "simulate", str(scenario_file(tmp_path)), "--set", "tenant.big.weight=2")
    assert table.exit_code == 0, table.output
    assert "share" in table.stdout and "proposed" in table.stdout and "small" in table.stdout
    alone = cli(fresh_db, "simulate", str(scenario_file(tmp_path)), "--json")
    assert set(json.loads(alone.stdout)) == {"current"}


def test_simulate_from_a_queues_history(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    client.declare_queue("h", QueueSettings(policies=["weighted"]))
    for tenant, count in (("big", 30), ("small", 5)):
        client.enqueue_many("h", [JobSpec({}, tenant) for _ in range(count)])
    for _ in range(3):
        client.complete_many(client.claim("h", owner="t", limit=3))
    result = cli(
        fresh_db, "simulate", "--from-queue", "h", "--since", "1h", "--set", "tenant.small.weight=5", "--json"
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["current"]["slots"] == 3
    assert {name: t["jobs"] for name, t in figures["current"]["tenants"].items()} == {"big": 30, "small": 5}
    assert figures["proposed"]["policies"] == ["weighted"]
    # the real queue is untouched: the simulation ran on a scratch database
    assert db.execute("SELECT count(*) FROM fairsched.jobs WHERE status = 'pending'").fetchone() == (26,)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "tenant.a.weight=0"], "weight"),
        (["--set", "queue.policies=weighted,nope"], "unknown policy 'nope'"),
        (["--set", "nonsense"], "expected key=value"),
        (["--set", "tenant.a=3"], "use tenant.<name>.weight=N"),
        (["--set", "slots=0"], "slots must be a whole number"),
        (["--set", "queue.lease_seconds=-1"], "lease_seconds"),
    ],
)
def test_simulate_refuses_bad_proposals(
    client: Client, fresh_db: str, tmp_path: Path, args: list[str], message: str
) -> None:
    result = cli(fresh_db, "simulate", str(scenario_file(tmp_path)), *args)
    assert result.exit_code == 1, result.output
    assert message in one_error_line(result)


def test_simulate_refuses_bad_scenarios(client: Client, fresh_db: str, tmp_path: Path) -> None:
    bad = cli(fresh_db, "simulate", str(scenario_file(tmp_path, workers=3)))
    assert bad.exit_code == 1 and "workers" in one_error_line(bad)
    path = tmp_path / "s.toml"
    path.write_text('[queue]\npolicies = ["nope"]\n[tenants.a]\nbacklog = 1\n')
    assert "unknown policy" in one_error_line(cli(fresh_db, "simulate", str(path)))
    path.write_text("[tenants.a]\nrate = -1\n")
    assert "tenants.a.rate" in one_error_line(cli(fresh_db, "simulate", str(path)))
    assert cli(fresh_db, "simulate").exit_code == 2
    assert cli(fresh_db, "simulate", str(path), "--from-queue", "q").exit_code == 2
    empty = cli(fresh_db, "simulate", "--from-queue", "q")
    assert empty.exit_code == 1 and "has no jobs" in one_error_line(empty)


def test_figures_helpers() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0 and percentile([1.0, 2.0], 0.99) == 2.0
    assert union_length([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == 4
    assert peak_concurrency([(0, 2), (1, 3), (2, 4)]) == 2
    scenario = Scenario.model_validate(SCENARIO)
    assert arrivals(scenario) == arrivals(scenario)  # seeded
    assert sum(1 for a in arrivals(scenario) if a.tenant == "c") > 5
