"""Testing helpers for applications that use fairsched.

- :func:`run_job` runs one job of an application's handler through the real claim,
  heartbeat and completion path on a test database, and says what a worker would have
  recorded (:class:`JobOutcome`).
- :func:`drain` runs a queue's claimable jobs the same way, one at a time, until none is left.
- :func:`assert_enqueued` and :func:`refute_enqueued` check what application code enqueued,
  inside the test's own transaction.
- :mod:`fairsched.testing.pytest_plugin` gives each test a migrated database of its own
  (``fairsched_client``, ``fairsched_conn``, ``fairsched_dsn``).

See ``docs/testing.md``.
"""

from fairsched.testing.enqueued import EnqueuedJob, assert_enqueued, refute_enqueued
from fairsched.testing.run import JobOutcome, RunError, RunStatus, drain, run_job

__all__ = [
    "EnqueuedJob",
    "JobOutcome",
    "RunError",
    "RunStatus",
    "assert_enqueued",
    "drain",
    "refute_enqueued",
    "run_job",
]
