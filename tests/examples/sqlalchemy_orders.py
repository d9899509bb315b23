"""Transactional enqueue from SQLAlchemy 2 sessions on the psycopg dialect, sync and
async (docs/async.md): the receipt job commits or rolls back with the session's work."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from fairsched import AsyncClient, Client

INSERT_ORDER = text("INSERT INTO orders (id, email) VALUES (:id, :email)")


def place_order(session: Session, client: Client, order: dict[str, Any]) -> int:
    """Add an order in the session's transaction and enqueue its receipt in it."""
    session.execute(INSERT_ORDER, {"id": order["id"], "email": order["email"]})
    conn = session.connection().connection.driver_connection  # the psycopg Connection
    return client.enqueue("receipts", {"order": order["id"]}, tenant=order["tenant"], conn=conn)


async def place_order_async(session: AsyncSession, client: AsyncClient, order: dict[str, Any]) -> int:
    """The same with an AsyncSession and the AsyncClient."""
    await session.execute(INSERT_ORDER, {"id": order["id"], "email": order["email"]})
    raw = await (await session.connection()).get_raw_connection()
    conn = raw.driver_connection  # the psycopg AsyncConnection
    return await client.enqueue("receipts", {"order": order["id"]}, tenant=order["tenant"], conn=conn)
