"""Schema, recovery and enqueue: fairsched migrate, recover, enqueue."""

from __future__ import annotations

import typer

from fairsched.cli.root import ConfigOption, JsonOption, open_client, parse_payload, parse_when, print_json


def migrate(config: str | None = ConfigOption) -> None:
    """Apply pending schema migrations: the engine's, then each installed policy's (listed
    as policy:NNN_name)."""
    with open_client(config) as client:
        applied = client.migrate()
    typer.echo(f"applied: {', '.join(applied)}" if applied else "schema is up to date")


def recover(config: str | None = ConfigOption, as_json: bool = JsonOption) -> None:
    """Sweep expired leases once (back to pending with backoff, or to dead), and raise
    the claim heads past claimed jobs. A queue that could not be swept is named, with
    the reason, and the exit code is 1; the other queues were swept."""
    with open_client(config) as client:
        result = client.recover()
        heads = client.heads_refresh()
    if as_json:
        print_json(
            {"retried": result.retried, "dead": result.dead, "heads_raised": heads, "failed": result.failed}
        )
    else:
        typer.echo(f"expired leases recovered: {result.retried} back to pending, {result.dead} dead")
        typer.echo(f"claim heads raised: {heads}")
        for queue, error in sorted(result.failed.items()):
            typer.echo(f"error: queue {queue} not recovered: {error}", err=True)
    if result.failed:
        raise typer.Exit(1)


def enqueue(
    queue: str = typer.Option(..., "--queue", help="queue name (declared in the database)"),
    tenant: str = typer.Option(..., "--tenant", help="tenant the job belongs to"),
    payload: str = typer.Option("{}", "--payload", help="JSON text, @file or @- for stdin"),
    priority: int = typer.Option(0, "--priority", help="higher runs first"),
    aggregate_key: str | None = typer.Option(None, "--aggregate-key", help="aggregate the job belongs to"),
    aggregate_seq: int | None = typer.Option(None, "--aggregate-seq", help="order within the aggregate"),
    run_at: str | None = typer.Option(None, "--run-at", help="not before this ISO 8601 time (with zone)"),
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="default: the queue's"),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key", help="dedupe per queue+tenant"),
    config: str | None = ConfigOption,
) -> None:
    """Enqueue one job and print its id (the existing id for a known idempotency key)."""
    body = parse_payload(payload)
    when = parse_when(run_at)
    with open_client(config) as client:
        job_id = client.enqueue(
            queue,
            body,
            tenant=tenant,
            priority=priority,
            aggregate_key=aggregate_key,
            aggregate_seq=aggregate_seq,
            run_at=when,
            max_attempts=max_attempts,
            idempotency_key=idempotency_key,
        )
    typer.echo(job_id)
