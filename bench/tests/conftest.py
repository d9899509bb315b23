"""The bench's tests use the suite's database fixtures."""

from tests.conftest import client, db, empty_db, fresh_db, server_dsn, template_copies, template_db, workers

__all__ = ["client", "db", "empty_db", "fresh_db", "server_dsn", "template_copies", "template_db", "workers"]
