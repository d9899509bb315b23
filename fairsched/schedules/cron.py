"""Cron expressions evaluated in a time zone, with cronsim.

cronsim follows Debian's cron, DST transitions included: a time of day skipped when the
clocks go forward runs at the first time that exists after it, a time of day that happens
twice when they go back runs once, and expressions that run every hour or more often
(``*`` in the hour or minute field) keep running every hour in real time. A sixth,
leading field gives seconds (``*/10 * * * * *``: every 10 seconds).

Every time this module returns is timezone-aware and in UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from fairsched.errors import InvalidInput

MAX_CRON_CHARS = 200
"""The longest cron expression (the database holds no longer)."""
_SECOND = timedelta(seconds=1)


def zone_checked(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``UTC``, ``Europe/Berlin``); :class:`InvalidInput` if unknown.

    >>> zone_checked("Europe/Berlin").key
    'Europe/Berlin'
    """
    if not isinstance(name, str) or not 1 <= len(name) <= 64 or name != name.strip():
        raise InvalidInput(f"unknown time zone {str(name)[:70]!r}: give an IANA name such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"unknown time zone {name!r}: give an IANA name such as UTC or Europe/Berlin"
        ) from None


@dataclass(frozen=True)
class Cron:
    """A checked cron expression and the time zone its fields are read in."""

    expression: str
    zone: ZoneInfo

    @classmethod
    def parse(cls, expression: str, timezone: str = "UTC") -> Cron:
        """Check ``expression`` (5 fields, or 6 with seconds first) and ``timezone``;
        :class:`InvalidInput` naming what is wrong.

        >>> Cron.parse("0 3 * * *", "Europe/Berlin").next_after(datetime(2026, 1, 5, tzinfo=UTC))
        datetime.datetime(2026, 1, 5, 2, 0, tzinfo=datetime.timezone.utc)
        >>> Cron.parse("0 25 * * *")
        Traceback (most recent call last):
        ...
        fairsched.errors.InvalidInput: invalid cron expression '0 25 * * *': Bad hour
        """
        zone = zone_checked(timezone)
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidInput("a cron expression must be non-empty text, e.g. '0 3 * * *'")
        if len(expression) > MAX_CRON_CHARS:
            raise InvalidInput(f"a cron expression is at most {MAX_CRON_CHARS} characters")
        try:
            CronSim(expression, datetime.now(zone))
        except CronSimError as e:
            raise InvalidInput(f"invalid cron expression {expression!r}: {e}") from None
        except (ValueError, IndexError, KeyError) as e:  # what its parser lets through
            raise InvalidInput(f"invalid cron expression {expression!r}: {e}") from None
        return cls(expression, zone)

    def _ticks(self, start: datetime, *, reverse: bool = False) -> Iterator[datetime]:
        for tick in CronSim(self.expression, start.astimezone(self.zone), reverse=reverse):
            yield tick.astimezone(UTC)

    def next_after(self, moment: datetime) -> datetime | None:
        """The first tick strictly after ``moment``; ``None`` when there is none within 50 years."""
        return next(self._ticks(moment), None)

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The last tick at ``moment`` or before it (``None``: none in the 50 years before)."""
        # Reverse iteration yields ticks strictly before its start, a whole second (cronsim
        # drops fractions; releases differ on whether that whole second itself counts).
        start = moment.replace(microsecond=0) + _SECOND
        return next(self._ticks(start, reverse=True), None)

    def upcoming(self, moment: datetime, count: int) -> list[datetime]:
        """The next ``count`` ticks strictly after ``moment``."""
        return list(islice(self._ticks(moment), count))
