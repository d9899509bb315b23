"""Reading forms and query values with bounds: a body over :data:`MAX_BODY_BYTES`, too many
fields, or a value that is not what the field takes is refused before anything changes."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.requests import Request

from fairsched.errors import InvalidInput

MAX_BODY_BYTES = 16 * 1024
MAX_FIELDS = 20
MAX_JOB_ID = 2**63 - 1


async def form_fields(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (the last value of a
    repeated field wins); 413 past :data:`MAX_BODY_BYTES`, 415 for another type."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPException(415, "send the form as application/x-www-form-urlencoded")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HTTPException(413, f"a form is at most {MAX_BODY_BYTES} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise HTTPException(413, f"a form is at most {MAX_BODY_BYTES} bytes")
    try:
        pairs = parse_qsl(body.decode("utf-8"), max_num_fields=MAX_FIELDS, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise InvalidInput(f"the form is not valid UTF-8 form data of at most {MAX_FIELDS} fields") from None
    return dict(pairs)


def job_id(text: str) -> int:
    """A job id from a URL or form: a positive whole number.

    >>> job_id("42")
    42
    """
    stripped = text.strip()
    if not stripped.isdigit() or len(stripped) > 19 or not 1 <= int(stripped) <= MAX_JOB_ID:
        raise InvalidInput(f"job id must be a positive whole number, got {text[:40]!r}")
    return int(stripped)


def page_number(values: Mapping[str, str]) -> int:
    """``page``: a whole number from 1 to 100000 (default 1)."""
    text = values.get("page", "1")
    if not text.isdigit() or not 1 <= int(text[:7]) <= 100_000:
        raise InvalidInput(f"page must be a whole number from 1 to 100000, got {text[:40]!r}")
    return int(text)


def optional(values: Mapping[str, str], name: str) -> str | None:
    """A filter value, or None when absent or empty."""
    value = values.get(name, "").strip()
    return value or None
