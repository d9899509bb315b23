"""The lab's ``rate`` scenario: limited tenants held to their rate on real workers, the
tenants without a limit running the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench import SCENARIOS
from bench.rate import FREE_TENANTS, LIMITS, Window, limited_tenant

REPO = Path(__file__).resolve().parents[2]
SECONDS = 5.0
"""The window with the limits of the test's run (the lab's default is 60 s)."""


def test_the_rate_scenario_is_listed() -> None:
    assert "rate" in SCENARIOS


def test_window_rates_and_reference_length() -> None:
    window = Window({"r5": 25, "free0": 900, "free1": 1100}, 5.0)
    assert window.rate(["r5"]) == 5.0
    assert window.rate(FREE_TENANTS) == 400.0, "a tenant with no job started counts 0"
    assert window.rate() == 405.0


def test_rate_scenario_holds_each_tenant_to_its_limit_and_runs_the_rest(server_dsn: str) -> None:
    env = {**os.environ, "FAIRSCHED_DATABASE_URL": server_dsn}
    env.pop("FAIRSCHED_CONFIG", None)
    args = [
        "--repeats",
        "1",
        "--json",
        "--scenario",
        "rate",
        "--rate-seconds",
        f"{SECONDS:g}",
        "--slots",
        "8",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "bench", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["config"]["rate_seconds"] == SECONDS
    figures = {f["name"]: f for f in result["figures"]}
    assert {f["scenario"] for f in figures.values()} == {"rate"}
    for limit in LIMITS:
        fig = figures[f"tenant {limited_tenant(limit)}: jobs/s / its limit of {limit}/s"]
        assert fig["unit"] == "ratio" and fig["bar"] == "1 ± 0.05"
        observed = fig["median"]
        # A bucket holds one second of the limit: over the window a tenant starts at most
        # the window's refill and one full bucket (and whole jobs).
        assert 0 < observed <= 1 + (1 + 1 / limit) / SECONDS, (limit, observed)
        if limit <= 20:  # they come first whenever they hold a token: a claim a second will do
            assert observed >= 0.5, (limit, observed)
    share = figures["tenants without a limit: share of the jobs started"]
    free = figures["tenants without a limit: jobs/s together"]["median"]
    total = figures["jobs/s with the limits"]["median"]
    reference = figures["jobs/s without limits (reference)"]["median"]
    assert 0 < share["median"] < 100 and share["unit"] == "%"
    assert share["median"] == pytest.approx(100 * free / total, rel=1e-6)
    assert 0 < free < total and reference > 0
    assert figures["jobs/s with the limits / without"]["median"] == pytest.approx(total / reference, rel=1e-6)
    absorbed = figures[f"tenants without a limit: jobs/s / (jobs/s without limits - {sum(LIMITS)})"]
    if reference > sum(LIMITS):
        assert absorbed["median"] == pytest.approx(free / (reference - sum(LIMITS)), rel=1e-6)
    else:  # workers slower than the limits together: the figure has no sample
        assert absorbed["samples"] == []
