"""The ``[web]`` settings section (``FAIRSCHED_WEB__*`` variables): who may look, who may act."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

BIND_DEFAULT = "127.0.0.1:8080"


class WebSettings(BaseModel):
    """Access and behaviour of ``fairsched web``.

    Without ``token`` and ``trusted_header`` the dashboard answers only on a loopback
    address. Actions (weights, caps, replay, discard, unblock, skip) are off unless
    ``actions`` is true; payload content is never shown unless ``payload_preview`` is true.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    bind: str = Field(BIND_DEFAULT, max_length=300, description="host:port to listen on")
    token: SecretStr | None = Field(
        None, min_length=16, max_length=256, description="a secret users log in with (16 to 256 characters)"
    )
    trusted_header: str | None = Field(
        None,
        pattern=r"^[A-Za-z][A-Za-z0-9-]{0,62}$",
        description="a header a reverse proxy sets to the authenticated user's name (e.g. X-Forwarded-User)",
    )
    actions: bool = Field(False, description="allow changes (weights, caps, dead jobs, aggregates)")
    payload_preview: bool = Field(False, description="show payload content (redacted to its shape otherwise)")
    refresh_seconds: float = Field(2.0, ge=0.5, le=60, description="how often pages refresh their figures")

    @field_validator("bind")
    @classmethod
    def _bind(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"give host:port, e.g. {BIND_DEFAULT}")
        return value

    def host_port(self) -> tuple[str, int]:
        """``bind`` split into host and port (``[::1]:8080`` → ``::1``, 8080)."""
        host, _sep, port = self.bind.rpartition(":")
        return host.strip("[]"), int(port)
