"""The [web] settings are bounded, and ``fairsched web`` refuses to expose a dashboard
nobody logs in to: on an address other than a loopback one, or with actions on."""

from __future__ import annotations

import pytest

from fairsched import load_settings
from fairsched.errors import ConfigError
from fairsched.web.serve import checked


@pytest.mark.parametrize(
    "variable, value",
    [
        ("FAIRSCHED_WEB__TOKEN", "short"),
        ("FAIRSCHED_WEB__TOKEN", "x" * 257),
        ("FAIRSCHED_WEB__TRUSTED_HEADER", "X-User: evil"),
        ("FAIRSCHED_WEB__BIND", "localhost"),
        ("FAIRSCHED_WEB__BIND", "0.0.0.0:70000"),
        ("FAIRSCHED_WEB__REFRESH_SECONDS", "0.01"),
        ("FAIRSCHED_WEB__REFRESH_SECONDS", "inf"),
        ("FAIRSCHED_WEB__ACTIONS", "maybe"),
        ("FAIRSCHED_WEB__NOSUCH", "1"),
    ],
)
def test_a_bad_web_setting_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=r"web\."):
        load_settings()


def test_nobody_configured_serves_loopback_read_only_only(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    assert checked(settings, None).web.bind == "127.0.0.1:8080"
    assert checked(settings, "[::1]:9000").web.host_port() == ("::1", 9000)
    with pytest.raises(ConfigError, match="not a loopback address"):
        checked(settings, "0.0.0.0:8080")
    with pytest.raises(ConfigError, match="host:port"):
        checked(settings, "nowhere")
    monkeypatch.setenv("FAIRSCHED_WEB__ACTIONS", "true")
    with pytest.raises(ConfigError, match=r"needs web\.token or web\.trusted_header"):
        checked(load_settings(), None)


def test_a_token_or_a_proxy_header_may_serve_anywhere_with_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRSCHED_WEB__ACTIONS", "true")
    monkeypatch.setenv("FAIRSCHED_WEB__TOKEN", "a" * 32)
    served = checked(load_settings(), "0.0.0.0:8080").web
    assert served.actions and served.token is not None and served.token.get_secret_value() == "a" * 32
    monkeypatch.delenv("FAIRSCHED_WEB__TOKEN")
    monkeypatch.setenv("FAIRSCHED_WEB__TRUSTED_HEADER", "X-Forwarded-User")
    assert checked(load_settings(), "10.0.0.5:8080").web.trusted_header == "X-Forwarded-User"
