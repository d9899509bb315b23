"""An example application's jobs: each order placed gets a receipt by email."""

from __future__ import annotations

import psycopg

from fairsched import App, Client, Job, PermanentError

app = App()


class Mailer:
    """Stands in for the mail service: what was sent, and whether it is down."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.down = False

    def send(self, to: str, text: str, *, idempotency_key: str) -> None:
        if self.down:
            raise TimeoutError("the mail service did not answer")  # retried with backoff
        self.sent.append(to)


mailer = Mailer()


@app.handler("receipts")
def send_receipt(job: Job) -> None:
    order = job.payload
    if "email" not in order:
        raise PermanentError(f"order {order['order']} has no email address")  # dead at once
    text = f"Thank you for order {order['order']}."
    job.progress("rendered")
    mailer.send(order["email"], text, idempotency_key=job.idempotency_key)
    job.progress("sent")


def place_order(
    client: Client, *, tenant: str, order: int, email: str, conn: psycopg.Connection | None = None
) -> int:
    """Application code: enqueue the order's receipt, in the caller's transaction when
    ``conn`` is given (with the order's own writes)."""
    return client.enqueue("receipts", {"order": order, "email": email}, tenant=tenant, conn=conn)
