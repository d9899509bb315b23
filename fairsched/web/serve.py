"""Running the dashboard: checks the access settings, opens the client, serves with uvicorn."""

from __future__ import annotations

from collections.abc import Callable

from fairsched import Client
from fairsched.db.connection import Role
from fairsched.errors import ConfigError
from fairsched.settings import Settings
from fairsched.web.auth import is_loopback
from fairsched.web.settings import WebSettings


def checked(settings: Settings, bind: str | None) -> Settings:
    """``settings`` with ``bind`` applied, or :class:`ConfigError` when the access settings
    would expose the dashboard: actions need a token or a trusted header, and so does any
    address but a loopback one."""
    web = settings.web
    if bind is not None:
        try:
            web = WebSettings.model_validate({**web.model_dump(), "bind": bind, "token": web.token})
        except ValueError as e:
            raise ConfigError(
                f"--bind {bind[:80]!r}: give host:port, e.g. 127.0.0.1:8080 ({e.__class__.__name__})"
            ) from None
    anonymous = web.token is None and web.trusted_header is None
    if anonymous and web.actions:
        raise ConfigError("web.actions needs web.token or web.trusted_header: set one (docs/web.md)")
    if anonymous and not is_loopback(web.host_port()[0]):
        raise ConfigError(
            f"{web.bind} is not a loopback address: set web.token or web.trusted_header first (docs/web.md)"
        )
    return settings.model_copy(update={"web": web})


def serve(settings: Settings, bind: str | None, on_listening: Callable[[str], None]) -> None:
    """Serve until interrupted."""
    import uvicorn

    from fairsched.web.app import create_app

    settings = checked(settings, bind)
    host, port = settings.web.host_port()
    with Client.from_settings(settings, role=Role.OPERATOR) as client:
        client.pool  # noqa: B018 - fail now, with the server's reason, if the database is not there
        app = create_app(settings, client)
        on_listening(f"http://{host}:{port}/")
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, server_header=False)
