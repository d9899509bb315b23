"""Transactional enqueue from Django with its PostgreSQL psycopg 3 backend (docs/async.md):
the receipt job commits with the order, or rolls back with it."""

from __future__ import annotations

from django import db

from fairsched import Client


def place_order(client: Client, order_id: int, email: str, tenant: str) -> int:
    """Save an order and enqueue its receipt in one transaction; returns the job's id."""
    with db.transaction.atomic():
        with db.connection.cursor() as cursor:  # or Order.objects.create(...)
            cursor.execute("INSERT INTO orders (id, email) VALUES (%s, %s)", [order_id, email])
        # the psycopg 3 connection under Django's, inside the atomic block
        return client.enqueue("receipts", {"order": order_id}, tenant=tenant, conn=db.connection.connection)
