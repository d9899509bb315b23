"""fairsched: a multi-tenant, fair job scheduler on PostgreSQL."""

from fairsched.app import App, Job
from fairsched.client import Client
from fairsched.enqueue import JobSpec
from fairsched.errors import (
    ConfigError,
    FairschedError,
    InvalidInput,
    LeaseLost,
    PermanentError,
    RetryableError,
    UnknownQueue,
)
from fairsched.lease import FailureKind, Lease
from fairsched.settings import QueueSettings, Settings, load_settings

__version__ = "0.1.0"

__all__ = [
    "App",
    "Client",
    "ConfigError",
    "FailureKind",
    "FairschedError",
    "InvalidInput",
    "Job",
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
