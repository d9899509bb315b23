"""The SQLAlchemy examples of docs/async.md, on the test database."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL, create_engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy_orders import place_order, place_order_async

from fairsched import AsyncClient, Client, QueueSettings

ANN = {"id": 1, "email": "ann@example.com", "tenant": "acme"}
BO = {"id": 1, "email": "bo@example.com", "tenant": "acme"}


def psycopg_url(dsn: str) -> URL:
    params = conninfo_to_dict(dsn)
    port = params.get("port")
    return URL.create(
        "postgresql+psycopg",
        username=params.get("user"),
        password=params.get("password"),
        host=params.get("host"),
        port=int(port) if port else None,
        database=params.get("dbname"),
    )


@pytest.fixture
def orders(fresh_db: str, db: psycopg.Connection) -> str:
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, email text NOT NULL)")
    with Client(fresh_db) as client:
        client.declare_queue("receipts", QueueSettings())
    return fresh_db


def committed(db: psycopg.Connection) -> list[tuple[object, ...]]:
    return db.execute("SELECT j.id, o.email FROM fairsched.jobs j JOIN orders o ON true").fetchall()


def test_a_sync_sessions_transaction_carries_the_job(orders: str, db: psycopg.Connection) -> None:
    engine = create_engine(psycopg_url(orders))
    with Client(orders) as client:
        with Session(engine) as session, session.begin():
            job_id = place_order(session, client, ANN)
        with pytest.raises(IntegrityError), Session(engine) as session, session.begin():
            place_order(session, client, BO)
        with Session(engine) as session:
            place_order(session, client, {**ANN, "id": 2})
            session.rollback()
    engine.dispose()
    assert committed(db) == [(job_id, "ann@example.com")]


@pytest.mark.asyncio
async def test_an_async_sessions_transaction_carries_the_job(orders: str, db: psycopg.Connection) -> None:
    engine = create_async_engine(psycopg_url(orders))
    async with AsyncClient(orders) as client:
        async with AsyncSession(engine) as session, session.begin():
            job_id = await place_order_async(session, client, ANN)
        with pytest.raises(IntegrityError):
            async with AsyncSession(engine) as session, session.begin():
                await place_order_async(session, client, BO)
        async with AsyncSession(engine) as session:
            await place_order_async(session, client, {**ANN, "id": 2})
            await session.rollback()
    await engine.dispose()
    assert committed(db) == [(job_id, "ann@example.com")]
