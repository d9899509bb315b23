"""Queue settings the built-in policies keep in a column of ``fairsched.queues``: the
columns the engine's first migrations created and the policies' migrations adopted
(``aging_interval_seconds``, ``charge``, ``tenant_cap``, ``serial_gap``,
``serial_poison``). Each is a :class:`~fairsched.policy.Setting` like any other: its
column's default is the setting's, and removing a value puts the default back.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from pydantic import TypeAdapter, ValidationError

from fairsched.errors import InvalidInput
from fairsched.policy import Setting

TABLE = "fairsched.queues"

_SHOWN_CHARS = 40
"""A refused value is shown up to this many characters."""


def queue_column(name: str, kind: Any, *, default: Any, example: str) -> Setting:
    """The queue setting ``name``, kept in the column of that name: values of type ``kind``
    (a type pydantic validates, bounds included), ``default`` where none is given."""
    adapter: TypeAdapter[Any] = TypeAdapter(kind)
    column = sql.Identifier(name)
    read_sql = sql.SQL("SELECT name, {} FROM fairsched.queues ORDER BY name").format(column)
    set_sql = sql.SQL("UPDATE fairsched.queues SET {} = %(value)s, updated_at = now() WHERE name = %(queue)s")
    reset_sql = sql.SQL("UPDATE fairsched.queues SET {} = DEFAULT, updated_at = now() WHERE name = %(queue)s")
    set_value, set_default = set_sql.format(column), reset_sql.format(column)

    def parse(value: object) -> Any:
        try:
            return adapter.validate_python(value)
        except ValidationError as e:
            shown = value[:_SHOWN_CHARS] if isinstance(value, str) else value
            raise InvalidInput(f"{name}: {e.errors()[0]['msg']} (got {shown!r})") from None

    def read(conn: psycopg.Connection) -> list[tuple[str, str | None, Any]]:
        rows = conn.execute(read_sql).fetchall()
        return [(queue, None, value) for queue, value in rows if value != default]

    def write(conn: psycopg.Connection, queue: str, tenant: str | None, value: Any) -> None:
        if value is None:
            conn.execute(set_default, {"queue": queue})
        else:
            conn.execute(set_value, {"queue": queue, "value": value})

    return Setting(
        name=name,
        levels=("queue",),
        example=example,
        table=TABLE,
        parse=parse,
        read=read,
        write=write,
        default=default,
    )
