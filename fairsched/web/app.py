"""The ASGI application: routes, rendering, login, error pages and response headers.

Handlers run the database reads in Starlette's thread pool over one
:class:`~fairsched.Client` (operator session limits). Pages render on the server (Jinja2,
autoescaped); a page's live part is re-fetched as a fragment (``?fragment=1``) every
``web.refresh_seconds`` by ``static/live.js``, and the queue page's share chart polls
``shares.json``. Every error becomes a page (or a short text for fragments) with its
status: 400 bad input, 401 not logged in, 403 not allowed, 404 unknown, 413 too large,
503 database unavailable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jinja2
from psycopg import errors as pg_errors
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from fairsched import Client
from fairsched.errors import DatabaseError, FairschedError, InvalidInput, JobNotFound, UnknownQueue
from fairsched.observe.snapshot import ExporterSettings
from fairsched.settings import Settings
from fairsched.web import auth
from fairsched.web.forms import form_fields
from fairsched.web.settings import WebSettings

log = logging.getLogger(__name__)

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass
class Web:
    """What every handler shares: the settings, the client, the scrape limits, templates."""

    settings: Settings
    client: Client
    limits: ExporterSettings
    templates: jinja2.Environment

    @property
    def web(self) -> WebSettings:
        return self.settings.web

    def render(
        self, request: Request, template_name: str, http_status: int = 200, **context: Any
    ) -> HTMLResponse:
        """Render a page (or with ``?fragment=1`` its live part only) with the common context."""
        user: auth.User | None = request.scope.get("fairsched.user")
        csrf = auth.csrf_token(request)
        fragment = request.query_params.get("fragment") == "1"
        template = self.templates.get_template(template_name)
        context.update(
            user=user,
            csrf=csrf,
            actions=self.web.actions,
            refresh_ms=int(self.web.refresh_seconds * 1000),
            request=request,
            fragment=fragment,
        )
        if fragment and "live" in template.blocks:
            body = "".join(template.blocks["live"](template.new_context(context)))
        else:
            body = template.render(context)
        response = HTMLResponse(body, status_code=http_status)
        if auth.CSRF_COOKIE not in request.cookies:
            response.set_cookie(
                auth.CSRF_COOKIE, csrf, httponly=True, samesite="strict", secure=_https(request)
            )
        return response

    async def read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(conn, *args, **kwargs)`` on a pooled connection in the thread pool."""

        def run() -> Any:
            with self.client.connection() as conn:
                return fn(conn, *args, **kwargs)

        return await run_in_threadpool(run)

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a client operation in the thread pool."""
        return await run_in_threadpool(fn, *args, **kwargs)


def _https(request: Request) -> bool:
    return request.url.scheme == "https"


def templates() -> jinja2.Environment:
    """The page templates, autoescaped, with the number formats the pages use."""
    from fairsched.web import formats

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fairsched.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(formats.FILTERS)
    return env


def create_app(settings: Settings, client: Client, limits: ExporterSettings | None = None) -> Starlette:
    """The dashboard for ``settings`` over ``client`` (which the caller closes)."""
    from fairsched.web import actions, pages

    web = Web(settings, client, limits or ExporterSettings(), templates())
    static = resources.files("fairsched.web") / "static"
    routes: list[BaseRoute] = [
        *pages.routes(web),
        *actions.routes(web),
        Route("/login", _login(web), methods=["GET", "POST"]),
        Route("/logout", _logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    errors = _errors(web)

    async def guard(request: Request, call_next: Callable[[Request], Any]) -> Response:
        if not request.url.path.startswith(("/static/", "/login")):
            try:
                request.scope["fairsched.user"] = auth.authenticate(request, settings.web)
            except auth.NotAuthenticated as e:
                return await errors(request, e)  # type: ignore[no-any-return]
        response: Response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    return Starlette(
        routes=routes,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=guard)],
        exception_handlers={
            kind: errors
            for kind in (Exception, HTTPException, FairschedError, auth.NotAuthenticated, auth.Forbidden)
        },
    )


def _login(web: Web) -> Callable[[Request], Any]:
    async def login(request: Request) -> Response:
        if request.method == "GET":
            return web.render(request, "login.html", wrong=False)
        fields = await form_fields(request)
        token = web.web.token
        if token is None or not auth.token_matches(fields.get("token", ""), web.web):
            return web.render(request, "login.html", http_status=401, wrong=True)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            auth.SESSION_COOKIE,
            auth.session_value(token.get_secret_value()),
            httponly=True,
            samesite="strict",
            secure=_https(request),
        )
        return response

    return login


async def _logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(auth.SESSION_COOKIE)
    return response


_STATUS: list[tuple[type[Exception], int]] = [
    (auth.NotAuthenticated, 401),
    (auth.Forbidden, 403),
    (UnknownQueue, 404),
    (JobNotFound, 404),
    (InvalidInput, 400),
    (DatabaseError, 503),
    (FairschedError, 400),
]


def _errors(web: Web) -> Callable[[Request, Exception], Any]:
    async def error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            status, message = exc.status_code, str(exc.detail)
        else:
            status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
            if isinstance(exc.__cause__, pg_errors.InsufficientPrivilege):
                status = 403  # the web's database role may not do this (docs/web.md)
            message = str(exc) if status != 500 else "unexpected error: see the server's log"
            if status == 500:
                log.error("web request failed: %s %s", request.method, request.url.path, exc_info=exc)
        if status == 401 and request.method == "GET" and request.query_params.get("fragment") != "1":
            return RedirectResponse("/login", status_code=303)
        if request.query_params.get("fragment") == "1" or request.url.path.endswith(".json"):
            response: Response = PlainTextResponse(message[:500], status_code=status)
        else:
            response = web.render(
                request, "error.html", http_status=status, status_code=status, message=message
            )
        response.headers.update(SECURITY_HEADERS)
        return response

    return error
