"""Config file ↔ database: apply (top-level tenants included), diff, export round trip."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import psycopg
import pytest
from cli_support import EXAMPLE_CONFIG, cli, one_error_line
from ops_support import config_state

from fairsched.config.compare import toml_key, toml_string

CONFIG = """
[queues.mail]
policies = ["weighted", "aging"]
lease_seconds = 20
tenant_cap = 3

[queues.mail.tenants.acme]
weight = 4
cap = 2

[queues."batch.v2"]
policies = ["fifo"]

[tenants.acme]
weight = 9

[tenants.globex]
weight = 2

[tenants.initech]
weight = 1
"""


def write(tmp_path: Path, text: str, name: str = "fairsched.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, "utf-8")
    return path


def tenant_rows(db: psycopg.Connection) -> list[tuple[object, ...]]:
    return db.execute(
        "SELECT queue_name, tenant, weight, cap FROM fairsched.tenant_shares ORDER BY 1, 2"
    ).fetchall()


def test_apply_writes_top_level_tenants_to_weighted_queues_only(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = write(tmp_path, CONFIG)
    result = cli(fresh_db, "config", "apply", str(path))
    assert result.exit_code == 0, result.output
    # acme: the queue's own entry wins; globex inherited; initech weighs the default 1,
    # so no row is created for it; the fifo queue gets no tenants.
    assert tenant_rows(db) == [("mail", "acme", 4.0, 2), ("mail", "globex", 2.0, None)]

    # A live change to an inherited tenant is put back by the next apply, even to the default.
    db.execute("UPDATE fairsched.tenant_shares SET weight = 7 WHERE tenant = 'globex'")
    db.execute(
        "INSERT INTO fairsched.tenant_shares (queue_name, tenant, weight) VALUES ('mail', 'initech', 3)"
    )
    assert cli(fresh_db, "config", "apply", str(path)).exit_code == 0
    assert tenant_rows(db) == [
        ("mail", "acme", 4.0, 2),
        ("mail", "globex", 2.0, None),
        ("mail", "initech", 1.0, None),
    ]


def test_diff_names_each_difference_and_exit_code_is_opt_in(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = write(tmp_path, CONFIG)
    before = cli(fresh_db, "config", "diff", str(path), "--json")
    assert before.exit_code == 0, before.output
    assert sorted(d["key"] for d in json.loads(before.stdout)) == ["queues.batch.v2", "queues.mail"]

    assert cli(fresh_db, "config", "apply", str(path)).exit_code == 0
    same = cli(fresh_db, "config", "diff", str(path), "--exit-code")
    assert same.exit_code == 0 and same.stdout.strip() == f"{path}: the database matches"

    db.execute("UPDATE fairsched.queues SET lease_seconds = 45, policies = '{fifo}' WHERE name = 'mail'")
    db.execute("UPDATE fairsched.tenant_shares SET weight = 3 WHERE tenant = 'globex'")
    db.execute("INSERT INTO fairsched.tenant_shares (queue_name, tenant, cap) VALUES ('mail', 'hooli', 5)")
    db.execute("INSERT INTO fairsched.queues (name) VALUES ('legacy')")
    changed = cli(fresh_db, "config", "diff", str(path))
    assert changed.exit_code == 0, changed.output
    lines = changed.stdout.splitlines()
    assert "queues.mail.lease_seconds: file 20 | database 45" in lines
    assert "queues.mail.policies: file weighted,aging | database fifo" in lines
    # With fifo in the database the file's stack still decides which tenants the file gives.
    assert "queues.mail.tenants.globex: file weight 2, cap none | database weight 3, cap none" in lines
    assert "queues.mail.tenants.hooli: file - | database weight 1, cap 5 (config apply keeps it)" in lines
    assert "queues.legacy: file - | database declared (config apply keeps it)" in lines
    assert cli(fresh_db, "config", "diff", str(path), "--exit-code").exit_code == 1


def test_export_is_accepted_by_check_and_round_trips(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path, empty_db: str
) -> None:
    assert cli(fresh_db, "config", "apply", str(EXAMPLE_CONFIG)).exit_code == 0
    hostile = 'evil"; DROP TABLE x; --\n\\tab\t'
    db.execute(
        "INSERT INTO fairsched.tenant_shares (queue_name, tenant, weight, cap) VALUES ('emails', %s, 2.5, 3)",
        (hostile,),
    )
    db.execute('UPDATE fairsched.queues SET policy_params = \'{"k": "v", "n": 2}\' WHERE name = \'reports\'')
    exported = cli(fresh_db, "config", "export")
    assert exported.exit_code == 0, exported.output
    text = exported.stdout
    parsed = tomllib.loads(text)
    assert parsed["queues"]["emails"]["tenants"][hostile] == {"weight": 2.5, "cap": 3}
    path = write(tmp_path, text, "exported.toml")
    assert cli(None, "config", "check", str(path)).exit_code == 0
    assert cli(fresh_db, "config", "diff", str(path), "--exit-code").exit_code == 0

    # Applied to another database, the export reproduces the configuration exactly.
    assert cli(empty_db, "migrate").exit_code == 0
    assert cli(empty_db, "config", "apply", str(path)).exit_code == 0
    again = cli(empty_db, "config", "export").stdout
    assert again.splitlines()[1:] == text.splitlines()[1:]
    with psycopg.connect(empty_db) as other:
        assert tenant_rows(other) == tenant_rows(db)

    written = cli(fresh_db, "config", "export", "--output", str(tmp_path / "out.toml"))
    assert written.exit_code == 0
    assert (tmp_path / "out.toml").read_text().splitlines()[1:] == text.splitlines()[1:]


def test_check_and_apply_refuse_an_unknown_policy(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = write(tmp_path, '[queues.a]\npolicies = ["fifo"]\n\n[queues.b]\npolicies = ["weighted", "nope"]\n')
    checked = cli(None, "config", "check", str(path))
    assert checked.exit_code == 1
    assert "queues.b.policies: unknown policy 'nope'" in one_error_line(checked)
    before = config_state(db)
    assert cli(fresh_db, "config", "apply", str(path)).exit_code == 1
    assert cli(fresh_db, "config", "diff", str(path)).exit_code == 1
    assert config_state(db) == before


def test_toml_keys_and_strings_quote_what_they_must() -> None:
    assert toml_key("emails") == "emails"
    assert toml_key("a.b:c") == '"a.b:c"'
    assert toml_string('q"\\\n\x7f') == '"q\\"\\\\\\u000a\\u007f"'
    assert tomllib.loads(f"x = {toml_string(chr(1) + 'é😀')}")["x"] == "\x01é😀"


@pytest.mark.parametrize("args", [["config", "diff"], ["config", "apply"]])
def test_config_file_is_required(fresh_db: str, args: list[str]) -> None:
    assert cli(fresh_db, *args).exit_code == 2
