"""pytest fixtures for recorded sessions, registered through the ``pytest11`` entry point (so
they exist in every test of a project that installed ``acp-sync``).

``replay_agent(path, **options)`` makes a :class:`~acp.replay.ReplayAgent` of the recording at
``path``; ``replay_client(path, **options)`` a :class:`~acp.replay.ReplayClient`. Both are
closed at the end of the test (no thread, process or temporary folder left behind), and every
replay agent is verified then: a divergence the test did not already see fails it::

    def test_my_client_against_a_recorded_agent(replay_agent):
        replay = replay_agent("tests/sessions/hello.jsonl", speed=None)
        with acp.SyncClient.builder().transport(replay.transport()).build() as client:
            ...

Nothing here is imported until a test asks for a fixture.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:  # only for the annotations: acp.replay is imported when a fixture is used
    from .replay import ReplayAgent, ReplayClient

__all__ = ["replay_agent", "replay_client"]

_R = TypeVar("_R", "ReplayAgent", "ReplayClient")


def _maker(cls: type[_R], made: list[_R]) -> Callable[..., _R]:
    """``make(path, **options)``: ``cls.from_recording(path, **options)``, kept in ``made``."""

    def make(path: str | os.PathLike[str], **options: Any) -> _R:
        replay = cls.from_recording(path, **options)
        made.append(replay)
        return replay

    return make


@pytest.fixture
def replay_agent() -> Iterator[Callable[..., ReplayAgent]]:
    """A factory: ``replay_agent(path, **options)`` -> a started-on-demand ReplayAgent, closed
    and verified when the test ends."""
    from .replay import ReplayAgent

    made: list[ReplayAgent] = []
    yield _maker(ReplayAgent, made)
    for agent in made:
        agent.close()
    try:
        for agent in made:
            agent.verify()
    finally:
        for agent in made:
            agent.cleanup()


@pytest.fixture
def replay_client() -> Iterator[Callable[..., ReplayClient]]:
    """A factory: ``replay_client(path, **options)`` -> a ReplayClient (``.run(*agent_argv)``),
    stopped when the test ends."""
    from .replay import ReplayClient

    made: list[ReplayClient] = []
    yield _maker(ReplayClient, made)
    for client in made:
        client.close()
