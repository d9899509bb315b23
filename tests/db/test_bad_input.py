"""Bad input through the Client API and config files: a clear fairsched error, nothing written.

Property tests (hypothesis) feed malformed and hostile values; after every
rejected call the fairsched tables are compared with a snapshot taken before.
Hostile-but-valid names (quotes, semicolons, unicode) must be stored verbatim.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fault_support import db_snapshot
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from fairsched import Client, JobSpec, QueueSettings, load_settings
from fairsched.cli.main import app as cli_app
from fairsched.errors import ConfigError, FairschedError, InvalidInput, PayloadTooLarge, UnknownQueue

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

HOSTILE_SAMPLES = [
    "'; DROP TABLE fairsched.jobs; --",
    'a"b',
    "Robert'); DELETE FROM fairsched.queues; --",
    "$$ || pg_sleep(10) || $$",
    "%(queue)s",
    "{}",
    "\u202egnp.exe",
    "名前;テナント",
    "😀" * 20,
    "tenant\\",
    "/* comment",
]
hostile_text = st.one_of(
    st.sampled_from(HOSTILE_SAMPLES),
    st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), min_size=1),
)
control_chars = st.characters(categories=["Cc"])
bad_labels = st.one_of(
    st.just(""),
    st.builds(lambda s, c: s + c, st.text(max_size=10), control_chars),
    st.builds(lambda s: s + "\ud800", st.text(max_size=10)),
    st.builds(lambda s: s + "\ufffe", st.text(max_size=10)),
    st.integers(),
    st.none(),
    st.binary(min_size=1),
)
valid_queue_names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}\Z")
bad_queue_names = st.one_of(
    st.sampled_from(["", "a b", "q;", "q'", 'q"', "-q", ".q", "ü", "\nq", "q\n", "x" * 64]),
    hostile_text.filter(lambda s: not all(c.isascii() and (c.isalnum() or c in "_.:-") for c in s)),
    st.text(alphabet="abc", min_size=64, max_size=300),
)
not_json = st.one_of(
    st.sets(st.integers(), min_size=1),
    st.binary(),
    st.builds(object),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.just({(1, 2): "tuple key"}),
    st.just(dt.datetime(2024, 1, 1)),
    st.sampled_from(["\x00", "a\x00b"]),
)


def wrap_deep(value: Any) -> st.SearchStrategy[Any]:
    """``value`` somewhere inside lists and dicts (so validation must look inside)."""
    return st.recursive(
        st.just(value),
        lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3), st.dictionaries(st.text(), inner, min_size=1)
        ),
        max_leaves=4,
    )


def assert_unchanged(db: psycopg.Connection, before: dict[str, tuple[int, str]]) -> None:
    assert db_snapshot(db) == before


def rejects(
    db: psycopg.Connection, error: type[FairschedError], call: Callable[[], object], *mentions: str
) -> FairschedError:
    """``call`` raises ``error`` (whose message names ``mentions``) and writes nothing."""
    before = db_snapshot(db)
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    assert message and "Traceback" not in message
    for word in mentions:
        assert word in message, f"{word!r} not in {message!r}"
    assert_unchanged(db, before)
    return caught.value


# -- payloads -------------------------------------------------------------------------


@FEW
@given(payload=st.one_of(not_json, not_json.flatmap(wrap_deep)))
def test_non_json_payload_is_refused(client: Client, db: psycopg.Connection, payload: Any) -> None:
    rejects(db, InvalidInput, lambda: client.enqueue("q", payload, tenant="t"), "payload")


@FEW
@given(size=st.integers(min_value=4097, max_value=200_000), shape=st.sampled_from(["str", "list", "dict"]))
def test_oversized_payload_is_refused_with_the_limit(
    client: Client, db: psycopg.Connection, size: int, shape: str
) -> None:
    payload: Any = {
        "str": "x" * size,
        "list": [1] * (size // 2),
        "dict": {str(i): 0 for i in range(size // 6)},
    }[shape]
    rejects(db, PayloadTooLarge, lambda: client.enqueue("q", payload, tenant="t"), "4096")


@FEW
@given(bad_index=st.integers(min_value=0, max_value=9), payload=not_json)
def test_one_bad_job_in_a_batch_inserts_none(
    client: Client, db: psycopg.Connection, bad_index: int, payload: Any
) -> None:
    jobs = [JobSpec({"n": i}, tenant="t") for i in range(10)]
    jobs[bad_index] = JobSpec(payload, tenant="t")
    rejects(db, InvalidInput, lambda: client.enqueue_many("q", jobs))


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**60), 2**60), hostile_text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)),
    max_leaves=12,
)


@FEW
@given(payload=json_values)
def test_hostile_json_payload_round_trips(client: Client, payload: Any) -> None:
    job_id = client.enqueue("q", payload, tenant="t")
    [lease] = client.claim("q", owner="w")
    assert (lease.id, lease.payload) == (job_id, payload)
    assert client.complete(lease)


def test_payload_with_lone_surrogate_is_refused(client: Client, db: psycopg.Connection) -> None:
    rejects(db, InvalidInput, lambda: client.enqueue("q", {"s": "\ud800"}, tenant="t"), "payload")


def test_deeply_nested_payload_is_refused(client: Client, db: psycopg.Connection) -> None:
    payload: list[Any] = []
    for _ in range(5000):
        payload = [payload]
    rejects(db, InvalidInput, lambda: client.enqueue("q", payload, tenant="t"), "payload")


def test_payload_with_backslash_u0000_text_is_accepted(client: Client) -> None:
    payload = {"path": "C:\\u0000dir"}
    job_id = client.enqueue("q", payload, tenant="t")
    assert client.job_show(job_id)["payload"] == payload


# -- queues ---------------------------------------------------------------------------


@FEW
@given(queue=bad_queue_names)
def test_invalid_queue_names_are_refused_everywhere(
    client: Client, db: psycopg.Connection, queue: str
) -> None:
    rejects(db, InvalidInput, lambda: client.enqueue(queue, {}, tenant="t"), "queue")
    rejects(db, InvalidInput, lambda: client.claim(queue, owner="w"), "queue")
    rejects(db, InvalidInput, lambda: client.declare_queue(queue, QueueSettings()), "queue")


def test_queue_name_with_trailing_newline_is_refused(client: Client, db: psycopg.Connection) -> None:
    rejects(db, InvalidInput, lambda: client.claim("q\n", owner="w"), "queue")


@FEW
@given(queue=valid_queue_names.filter(lambda name: name != "q"))
def test_unknown_queue_is_refused(client: Client, db: psycopg.Connection, queue: str) -> None:
    error = rejects(db, UnknownQueue, lambda: client.enqueue(queue, {}, tenant="t"), "config apply")
    assert isinstance(error, UnknownQueue) and error.queue == queue


@pytest.mark.parametrize(
    "field, value",
    [
        ("lease_seconds", 0),
        ("lease_seconds", -1.0),
        ("max_attempts", 0),
        ("unknown_max_attempts", -5),
        ("backoff_base_seconds", -1.0),
        ("max_runtime_seconds", 0.0),
    ],
)
def test_invalid_queue_settings_bypassing_validation_are_refused_by_the_database(
    client: Client, db: psycopg.Connection, field: str, value: float
) -> None:
    broken = QueueSettings.model_construct(**{**QueueSettings().model_dump(), field: value})
    rejects(db, InvalidInput, lambda: client.declare_queue("q", broken), field)


# -- names and numbers ----------------------------------------------------------------


@FEW
@given(tenant=hostile_text, key=hostile_text, idem=hostile_text)
@example(tenant=HOSTILE_SAMPLES[0], key=HOSTILE_SAMPLES[2], idem=HOSTILE_SAMPLES[3])
def test_hostile_but_valid_names_are_stored_verbatim(
    client: Client, db: psycopg.Connection, tenant: str, key: str, idem: str
) -> None:
    tenant, key, idem = tenant[:128], key[:256], idem[:224] + uuid.uuid4().hex
    before = db_snapshot(db)
    job_id = client.enqueue("q", {}, tenant=tenant, aggregate_key=key, aggregate_seq=1, idempotency_key=idem)
    row = db.execute(
        "SELECT tenant, aggregate_key, idempotency_key FROM fairsched.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row == (tenant, key, idem)
    after = db_snapshot(db)
    assert after["jobs"][0] == before["jobs"][0] + 1
    assert {name: v for name, v in after.items() if name != "jobs"} == {
        name: v for name, v in before.items() if name != "jobs"
    }


@FEW
@given(label=st.one_of(bad_labels, st.text(min_size=129, max_size=400)), which=st.sampled_from(["tenant"]))
def test_bad_tenant_is_refused(client: Client, db: psycopg.Connection, label: Any, which: str) -> None:
    rejects(db, InvalidInput, lambda: client.enqueue("q", {}, tenant=label), which)


@FEW
@given(
    label=st.one_of(bad_labels, st.text(min_size=257, max_size=600)),
    which=st.sampled_from(["aggregate_key", "idempotency_key"]),
)
def test_bad_keys_are_refused(client: Client, db: psycopg.Connection, label: Any, which: str) -> None:
    kwargs: dict[str, Any] = {which: label}
    if which == "aggregate_key":
        kwargs["aggregate_seq"] = 1
    elif label is None:
        return  # no idempotency key is valid
    rejects(db, InvalidInput, lambda: client.enqueue("q", {}, tenant="t", **kwargs), which)


bad_ints = st.one_of(
    st.integers(max_value=-(2**31)),
    st.integers(min_value=2**31),
    st.floats(),
    st.text(max_size=3),
    st.booleans(),
)


@FEW
@given(
    field=st.sampled_from(["priority", "aggregate_seq", "max_attempts"]),
    value=st.one_of(bad_ints, st.integers(max_value=-1), st.integers(min_value=1001)),
)
def test_out_of_range_numbers_are_refused(
    client: Client, db: psycopg.Connection, field: str, value: Any
) -> None:
    valid = {
        "priority": lambda v: isinstance(v, int) and not isinstance(v, bool) and -(2**31) < v < 2**31,
        "aggregate_seq": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63,
        "max_attempts": lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1000,
    }[field]
    if valid(value):
        return
    kwargs: dict[str, Any] = {field: value}
    if field == "aggregate_seq":
        kwargs["aggregate_key"] = "order-1"
    rejects(db, InvalidInput, lambda: client.enqueue("q", {}, tenant="t", **kwargs), field)


def test_half_an_aggregate_is_refused(client: Client, db: psycopg.Connection) -> None:
    rejects(db, InvalidInput, lambda: client.enqueue("q", {}, tenant="t", aggregate_key="k"), "aggregate")
    rejects(db, InvalidInput, lambda: client.enqueue("q", {}, tenant="t", aggregate_seq=1), "aggregate")


def test_naive_run_at_is_refused(client: Client, db: psycopg.Connection) -> None:
    naive = dt.datetime(2030, 1, 1)
    rejects(db, InvalidInput, lambda: client.enqueue("q", {}, tenant="t", run_at=naive), "run_at")


@FEW
@given(
    limit=st.one_of(st.integers(max_value=0), st.integers(min_value=1001), st.booleans(), st.floats()),
)
def test_invalid_claim_limits_are_refused(client: Client, db: psycopg.Connection, limit: Any) -> None:
    client.enqueue("q", {}, tenant="t")
    rejects(db, InvalidInput, lambda: client.claim("q", owner="w", limit=limit), "limit")


@pytest.mark.parametrize("lease_seconds", [0, -1.0, -math.inf, math.nan])
def test_invalid_lease_lengths_are_refused(
    client: Client, db: psycopg.Connection, lease_seconds: float
) -> None:
    client.enqueue("q", {}, tenant="t")
    rejects(db, InvalidInput, lambda: client.claim("q", owner="w", lease_seconds=lease_seconds))


@FEW
@given(owner=bad_labels)
def test_invalid_owner_is_refused(client: Client, db: psycopg.Connection, owner: Any) -> None:
    client.enqueue("q", {}, tenant="t")
    rejects(db, InvalidInput, lambda: client.claim("q", owner=owner), "owner")


# -- config files ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200).filter(lambda t: "\r" not in t))  # see test_bare_carriage_return...
@example(text="[queues.emails\nlease_seconds = 3")
@example(text='database_url = "postgresql://u:s3cret@h/db"\nmax_payload_bytes = "big"')
def test_any_config_text_loads_or_raises_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_text(text, "utf-8")
    try:
        load_settings(path)
    except ConfigError as e:
        assert str(path) in str(e)
        assert "s3cret" not in str(e)


@pytest.mark.parametrize(
    "text, mentions",
    [
        ("[queues.emails\n", "not valid TOML"),
        ("max_payload_bytes = 0\n", "max_payload_bytes"),
        ("max_payload_bytes = 'big'\n", "max_payload_bytes"),
        ("[queues.emails]\nlease_seconds = -1\n", "queues.emails.lease_seconds"),
        ("[queues.emails]\nlease = 5\n", "queues.emails.lease"),
        ('[queues."a;b"]\n', "queues"),
        ('[queues."\'; DROP TABLE x; --"]\n', "queues"),
        ("[tenants.acme]\nweight = 0\n", "tenants.acme.weight"),
        ("[tenants.acme]\nweight = -2\n", "tenants.acme.weight"),
        ("[tenants.acme]\nweight = 'heavy'\n", "tenants.acme.weight"),
        ("unknown_key = 1\n", "unknown_key"),
    ],
)
def test_broken_config_names_the_file_and_key(tmp_path: Path, text: str, mentions: str) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_text(text, "utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(path) in str(caught.value) and mentions in str(caught.value)


def test_bare_carriage_return_in_config_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_bytes(b"max_payload_bytes = 1\r")
    with pytest.raises(ConfigError, match="TOML"):
        load_settings(path)


def test_environment_value_that_is_not_json_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRSCHED_CONFIG", raising=False)
    monkeypatch.setenv("FAIRSCHED_QUEUES", "{not json")
    with pytest.raises(ConfigError, match="queues"):
        load_settings()


def test_config_that_is_not_utf8_or_missing_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_bytes(b"\xff\xfe max_payload_bytes = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(path)
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "absent.toml")


@pytest.mark.parametrize(
    "name, value",
    [
        ("FAIRSCHED_MAX_PAYLOAD_BYTES", "lots"),
        ("FAIRSCHED_POLL_INTERVAL_SECONDS", "-1"),
        ("FAIRSCHED_QUEUES__EMAILS__LEASE_SECONDS", "0"),
    ],
)
def test_bad_environment_is_a_config_error(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.delenv("FAIRSCHED_CONFIG", raising=False)
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError):
        load_settings()


# -- the command line -----------------------------------------------------------------

runner = CliRunner()


def run_cli(dsn: str, *args: str, stdin: str | None = None) -> Result:
    env = {"FAIRSCHED_DATABASE_URL": dsn, "FAIRSCHED_MAX_PAYLOAD_BYTES": "4096", "FAIRSCHED_CONFIG": None}
    return runner.invoke(cli_app, list(args), env=env, input=stdin)


def cli_rejects(db: psycopg.Connection, dsn: str, *args: str, mentions: str = "", status: int = 1) -> None:
    """The command exits with ``status`` and one clear line on stderr, and writes nothing."""
    before = db_snapshot(db)
    result = run_cli(dsn, *args)
    assert result.exit_code == status, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    if status == 1:
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert mentions in result.stderr
    assert_unchanged(db, before)


@FEW
@given(text=st.text(max_size=60).filter(lambda t: not t.startswith("@") and not _is_json(t)))
@example(text="{'single': 'quotes'}")
@example(text='{"a": 1,}')
def test_cli_non_json_payload_is_refused(client: Client, db: psycopg.Connection, text: str) -> None:
    cli_rejects(
        db, client.dsn, "enqueue", "--queue", "q", "--tenant", "t", "--payload", text, mentions="JSON"
    )


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@FEW
@given(queue=bad_queue_names.filter(lambda q: "\x00" not in q and not q.startswith("-")))
def test_cli_hostile_queue_is_refused(client: Client, db: psycopg.Connection, queue: str) -> None:
    cli_rejects(db, client.dsn, "enqueue", "--queue", queue, "--tenant", "t", mentions="queue")


@pytest.mark.parametrize(
    "args, mentions, status",
    [
        (["--queue", "nope"], "unknown queue", 1),
        (["--payload", "NaN"], "payload", 1),
        (["--payload", '{"x": "' + "y" * 5000 + '"}'], "4096", 1),
        (["--payload", "@/nonexistent/payload.json"], "cannot read", 1),
        (["--tenant", "a\tb"], "tenant", 1),
        (["--tenant", "x" * 129], "tenant", 1),
        (["--priority", "abc"], "priority", 2),
        (["--priority", str(2**40)], "priority", 1),
        (["--aggregate-key", "k", "--aggregate-seq", "-1"], "aggregate_seq", 1),
        (["--aggregate-key", "k"], "aggregate", 1),
        (["--max-attempts", "0"], "max_attempts", 1),
        (["--run-at", "tomorrow"], "ISO 8601", 1),
        (["--run-at", "2030-01-01T00:00:00"], "time zone", 1),
    ],
)
def test_cli_bad_enqueue_arguments(
    client: Client, db: psycopg.Connection, args: list[str], mentions: str, status: int
) -> None:
    base = {"--queue": "q", "--tenant": "t"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    flat = [part for pair in base.items() for part in pair]
    cli_rejects(db, client.dsn, "enqueue", *flat, mentions=mentions, status=status)


@pytest.mark.parametrize(
    "text",
    [
        "[queues.q\nlease_seconds = 1\n",
        "[queues.q]\nlease_seconds = -1\n",
        '[queues."q;drop"]\n',
        "[queues.q]\nlease_seconds = 1\n[queues.r]\nmax_attempts = 0\n",
    ],
)
def test_cli_config_apply_with_a_broken_file_changes_nothing(
    client: Client, db: psycopg.Connection, tmp_path: Path, text: str
) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_text(text, "utf-8")
    cli_rejects(db, client.dsn, "config", "apply", str(path), mentions=str(path))
