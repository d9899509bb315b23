"""A FastAPI application that enqueues a job in the transaction of a request's own
writes (docs/async.md): the order and its receipt job commit together, or neither does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypedDict

from fastapi import FastAPI, HTTPException, Request
from psycopg import errors
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from fairsched import AsyncClient


class Order(BaseModel):
    id: int
    email: str
    tenant: str


class State(TypedDict):
    fairsched: AsyncClient
    pool: AsyncConnectionPool


def make_app(dsn: str) -> FastAPI:
    """The application on database ``dsn`` (its own tables and fairsched's)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[State]:
        # one fairsched client and one pool of the application's own, for the app's life
        async with AsyncClient(dsn) as fairsched, AsyncConnectionPool(dsn, open=False) as pool:
            yield {"fairsched": fairsched, "pool": pool}

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders", status_code=201)
    async def place_order(order: Order, request: Request) -> dict[str, int]:
        fairsched: AsyncClient = request.state.fairsched
        pool: AsyncConnectionPool = request.state.pool
        try:
            async with pool.connection() as conn, conn.transaction():
                job_id = await fairsched.enqueue(
                    "receipts", {"order": order.id}, tenant=order.tenant, conn=conn
                )
                await conn.execute("INSERT INTO orders (id, email) VALUES (%s, %s)", (order.id, order.email))
        except errors.UniqueViolation:
            # the transaction rolled back: the receipt job went with it
            raise HTTPException(409, f"order {order.id} exists") from None
        return {"order": order.id, "job": job_id}

    return app
