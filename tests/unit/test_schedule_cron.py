"""Cron expressions in a time zone: next runs across DST transitions, the latest tick at or
before a moment, and bad input refused with one clear error."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from fairsched import load_settings
from fairsched.errors import ConfigError, InvalidInput
from fairsched.schedules.cron import Cron


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_a_daily_time_follows_its_zone_across_both_dst_transitions() -> None:
    cron = Cron.parse("0 9 * * *", "Europe/Berlin")
    # 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer (clocks forward on
    # 29 March 2026, back on 25 October 2026).
    assert cron.upcoming(utc(2026, 3, 27, 12), 3) == [
        utc(2026, 3, 28, 8),
        utc(2026, 3, 29, 7),
        utc(2026, 3, 30, 7),
    ]
    assert cron.upcoming(utc(2026, 10, 24, 12), 2) == [utc(2026, 10, 25, 8), utc(2026, 10, 26, 8)]


def test_a_time_skipped_by_the_clocks_going_forward_runs_once_right_after() -> None:
    # 02:30 does not exist in Berlin on 29 March 2026: it runs at 03:00 local (01:00 UTC).
    cron = Cron.parse("30 2 * * *", "Europe/Berlin")
    assert cron.upcoming(utc(2026, 3, 28, 12), 2) == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]


def test_a_time_that_happens_twice_when_the_clocks_go_back_runs_once() -> None:
    cron = Cron.parse("30 2 * * *", "Europe/Berlin")
    assert cron.upcoming(utc(2026, 10, 24, 12), 2) == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


def test_an_hourly_expression_keeps_every_real_hour_through_the_transitions() -> None:
    cron = Cron.parse("0 * * * *", "America/New_York")
    back = cron.upcoming(utc(2026, 11, 1, 4, 30), 4)  # clocks back at 02:00 EDT = 06:00 UTC
    assert [b - a for a, b in itertools.pairwise(back)] == [timedelta(hours=1)] * 3
    forward = cron.upcoming(utc(2026, 3, 8, 5, 30), 4)  # forward at 02:00 EST = 07:00 UTC
    assert [b - a for a, b in itertools.pairwise(forward)] == [timedelta(hours=1)] * 3


def test_the_latest_tick_at_or_before_counts_the_moment_itself() -> None:
    cron = Cron.parse("*/15 * * * *")
    assert cron.latest_at_or_before(utc(2026, 1, 5, 10, 15)) == utc(2026, 1, 5, 10, 15)
    assert cron.latest_at_or_before(utc(2026, 1, 5, 10, 29, 59, 999_999)) == utc(2026, 1, 5, 10, 15)
    assert cron.next_after(utc(2026, 1, 5, 10, 15)) == utc(2026, 1, 5, 10, 30)
    seconds = Cron.parse("*/10 * * * * *")
    assert seconds.latest_at_or_before(utc(2026, 1, 5, 10, 0, 25, 500)) == utc(2026, 1, 5, 10, 0, 20)
    assert seconds.latest_at_or_before(utc(2026, 1, 5, 10, 0, 20)) == utc(2026, 1, 5, 10, 0, 20)
    assert seconds.latest_at_or_before(utc(2026, 1, 5, 10, 0, 19, 999_999)) == utc(2026, 1, 5, 10, 0, 10)
    assert seconds.next_after(utc(2026, 1, 5, 10, 0, 20, 1)) == utc(2026, 1, 5, 10, 0, 30)


def test_an_expression_without_a_tick_has_no_next_run() -> None:
    # The 1st and the 21st of a month, when also its last Monday: never.
    assert Cron.parse("* * */20 * 1L").next_after(utc(2026, 1, 1)) is None
    # February 30 is refused at once.
    with pytest.raises(InvalidInput, match="Bad day-of-month"):
        Cron.parse("0 0 30 2 *")


@pytest.mark.parametrize(
    ("expression", "zone", "message"),
    [
        ("0 25 * * *", "UTC", "invalid cron expression '0 25 \\* \\* \\*': Bad hour"),
        ("* * * *", "UTC", "Wrong number of fields"),
        ("@daily", "UTC", "Wrong number of fields"),
        ("", "UTC", "non-empty"),
        ("* " * 120, "UTC", "at most 200 characters"),
        ("0 3 * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("0 3 * * *", "../etc/passwd", "unknown time zone"),
        ("0 3 * * *", "", "unknown time zone"),
    ],
)
def test_bad_expressions_and_zones_are_refused(expression: str, zone: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        Cron.parse(expression, zone)


def test_a_config_file_names_each_bad_schedule_key(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "bad.toml"  # type: ignore[operator]
    path.write_text(
        '[queues.q]\n[[schedules]]\nname = "a"\ncron = "61 * * * *"\ntimezone = "Nowhere/Land"\n'
        'queue = "q"\ntenant = "t"\njitter = 7200\n'
        '[[schedules]]\nname = "a"\ncron = "* * * * *"\nqueue = "bad queue"\ntenant = ""\n',
        "utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    text = str(caught.value)
    for part in (
        "schedules.0.timezone: unknown time zone 'Nowhere/Land'",
        "schedules.0.cron: invalid cron expression '61 * * * *': Bad minute",
        "schedules.0.jitter: Input should be less than or equal to 3600",
        "schedules.1.queue: invalid queue name 'bad queue'",
        "schedules.1.tenant: tenant must be a non-empty string",
    ):
        assert part in text, text
