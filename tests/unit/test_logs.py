"""Logs: the JSON line formatter, the filter that names the job in scope, setup and its undo,
the command line's log options and the log settings."""

from __future__ import annotations

import io
import json
import logging
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_support import EXAMPLE_CONFIG, cli

from fairsched import ConfigError, load_settings, logs
from fairsched.engine.lease import Lease

SECRET = "payload-secret-51d2"


def lease(job_id: int = 41, token: int = 7, attempt: int = 2) -> Lease:
    now = datetime.now(UTC)
    return Lease(
        id=job_id,
        queue="emails",
        token=token,
        owner="host:1",
        expires_at=now,
        tenant="acme",
        payload={"secret": SECRET},
        attempt=attempt,
        max_attempts=8,
        idempotency_key=f"key-{SECRET}",
        priority=0,
        aggregate_key=None,
        aggregate_seq=None,
        created_at=now,
        started_at=now,
        lease_seconds=30.0,
    )


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own whose handler formats JSON lines, with the job filter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonLines())
    handler.addFilter(logs.JobFields())
    logger = logging.getLogger("fairsched.test_logs.own")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield logger, out
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(text) for text in out.getvalue().splitlines()]


def test_a_json_line_has_time_level_logger_and_message(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = logged
    logger.warning("claiming %s failed (%s)", "emails", "timeout")
    [line] = lines(out)
    assert line.keys() == {"time", "level", "logger", "message"}
    assert line["level"] == "WARNING" and line["logger"] == "fairsched.test_logs.own"
    assert line["message"] == "claiming emails failed (timeout)"
    assert datetime.fromisoformat(line["time"]).utcoffset() is not None


def test_lines_in_a_job_scope_name_the_job_but_never_its_payload(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = logged
    with logs.job_scope(lease()):
        logger.info("working")
        with logs.job_scope(lease(job_id=42, token=9, attempt=1)):
            logger.info("inner")
        logger.info("outer again")
    logger.info("after")
    assert logs.job_in_scope() is None
    fields = [{k: line.get(k) for k in logs.JOB_FIELDS} for line in lines(out)]
    first = {"job_id": 41, "queue": "emails", "tenant": "acme", "attempt": 2, "lease_token": 7}
    inner = {**first, "job_id": 42, "lease_token": 9, "attempt": 1}
    nothing = dict.fromkeys(logs.JOB_FIELDS)
    assert fields == [first, inner, first, nothing]
    assert SECRET not in out.getvalue()


def test_a_traceback_and_extra_fields_come_along(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = logged
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        with logs.job_scope(lease()):
            logger.exception("failed", extra={"job_id": 99})
    [line] = lines(out)
    assert "RuntimeError: boom" in line["exc_info"]
    assert line["job_id"] == 99, "a job_id given with extra= is kept"


def test_the_scope_stays_in_its_thread(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = logged
    with logs.job_scope(lease()):
        other = threading.Thread(target=logger.info, args=("from another thread",))
        other.start()
        other.join()
    [line] = lines(out)
    assert "job_id" not in line


def test_setup_logs_json_from_the_level_up_and_teardown_undoes_it(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    logs.setup("text", "debug")
    logs.setup("json", "warning")  # replaces the first
    try:
        assert sum(isinstance(h.formatter, logs.JsonLines) for h in root.handlers) == 1
        logging.getLogger("fairsched.test_logs.setup").info("left out")
        logging.getLogger("fairsched.test_logs.setup").warning("kept")
    finally:
        logs.teardown()
    assert (root.level, root.handlers) == before
    printed = capsys.readouterr().err.splitlines()
    assert [json.loads(text)["message"] for text in printed] == ["kept"]


def test_text_lines_keep_the_workers_format() -> None:
    record = logging.LogRecord("fairsched.worker.process", logging.INFO, __file__, 1, "worker up", None, None)
    text = logs.formatter("text").format(record)
    assert text.endswith(" INFO fairsched.worker.process: worker up")


@pytest.mark.parametrize(("log_format", "level"), [("xml", "info"), ("json", "loud")])
def test_setup_refuses_unknown_values(log_format: Any, level: Any) -> None:
    with pytest.raises(ValueError, match="use one of"):
        logs.setup(log_format, level)
    assert not any(isinstance(h.formatter, logs.JsonLines) for h in logging.getLogger().handlers)


# -- settings and options ---------------------------------------------------------------


@pytest.fixture
def no_fairsched_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("FAIRSCHED_")]:
        monkeypatch.delenv(key)


@pytest.mark.usefixtures("no_fairsched_env")
def test_log_settings_come_from_the_file_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (load_settings().log_format, load_settings().log_level) == ("text", "info")
    path = tmp_path / "fairsched.toml"
    path.write_text('log_format = "json"\nlog_level = "WARNING"\n')
    settings = load_settings(path)
    assert (settings.log_format, settings.log_level) == ("json", "warning")
    monkeypatch.setenv("FAIRSCHED_LOG_LEVEL", "error")
    assert load_settings(path).log_level == "error"


@pytest.mark.usefixtures("no_fairsched_env")
def test_bad_log_settings_name_the_accepted_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRSCHED_LOG_FORMAT", "xml")
    with pytest.raises(ConfigError, match=r"log_format: Input should be 'text' or 'json' \(got 'xml'\)"):
        load_settings()


@pytest.mark.parametrize("where", ["before", "after"])
def test_bad_log_options_are_usage_errors_before_or_after_the_command(where: str) -> None:
    for option, value in (("--log-format", "xml"), ("--log-level", "loud")):
        command = ["config", "check"]
        args = [option, value, *command] if where == "before" else [*command, option, value]
        result = cli(None, *args, COLUMNS="300")
        assert result.exit_code == 2, result.output
        assert f"'{value}' is not one of" in result.output


def test_a_command_with_log_options_leaves_no_handler_behind() -> None:
    """The root's logs are set up for the command and undone after it (in-process runs)."""
    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    result = cli(None, "config", "check", str(EXAMPLE_CONFIG), "--log-format", "json", "--log-level", "DEBUG")
    assert result.exit_code == 0, result.output
    assert (root.level, root.handlers) == before
