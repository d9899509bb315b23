"""Who is asking, and whether a change may be made: token or trusted-header login, CSRF.

A user logs in with the ``web.token`` setting (the login form sets a session cookie
holding a keyed hash of the token, never the token; scripts may send
``Authorization: Bearer <token>``), or a reverse proxy that authenticated them names them
in the ``web.trusted_header`` header. Without either the dashboard serves loopback
addresses only, read-only. Every change is a POST carrying the ``csrf`` form field, which
must equal the ``fairsched_csrf`` cookie (double submit; both cookies are ``SameSite=Strict``),
from a request whose ``Origin``, when sent, is this dashboard.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import unicodedata
from dataclasses import dataclass

from starlette.requests import Request

from fairsched.web.settings import WebSettings

SESSION_COOKIE = "fairsched_session"
CSRF_COOKIE = "fairsched_csrf"
CSRF_FIELD = "csrf"
MAX_USER_CHARS = 200
"""A trusted header's user name longer than this is refused."""


class NotAuthenticated(Exception):
    """No valid token, session or trusted header."""


class Forbidden(Exception):
    """Authenticated, but this request may not change anything (actions off, bad CSRF)."""


@dataclass(frozen=True)
class User:
    """Who is asking; ``name`` is what the audit trail records (``by = "web:<name>"``)."""

    name: str

    @property
    def by(self) -> str:
        return f"web:{self.name}"


def session_value(token: str) -> str:
    """The session cookie's value for ``token``: a keyed hash, so the cookie never holds it."""
    return hmac.new(token.encode(), b"fairsched web session", hashlib.sha256).hexdigest()


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) only answers on this machine.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def authenticate(request: Request, settings: WebSettings) -> User:
    """The user behind ``request``, or :class:`NotAuthenticated`."""
    if settings.trusted_header:
        value = request.headers.get(settings.trusted_header)
        if value:
            return User(_user_name(value))
    if settings.token is not None:
        token = settings.token.get_secret_value()
        bearer = request.headers.get("authorization", "")
        if bearer.startswith("Bearer ") and hmac.compare_digest(bearer[7:].encode(), token.encode()):
            return User("token")
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), session_value(token).encode()):
            return User("token")
    if settings.token is None and settings.trusted_header is None:
        return User("local")
    raise NotAuthenticated


def _user_name(value: str) -> str:
    if len(value) > MAX_USER_CHARS or any(unicodedata.category(ch).startswith("C") for ch in value):
        raise NotAuthenticated
    return value


def token_matches(given: str, settings: WebSettings) -> bool:
    """Whether the login form's ``given`` token is the configured one."""
    if settings.token is None:
        return False
    return hmac.compare_digest(given.encode(), settings.token.get_secret_value().encode())


def csrf_token(request: Request) -> str:
    """The request's CSRF cookie value, or a new one (set by the page's response)."""
    return request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(32)


def check_change(request: Request, settings: WebSettings, form_csrf: str) -> None:
    """Refuse (:class:`Forbidden`) a change when actions are off, the CSRF field does not
    match its cookie, or the request came from another origin."""
    if not settings.actions:
        raise Forbidden("actions are off: set web.actions = true (docs/web.md)")
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not cookie or not form_csrf or not hmac.compare_digest(cookie.encode(), form_csrf.encode()):
        raise Forbidden("the form's CSRF field is missing or stale: reload the page and try again")
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        raise Forbidden(f"a change from another origin ({origin[:80]}) is refused")
