"""Shared fixtures: thread-leak checks and connection pairs over real bytes."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

HELPERS = Path(__file__).parent / "helpers"


def helper_argv(name: str, *args: str) -> list[str]:
    """argv that runs tests/helpers/<name>.py with this interpreter."""
    return [sys.executable, str(HELPERS / f"{name}.py"), *args]


def wait_threads_gone(before: set[threading.Thread], timeout: float = 10.0) -> list[threading.Thread]:
    """Threads started since ``before`` still alive after ``timeout`` (joined, not polled)."""
    for thread in threading.enumerate():
        if thread not in before and thread is not threading.current_thread():
            thread.join(timeout)
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


@pytest.fixture
def no_thread_leak() -> Iterator[None]:
    """Fails the test when a thread it started outlives it."""
    before = set(threading.enumerate())
    yield
    leaked = wait_threads_gone(before)
    assert not leaked, f"threads leaked: {[t.name for t in leaked]}"
