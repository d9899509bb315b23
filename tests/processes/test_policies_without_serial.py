"""The engine names no built-in policy: with ``serial`` taken out of the installed entry
points, a database migrates without serial's migrations, the other policies enqueue,
claim, fail and complete as before, and a queue that names ``serial`` gets the registry's
error."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

from cli_support import REPO

SCRIPT = r"""
import sys
import psycopg
from fairsched import Client, JobSpec, QueueSettings
from fairsched.db.migrate import migrate
from fairsched.errors import ConfigError
from fairsched.policy.registry import registry
from fairsched_policies.ratelimit import Rate, rate_set

assert sorted(registry()) == ["aging", "fifo", "ratelimit", "weighted"], sorted(registry())
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    applied = migrate(conn)
assert any(":" in a for a in applied) and not any(a.startswith("serial:") for a in applied), applied
with Client(sys.argv[1]) as client:
    stacks = {"f": ["fifo"], "wa": ["weighted", "aging"], "r": ["weighted", "ratelimit"]}
    for name, stack in stacks.items():
        settings = QueueSettings(policies=stack, backoff_base_seconds=0, backoff_max_seconds=0)
        client.declare_queue(name, settings)
        jobs = [JobSpec({}, t, aggregate_key="k", aggregate_seq=i) for i, t in enumerate("aabc", 1)]
        client.enqueue_many(name, jobs)
    with client.connection() as conn:
        rate_set(conn, "r", "a", Rate(1000, 1))
        conn.commit()
    done = {}
    for name in ("f", "wa", "r"):
        leases = client.claim(name, owner="w", limit=10)
        client.fail(leases[0], "again", kind="retryable", code="E")
        client.complete_many(leases[1:])
        retried = client.claim(name, owner="w", limit=10)
        client.complete_many(retried)
        done[name] = sorted(lease.tenant for lease in leases[1:] + retried)
    print(sorted(done.items()))
    try:
        client.declare_queue("s", QueueSettings(policies=["weighted", "serial"]))
    except ConfigError as e:
        print("refused:", e)
assert "fairsched_policies.serial" not in sys.modules
"""


def test_the_other_policies_work_without_serial_installed(empty_db: str, tmp_path: Path) -> None:
    dist = distribution("fairsched")
    points = dist.read_text("entry_points.txt") or ""
    without = "\n".join(line for line in points.splitlines() if not line.startswith("serial ="))
    assert without != points, "the installed entry points name serial"
    info = tmp_path / f"fairsched-{dist.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fairsched\nVersion: {dist.version}\n")
    (info / "entry_points.txt").write_text(without + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, empty_db], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == str([(name, ["a", "a", "b", "c"]) for name in ("f", "r", "wa")])
    installed = "aging, fifo, ratelimit, weighted"
    assert lines[1].startswith(f"refused: unknown policy 'serial'; installed: {installed}")
