"""acp.polling: whether a blocking request polls for its answer is learned from its waits.

The policy is driven with made-up wait times here (no clock, no threads): which way it picks,
when it measures the other way again, what it leaves out. ``wait()`` is then checked against
real locks for what it returns and what it reports to the policy.
"""

from __future__ import annotations

import itertools
import threading

import pytest

import acp.polling as polling
from acp.polling import WaitPolicy

pytestmark = pytest.mark.timeout(30)

FAST, SLOW = 20e-6, 60e-6


def drive(policy: WaitPolicy, windows: int, poll: float, sleep: float) -> list[tuple[bool, int]]:
    """Feed ``windows`` windows of waits, each as long as the way in use takes; return the runs
    of ways used, in windows: [(polling, how many windows), ...]."""
    used = []
    for _ in range(windows * policy.WINDOW):
        used.append(policy.polling)
        policy.record(poll if policy.polling else sleep)
    return [(way, len(list(run)) // policy.WINDOW) for way, run in itertools.groupby(used)]


def test_it_measures_both_ways_first_then_keeps_the_faster() -> None:
    policy = WaitPolicy()
    runs = drive(policy, 10, poll=SLOW, sleep=FAST)
    assert runs == [(True, 1), (False, 9)]
    assert policy.mean == {True: pytest.approx(SLOW), False: pytest.approx(FAST)}

    policy = WaitPolicy()
    assert drive(policy, 10, poll=FAST, sleep=SLOW) == [(True, 1), (False, 1), (True, 8)]


def test_the_way_not_used_is_measured_again_every_probe_every_windows() -> None:
    policy = WaitPolicy()
    every = policy.PROBE_EVERY
    runs = drive(policy, 2 + 2 * (every + 1), poll=SLOW, sleep=FAST)
    assert runs == [(True, 1), (False, every), (True, 1), (False, every), (True, 1), (False, 1)]


def test_it_follows_the_machine_when_the_other_way_becomes_faster() -> None:
    policy = WaitPolicy()
    drive(policy, 4, poll=SLOW, sleep=FAST)
    assert policy.polling is False
    # Polling got fast (the threads moved to other CPUs): found at its next measure, then kept
    # but for one window of sleeping every PROBE_EVERY.
    every = policy.PROBE_EVERY
    runs = drive(policy, 3 * every, poll=FAST, sleep=SLOW)
    assert runs[0][0] is False and runs[0][1] < every  # sleeping until polling is measured again
    assert sum(n for way, n in runs[1:] if way) >= 2 * every
    assert all(n == 1 for way, n in runs[1:] if not way)


def test_the_way_in_use_is_left_as_soon_as_it_is_slower_than_the_other_was() -> None:
    policy = WaitPolicy()
    drive(policy, 3, poll=SLOW, sleep=FAST)
    assert policy.polling is False
    runs = drive(policy, 3, poll=FAST, sleep=2 * SLOW)  # sleeping now slower than polling was
    assert runs == [(False, 1), (True, 2)]  # one window to see it


def test_long_waits_tell_nothing_and_are_left_out() -> None:
    policy = WaitPolicy()
    for _ in range(10 * policy.WINDOW):
        policy.record(policy.LONG * 10)  # an LLM thinking: no poll would shorten it
    assert policy.polling is True
    assert policy.mean == {True: None, False: None}


@pytest.fixture
def fresh_policy(monkeypatch: pytest.MonkeyPatch) -> WaitPolicy:
    policy = WaitPolicy()
    monkeypatch.setattr(polling, "POLICY", policy)
    monkeypatch.setattr(polling, "SEVERAL_CPUS", True)
    return policy


def waiter(answered: bool) -> threading.Lock:
    lock = threading.Lock()
    if not answered:
        lock.acquire()
    return lock


def test_wait_takes_an_answer_that_is_there_and_reports_the_wait(fresh_policy: WaitPolicy) -> None:
    assert polling.wait(waiter(answered=True), 0.001, None)
    assert fresh_policy._count == 1
    fresh_policy.polling = False
    assert polling.wait(waiter(answered=True), 0.001, 1.0)
    assert fresh_policy._count == 2


def test_wait_gives_up_at_its_timeout_polling_or_not(fresh_policy: WaitPolicy) -> None:
    assert not polling.wait(waiter(answered=False), 0.001, 0.01)
    fresh_policy.polling = False
    assert not polling.wait(waiter(answered=False), 0.001, 0.01)
    assert fresh_policy._count == 0  # a wait that timed out is no sample


def test_wait_takes_an_answer_released_while_it_polls(fresh_policy: WaitPolicy) -> None:
    fresh_policy.LONG = 60.0  # this wait counts, however slow the timer thread is to start
    lock = waiter(answered=False)
    timer = threading.Timer(0.005, lock.release)
    timer.start()
    try:
        assert polling.wait(lock, 5.0, None)  # polled for it (the poll may last 5 s)
    finally:
        timer.join()
    assert fresh_policy._count == 1


def test_with_one_cpu_or_no_spin_nothing_is_timed(fresh_policy: WaitPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    assert polling.wait(waiter(answered=True), 0.0, None)
    monkeypatch.setattr(polling, "SEVERAL_CPUS", False)
    assert polling.wait(waiter(answered=True), 0.001, None)
    assert not polling.wait(waiter(answered=False), 0.001, 0.0)
    assert fresh_policy._count == 0
