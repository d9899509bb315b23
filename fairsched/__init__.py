"""fairsched: a multi-tenant, fair job scheduler on PostgreSQL."""

from fairsched.asyncclient import AsyncClient
from fairsched.client import Client
from fairsched.engine.enqueue import JobSpec
from fairsched.engine.lease import FailureKind, Lease
from fairsched.errors import (
    ConfigError,
    FairschedError,
    InvalidInput,
    JobCancelled,
    JobFinished,
    JobNotFound,
    LeaseLost,
    PermanentError,
    RetryableError,
    UnknownQueue,
)
from fairsched.settings import QueueSettings, Settings, load_settings
from fairsched.worker.app import App, Job

__version__ = "0.1.0"

__all__ = [
    "App",
    "AsyncClient",
    "Client",
    "ConfigError",
    "FailureKind",
    "FairschedError",
    "InvalidInput",
    "Job",
    "JobCancelled",
    "JobFinished",
    "JobNotFound",
    "JobSpec",
    "Lease",
    "LeaseLost",
    "PermanentError",
    "QueueSettings",
    "RetryableError",
    "Settings",
    "UnknownQueue",
    "__version__",
    "load_settings",
]
