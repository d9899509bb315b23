"""The ``fairsched`` console script (``fairsched.cli.main:main``) and its command table:
every command registered on the root app of :mod:`fairsched.cli.root`, in the order
``--help`` lists them."""

from __future__ import annotations

from fairsched.cli import (
    aggregate,
    config,
    dead,
    job,
    jobs,
    monitor,
    policy,
    prune,
    role,
    run,
    schedule,
    tenant,
)
from fairsched.cli.bench import bench
from fairsched.cli.root import app, plain_help
from fairsched.cli.web import web

for command in (
    jobs.migrate,
    jobs.recover,
    prune.prune,
    jobs.enqueue,
    monitor.status,
    monitor.top,
    run.worker,
    run.exporter,
    run.demo,
    run.simulate,
    web,
    bench,
):
    app.command()(command)
app.add_typer(job.app, name="job")
app.add_typer(dead.app, name="dead")
app.add_typer(config.app, name="config")
app.add_typer(tenant.app, name="tenant")
app.add_typer(policy.app, name="policy")
app.add_typer(aggregate.app, name="aggregate")
app.add_typer(schedule.app, name="schedule")
app.add_typer(role.app, name="role")
plain_help(app)

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the console script."""
    app()


if __name__ == "__main__":
    main()
