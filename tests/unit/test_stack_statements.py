"""A stack's enqueue statement: the engine's columns, and the columns its policies fill."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairsched.engine.stackstatements import compose_complete, compose_enqueue
from fairsched.policy.registry import registry

PLUGIN = """
from fairsched.policy import BasePolicy, EnqueueColumn


class EngineColumn(BasePolicy):
    name = "engine_column"

    def enqueue_columns(self):
        return (EnqueueColumn("status", "'running'"),)


class AgingTwin(BasePolicy):
    name = "aging_twin"

    def enqueue_columns(self):
        return (EnqueueColumn("aging_key", "0"),)


class TwoStatements(BasePolicy):
    name = "two_statements"

    def enqueue_columns(self):
        return (EnqueueColumn("note", "1; DROP TABLE fairsched.jobs"),)
"""


@pytest.fixture
def columns_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Three policies that fill job columns they may not, installed through entry points."""
    (tmp_path / "column_policies.py").write_text(PLUGIN)
    info = tmp_path / "fairsched_column_policies-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fairsched-column-policies\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[fairsched.policies]\nengine_column = column_policies:EngineColumn\n"
        "aging_twin = column_policies:AgingTwin\ntwo_statements = column_policies:TwoStatements\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "column_policies", raising=False)
    registry.cache_clear()
    yield
    registry.cache_clear()


def test_each_policy_fills_its_own_columns_and_a_holding_stack_inserts_held_jobs_waiting() -> None:
    fifo = compose_enqueue(("fifo",))
    composed = compose_enqueue(("weighted", "aging", "serial"))
    assert "aging_key" not in fifo and '"serial"' not in fifo and "'waiting'" not in fifo
    assert "tenant_shares_activate" not in fifo
    assert '"aging_key"' in composed and '"serial"' in composed and "'waiting'" in composed
    assert '"fairsched"."tenant_shares_activate"' in composed
    assert compose_complete(("fifo",)) is None
    assert '"fairsched"."tenant_shares_finish"' in (compose_complete(("weighted",)) or "")


@pytest.mark.parametrize(
    ("stack", "error"),
    [
        (("fifo", "engine_column"), "fills job column 'status': not its own"),
        (("aging", "aging_twin"), "fills a job column twice"),
        (("two_statements",), "is one expression"),
    ],
)
def test_a_policy_cannot_fill_an_engine_column_a_taken_one_or_two_statements(
    columns_installed: None, stack: tuple[str, ...], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        compose_enqueue(stack)
