"""A third-party policy registered through its own entry point (a dist-info folder on the
path, no install) composes the claim of a real ``fairsched worker`` process."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from worker_support import Workers, statuses, wait_for

from fairsched import Client, QueueSettings
from fairsched.engine.composer import compose_claim
from fairsched.policy.registry import registry

PLUGIN = Path(__file__).resolve().parent.parent / "plugin_policy"


@pytest.fixture
def hold_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGIN))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")]))
    )
    registry.cache_clear()
    compose_claim.cache_clear()
    yield
    registry.cache_clear()
    compose_claim.cache_clear()


def test_a_third_party_policy_shapes_a_real_workers_claims(
    hold_installed: None, fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    assert "hold" in registry()
    db.execute("CREATE TABLE public.hold_log (queue text, job_id bigint)")
    with Client(fresh_db) as client:
        client.declare_queue("probe", QueueSettings(policies=["fifo", "hold"]))
        held = [client.enqueue("probe", {"hold": True}, tenant="t") for _ in range(3)]
        free = [client.enqueue("probe", {}, tenant="t") for _ in range(7)]
    with Workers(fresh_db, tmp_path) as workers:
        workers.start({"probe": 4})
        wait_for(lambda: statuses(db).get("succeeded") == 7, "the 7 free jobs done")
    assert statuses(db) == {"succeeded": 7, "pending": 3}
    pending = {row[0] for row in db.execute("SELECT id FROM fairsched.jobs WHERE status = 'pending'")}
    assert pending == set(held)
    logged = {row[0] for row in db.execute("SELECT job_id FROM public.hold_log")}
    assert logged == set(free)


@pytest.mark.parametrize("stack", [["fifo", "hold"], ["weighted", "hold"]])
def test_a_policys_enqueue_hook_runs_in_the_enqueuing_transaction(
    hold_installed: None,
    fresh_db: str,
    db: psycopg.Connection,
    monkeypatch: pytest.MonkeyPatch,
    stack: list[str],
) -> None:
    """A hook that sees the inserted jobs and fails takes them back with it (and, on a
    weighted queue, the tenant's activation): the insert did not commit on its own."""
    import hold_policy

    seen: list[int] = []

    def refuse(self: object, conn: psycopg.Connection, queue: str, job_ids: list[int]) -> None:
        row = conn.execute("SELECT count(*) FROM fairsched.jobs WHERE id = ANY(%s)", [job_ids]).fetchone()
        seen.append(row[0] if row else 0)
        raise RuntimeError("the hook refused")

    monkeypatch.setattr(hold_policy.Hold, "on_enqueue", refuse)
    with Client(fresh_db) as client:
        client.declare_queue("probe", QueueSettings(policies=stack))
        with pytest.raises(RuntimeError, match="the hook refused"):
            client.enqueue("probe", {}, tenant="t")
    assert seen == [1]
    assert statuses(db) == {}
    active = db.execute("SELECT count(*) FROM fairsched.tenant_shares WHERE active").fetchone()
    assert active == (0,)
