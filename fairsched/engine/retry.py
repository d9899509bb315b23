"""Failure classification: what kind of failure an exception is, and how it is recorded."""

from __future__ import annotations

from fairsched.engine.lease import FailureKind
from fairsched.errors import PermanentError, RetryableError

MAX_CODE_CHARS = 128

_RETRYABLE: tuple[type[BaseException], ...] = (
    RetryableError,
    TimeoutError,
    ConnectionError,
)


def classify(error: BaseException) -> FailureKind:
    """Permanent errors go straight to dead; transient ones retry; the rest get a small budget."""
    if isinstance(error, PermanentError):
        return FailureKind.PERMANENT
    if isinstance(error, _RETRYABLE):
        return FailureKind.RETRYABLE
    return FailureKind.UNKNOWN


def error_code(error: BaseException) -> str:
    """A short stable code for metrics and the audit trail: the exception's qualified name."""
    cls = type(error)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return name[:MAX_CODE_CHARS]


def error_text(error: BaseException, max_chars: int) -> str:
    """The error message, bounded in size."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
