"""Server-side session limits: every connection fairsched opens sets its role's limits."""

from __future__ import annotations

import psycopg
import pytest
from worker_support import wait_for

from fairsched import Client, Settings
from fairsched.db.connection import ROLE_LIMITS, Role, SessionLimits, connect, make_pool, translate
from fairsched.errors import ConfigError, DatabaseError
from fairsched.settings import load_settings

NAMES = ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout")


def limits_of(conn: psycopg.Connection) -> dict[str, str]:
    return {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in NAMES}  # type: ignore[index]


def backend_alive(db: psycopg.Connection, pid: int) -> bool:
    return db.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is not None


def test_each_role_sets_its_limits_and_nothing_else() -> None:
    settings = Settings(
        idle_in_transaction_timeout_seconds=7, lock_timeout_seconds=3, operator_statement_timeout_seconds=20
    )
    assert SessionLimits.for_role(Role.WORKER, settings) == SessionLimits(7, 3, 0)
    assert SessionLimits.for_role(Role.CLAIMS, settings) == SessionLimits(7, 0, 0)
    assert SessionLimits.for_role(Role.OPERATOR, settings) == SessionLimits(7, 3, 20)
    assert SessionLimits.for_role(Role.MIGRATIONS, settings) == SessionLimits(7, 0, 0)
    assert set(ROLE_LIMITS) == set(Role)
    assert all("idle_in_transaction_session_timeout" in names for names in ROLE_LIMITS.values())
    assert SessionLimits.for_role(Role.WORKER) == SessionLimits(10, 5, 0), "the defaults"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("idle_in_transaction_timeout_seconds", -1),
        ("idle_in_transaction_timeout_seconds", 3601),
        ("lock_timeout_seconds", 601),
        ("operator_statement_timeout_seconds", 3601),
    ],
)
def test_limits_outside_their_range_are_refused(key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=key):
        load_settings(None, **{key: value})


def test_client_sessions_carry_their_roles_limits(fresh_db: str) -> None:
    with Client(fresh_db) as client:
        with client.connection() as conn:
            assert limits_of(conn) == {
                "idle_in_transaction_session_timeout": "10s",
                "lock_timeout": "5s",
                "statement_timeout": "0",
            }
        with client.claim_pool.connection() as conn:
            assert limits_of(conn)["lock_timeout"] == "0"
            assert limits_of(conn)["idle_in_transaction_session_timeout"] == "10s"
    with Client(fresh_db, role=Role.OPERATOR) as client, client.connection() as conn:
        assert limits_of(conn)["statement_timeout"] == "30s"
    with connect(fresh_db, role=Role.MIGRATIONS) as conn:
        assert limits_of(conn) == {
            "idle_in_transaction_session_timeout": "10s",
            "lock_timeout": "0",
            "statement_timeout": "0",
        }
    pool = make_pool(fresh_db, max_size=1, prepare_threshold=None)  # as the exporter makes its pool
    with pool, pool.connection() as conn:
        assert limits_of(conn)["statement_timeout"] == "30s"


def test_zero_leaves_the_servers_setting_and_the_dsns_own_options_win(fresh_db: str) -> None:
    off = Settings(idle_in_transaction_timeout_seconds=0, lock_timeout_seconds=0)
    with connect(fresh_db, settings=off) as conn:
        assert limits_of(conn)["idle_in_transaction_session_timeout"] == "0"
        assert limits_of(conn)["lock_timeout"] == "0"
    dsn = psycopg.conninfo.make_conninfo(fresh_db, options="-c lock_timeout=1234")
    with connect(dsn) as conn:
        assert limits_of(conn)["lock_timeout"] == "1234ms"
        assert limits_of(conn)["idle_in_transaction_session_timeout"] == "10s"


def test_the_server_ends_a_session_left_idle_in_a_transaction(fresh_db: str, db: psycopg.Connection) -> None:
    settings = Settings(idle_in_transaction_timeout_seconds=0.2)
    with Client(fresh_db, settings=settings) as client, client.connection() as conn:
        pid = conn.info.backend_pid
        with pytest.raises(psycopg.Error) as caught, conn.transaction():
            conn.execute("SELECT count(*) FROM fairsched.jobs")
            wait_for(lambda: not backend_alive(db, pid), "the server ends the idle transaction")
            conn.execute("SELECT 1")
        assert "idle_in_transaction_timeout_seconds" in str(translate(caught.value))


def test_a_lock_wait_gives_up_with_a_clear_error(fresh_db: str) -> None:
    settings = Settings(lock_timeout_seconds=0.1)
    with psycopg.connect(fresh_db) as holder, Client(fresh_db, settings=settings) as client:
        holder.execute("LOCK TABLE fairsched.queues IN ACCESS EXCLUSIVE MODE")
        with client.connection() as conn, pytest.raises(psycopg.errors.LockNotAvailable) as caught:
            conn.execute("SELECT count(*) FROM fairsched.queues")
        error = translate(caught.value)
        assert isinstance(error, DatabaseError) and "lock_timeout_seconds" in str(error)
        holder.rollback()


def test_an_operator_query_is_cut_off(fresh_db: str) -> None:
    settings = Settings(operator_statement_timeout_seconds=0.1)
    with (
        Client(fresh_db, settings=settings, role=Role.OPERATOR) as client,
        client.connection() as conn,
        pytest.raises(psycopg.errors.QueryCanceled),
    ):
        conn.execute("SELECT pg_sleep(5)")


def test_a_pooler_refusing_startup_options_is_told_how_to_accept_them() -> None:
    refused = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 6432 failed: '
        "FATAL:  unsupported startup parameter: options"
    )
    message = str(translate(refused))
    assert "cannot reach PostgreSQL" in message
    assert "ignore_startup_parameters = options" in message
