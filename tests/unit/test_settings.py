"""Settings: the TOML file, then FAIRSCHED_* variables; broken configs name the key and the file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import EXAMPLE_CONFIG, cli, one_error_line

from fairsched import ConfigError, load_settings


@pytest.fixture(autouse=True)
def no_fairsched_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests start without any FAIRSCHED_* variable of the surrounding shell."""
    for key in [k for k in os.environ if k.startswith("FAIRSCHED_")]:
        monkeypatch.delenv(key)
    yield


@pytest.fixture
def toml(tmp_path: Path) -> Path:
    path = tmp_path / "fairsched.toml"
    path.write_text(
        'database_url = "postgresql://file-host/app"\n'
        "poll_interval_seconds = 3\n"
        "[queues.emails]\nlease_seconds = 30\nmax_attempts = 4\n"
        "[tenants.acme]\nweight = 5\n"
    )
    return path


def test_the_example_config_loads() -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    assert settings.database_url is None
    assert sorted(settings.queues) == ["emails", "reports"]
    assert settings.queues["reports"].notify is False
    assert settings.tenants["acme"].weight == 5


def test_file_values_then_defaults(toml: Path) -> None:
    settings = load_settings(toml)
    assert settings.database_url == "postgresql://file-host/app"
    assert settings.poll_interval_seconds == 3
    emails = settings.queues["emails"]
    assert (emails.lease_seconds, emails.max_attempts, emails.unknown_max_attempts) == (30, 4, 3)


def test_environment_overrides_the_file(toml: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRSCHED_DATABASE_URL", "postgresql://env-host/app")
    monkeypatch.setenv("FAIRSCHED_QUEUES__EMAILS__LEASE_SECONDS", "60")
    monkeypatch.setenv("FAIRSCHED_QUEUES__REPORTS__NOTIFY", "false")
    settings = load_settings(toml)
    assert settings.database_url == "postgresql://env-host/app"
    # A nested variable overrides one key and keeps the file's others.
    assert (settings.queues["emails"].lease_seconds, settings.queues["emails"].max_attempts) == (60, 4)
    assert settings.queues["reports"].notify is False
    assert settings.poll_interval_seconds == 3


def test_config_file_from_the_environment(toml: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRSCHED_CONFIG", str(toml))
    assert load_settings().queues["emails"].max_attempts == 4
    assert load_settings(EXAMPLE_CONFIG).queues["emails"].max_attempts == 8


def test_no_file_means_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRSCHED_RECOVERY_BATCH", "50")
    settings = load_settings()
    assert (settings.database_url, settings.queues, settings.recovery_batch) == (None, {}, 50)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[queues.emails\nlease_seconds = 1\n", "not valid TOML"),
        (
            "[queues.emails]\nlease_secnods = 30\n",
            "queues.emails.lease_secnods: Extra inputs are not permitted",
        ),
        (
            "[queues.emails]\nlease_seconds = -1\n",
            "queues.emails.lease_seconds: Input should be greater than 0",
        ),
        (
            "[queues.emails]\nmax_attempts = 'many'\n",
            "queues.emails.max_attempts: Input should be a valid integer",
        ),
        ("[queues.'bad name']\n", "queues.bad name"),
        (
            "[tenants.acme]\nweight = 0\n",
            "tenants.acme.weight: Input should be greater than or equal to 0.001",
        ),
        ("databse_url = 'postgresql://x'\n", "databse_url: Extra inputs are not permitted"),
    ],
)
def test_broken_config_names_the_key_and_the_file(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ")
    assert expected in message


def test_every_bad_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[queues.a]\nlease_seconds = -1\nbogus = 1\n[queues.b]\nmax_attempts = 0\n")
    result = cli(None, "config", "check", str(path))
    assert result.exit_code == 1
    line = one_error_line(result)
    for key in ("queues.a.lease_seconds", "queues.a.bogus", "queues.b.max_attempts", str(path)):
        assert key in line


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    result = cli(None, "config", "check", str(missing))
    assert result.exit_code == 1
    assert one_error_line(result) == f"error: {missing}: config file not found"


def test_bad_environment_value_is_named(toml: Path) -> None:
    result = cli(None, "config", "check", str(toml), FAIRSCHED_QUEUES__EMAILS__LEASE_SECONDS="-5")
    assert result.exit_code == 1
    assert "queues.emails.lease_seconds: Input should be greater than 0 (got '-5')" in one_error_line(result)
