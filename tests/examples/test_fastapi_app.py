"""The FastAPI example of docs/async.md, through httpx's ASGI transport, inside the
application's lifespan (the AsyncClient and the pool open and close with it)."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest
from fastapi_app import make_app

from fairsched import Client, QueueSettings


@pytest.mark.asyncio
async def test_an_order_and_its_job_commit_together_or_not_at_all(
    fresh_db: str, db: psycopg.Connection
) -> None:
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, email text NOT NULL)")
    with Client(fresh_db) as client:
        client.declare_queue("receipts", QueueSettings())
    app = make_app(fresh_db)
    async with app.router.lifespan_context(app) as state:

        async def served(scope: Any, receive: Any, send: Any) -> None:
            # as an ASGI server does: each request's scope carries the lifespan's state
            await app({**scope, "state": dict(state)}, receive, send)

        transport = httpx.ASGITransport(app=served)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            placed = await http.post("/orders", json={"id": 1, "email": "ann@example.com", "tenant": "acme"})
            assert placed.status_code == 201
            again = await http.post("/orders", json={"id": 1, "email": "bo@example.com", "tenant": "acme"})
            assert again.status_code == 409
    jobs = db.execute("SELECT id, payload, tenant FROM fairsched.jobs").fetchall()
    assert jobs == [(placed.json()["job"], {"order": 1}, "acme")]
    assert db.execute("SELECT id, email FROM orders").fetchall() == [(1, "ann@example.com")]
