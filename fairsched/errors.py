"""Errors fairsched raises; each message says what to do about it."""

from __future__ import annotations


class FairschedError(Exception):
    """Base of every error fairsched raises on purpose."""


class ConfigError(FairschedError):
    """The configuration file or environment is invalid."""


class InvalidInput(FairschedError, ValueError):
    """An argument was rejected before anything was written."""


class UnknownQueue(InvalidInput):
    """The queue is not declared in the database."""

    def __init__(self, queue: str) -> None:
        super().__init__(
            f"unknown queue {queue!r}: declare it in the config file and run `fairsched config apply`"
        )
        self.queue = queue


class PayloadTooLarge(InvalidInput):
    """The payload exceeds the configured size limit."""


class DatabaseError(FairschedError):
    """PostgreSQL refused or failed an operation."""


class DatabaseUnavailable(DatabaseError):
    """PostgreSQL could not be reached; retrying later may succeed."""


class NotMigrated(DatabaseError):
    """The fairsched schema is missing or out of date."""


class MigrationError(DatabaseError):
    """A migration could not be applied."""


class JobNotFound(FairschedError, LookupError):
    """No job with that id is in the state the operation needs."""


class JobFinished(FairschedError):
    """The job already finished (succeeded, dead, discarded or cancelled): nothing to change."""


class PermanentError(Exception):
    """Raise from a handler when retrying cannot help: the job goes straight to dead."""

    code = "permanent"


class RetryableError(Exception):
    """Raise from a handler for transient failures (timeouts, outages): retried with backoff."""

    code = "retryable"


class LeaseLost(FairschedError):
    """The job's lease expired or was taken over; the handler should stop."""


class JobCancelled(FairschedError):
    """A cancel was requested for the running job; the handler should stop. Let it
    propagate: the worker then records the job ``cancelled``."""
