"""The fault tests find the PostgreSQL server binaries; no path is hard-coded."""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_support import server_bin_dir


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_pg_config_names_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = tmp_path / "pg" / "bin"
    executable(server / "initdb")
    executable(tmp_path / "path" / "pg_config", f"#!/bin/sh\necho {server}\n")
    monkeypatch.delenv("FAIRSCHED_PG_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert server_bin_dir() == server


def test_initdb_on_path_without_pg_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    initdb = executable(tmp_path / "other" / "initdb")
    monkeypatch.delenv("FAIRSCHED_PG_BIN", raising=False)
    monkeypatch.setenv("PATH", str(initdb.parent))
    assert server_bin_dir() == initdb.parent


def test_the_embedded_servers_binaries_when_nothing_else_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAIRSCHED_PG_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert (server_bin_dir() / "initdb").is_file()


def test_the_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRSCHED_PG_BIN", str(tmp_path))
    assert server_bin_dir() == tmp_path
