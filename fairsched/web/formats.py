"""Jinja filters: ages, shares and numbers as the pages print them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any


def age(seconds: float | None) -> str:
    """A wait as a short duration.

    >>> age(0), age(4.2), age(75), age(7300), age(200000)
    ('-', '4.2s', '1m15s', '2h01m', '2d07h')
    """
    if not seconds:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{int(seconds // 86400)}d{int(seconds % 86400 // 3600):02d}h"


def percent(value: float | None) -> str:
    """A share as a percentage.

    >>> percent(0.256), percent(None)
    ('25.6%', '-')
    """
    return "-" if value is None else f"{value * 100:.1f}%"


def number(value: float | None) -> str:
    """A weight or rate without needless decimals.

    >>> number(2.0), number(0.5), number(None)
    ('2', '0.5', '-')
    """
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def when(value: datetime | None) -> str:
    """A timestamp to the second, UTC offset kept."""
    return "-" if value is None else value.isoformat(sep=" ", timespec="seconds")


FILTERS: dict[str, Callable[..., Any]] = {"age": age, "percent": percent, "number": number, "when": when}
