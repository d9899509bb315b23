"""A partial ``declare_queue`` changes only what it was given."""

from __future__ import annotations

from fairsched import Client, QueueSettings
from fairsched.config.sync import database_settings


def stored(client: Client, name: str) -> QueueSettings:
    with client.connection() as conn:
        return database_settings(conn)[name]


def test_a_partial_declaration_keeps_the_stack_tenants_and_settings_it_was_not_given(client: Client) -> None:
    full = QueueSettings(
        policies=["weighted", "aging", "serial"],
        lease_seconds=20,
        aging_interval_seconds=5,
        tenants={"acme": {"weight": 3}},
    )
    client.declare_queue("emails", full)
    now = client.declare_queue("emails", QueueSettings(lease_seconds=30, max_attempts=5))
    after = stored(client, "emails")
    assert after == now
    assert after.policies == ["weighted", "aging", "serial"]
    assert after.aging_interval_seconds == 5
    assert after.tenants["acme"].weight == 3
    assert (after.lease_seconds, after.max_attempts) == (30, 5)


def test_a_field_given_explicitly_changes_even_when_it_equals_the_default(client: Client) -> None:
    client.declare_queue("q", QueueSettings(policies=["weighted"], max_attempts=3))
    client.declare_queue("q", QueueSettings(policies=["fifo"]))
    after = stored(client, "q")
    assert after.policies == ["fifo"]
    assert after.max_attempts == 3


def test_a_new_queue_takes_the_defaults_for_what_is_not_given(client: Client) -> None:
    client.declare_queue("fresh", QueueSettings(lease_seconds=12))
    after = stored(client, "fresh")
    defaults = QueueSettings()
    assert after.lease_seconds == 12
    assert (after.policies, after.max_attempts) == (defaults.policies, defaults.max_attempts)
