"""The pace of paced claims (fairsched/worker/pacing.py); real workers pacing their claims are
in tests/processes/test_worker.py."""

from __future__ import annotations

import pytest

from fairsched.worker.pacing import BURST_WINDOWS, PACE_MARGIN, Pacer

WINDOW = 0.005


def test_jobs_no_longer_than_a_window_are_never_paced() -> None:
    pacer = Pacer(50, WINDOW)
    assert not pacer.paced, "nothing finished yet: nothing to pace by"
    pacer.finished(0.0001)
    assert not pacer.paced
    pacer.finished(WINDOW)
    assert not pacer.paced


def test_the_pace_follows_the_running_average_of_run_times() -> None:
    pacer = Pacer(50, WINDOW)
    pacer.finished(0.12)
    assert pacer.paced
    assert pacer.rate == pytest.approx(PACE_MARGIN * 50 / 0.12)
    for _ in range(200):
        pacer.finished(0.5)
    assert pacer.rate == pytest.approx(PACE_MARGIN * 50 / 0.5, rel=1e-3)


def test_paced_claims_come_a_window_apart_and_take_the_starts_earned() -> None:
    pacer = Pacer(50, WINDOW)
    pacer.finished(0.12)  # ~521 starts/s: ~2.6 a window
    burst = BURST_WINDOWS * pacer.rate * WINDOW
    assert pacer.allowance(100.0) == int(burst), "long idle: the saved starts are capped"
    pacer.started(int(burst))
    assert pacer.pause(100.0) == pytest.approx(WINDOW)
    assert pacer.pause(100.0 + WINDOW) == 0.0
    assert pacer.allowance(100.0 + WINDOW) == int(burst - int(burst) + pacer.rate * WINDOW)


def test_short_claims_save_starts_up_to_two_windows_worth() -> None:
    pacer = Pacer(50, WINDOW)
    pacer.finished(0.12)
    pacer.allowance(100.0)
    pacer.started(0)
    per_window = pacer.rate * WINDOW
    assert pacer.allowance(100.0 + 10 * WINDOW) == int(BURST_WINDOWS * per_window)


def test_slow_jobs_pace_one_start_at_a_time() -> None:
    pacer = Pacer(4, WINDOW)
    pacer.finished(2.0)  # 2.5 starts/s
    assert pacer.allowance(100.0) == 1
    pacer.started(1)
    assert pacer.pause(100.0) == pytest.approx(1 / pacer.rate), "the next start is due in 0.4 s"
