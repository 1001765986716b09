"""Ordering modes of the asyncio runtime over real processes: ``acp.AsyncClient`` with
``ordering("session")`` keeps arrival order within each session and lets sessions go
concurrently; ``"connection"`` (the default) orders connection-wide. The agent is
tests/helpers/session_order_agent.py, as a ``SyncAgent`` or (``async``) as an ``AsyncAgent``
with the same ordering.

A "slow" session's update handler awaits 10 ms per update. Assertions compare events (how many
updates were handled when a call returned), never wall-clock thresholds; ``run`` fails if a task
outlives the test, ``no_thread_leak`` if a thread does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import acp
from acp import schema

from .conftest import helper_argv
from .helpers.aio_support import run

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0  # upper bound on every wait; never a delay
SLOW = 0.01  # per update of the slow session
AGENTS = ["sync-agent", "async-agent"]


class Recorder:
    """An async client whose update handler records each session's chunks (slowly for ``slow``)."""

    def __init__(self, ordering: str, agent: str = "async-agent", slow: str | None = None,
                 watch: tuple[str, int] | None = None) -> None:
        self.ordering = ordering
        self.agent_args = [ordering, "async"] if agent == "async-agent" else [ordering]
        self.chunks: dict[str, list[str]] = {}
        self.slow = slow
        self.at_ping: list[int] = []
        self.at_permission: list[int] = []
        # watch=(session, n): `read` is set once the reader has read n chunks of that session.
        self.read = asyncio.Event()
        self._watch = watch
        self._read_count = 0
        self.client: Any = None

    async def open(self) -> acp.AsyncClient:
        builder = (
            acp.AsyncClient.builder()
            .agent_process(*helper_argv("session_order_agent", *self.agent_args))
            .ordering(self.ordering)  # type: ignore[arg-type]
            .request_timeout(WAIT)
            .session_update_handler(self._update)
            .ext_notification_handler("_test/ping", self._ping)
            .request_permission_handler(self._permission)
        )
        if self._watch is not None:
            # Only then: a wire tap sends every line down the line-by-line path, and the other
            # tests should see reads of updates decoded in one go, as a client without a tap does.
            builder.wire_tap(self._tap)
        self.client = await builder.build()
        assert self.client._conn.ordering == self.ordering
        return self.client  # type: ignore[no-any-return]

    def _tap(self, direction: str, line: bytes) -> None:  # on the loop, as lines are read
        if self._watch is None or direction != "in" or b"agent_message_chunk" not in line:
            return
        session, n = self._watch
        if f'"sessionId":"{session}"'.encode() in line:
            self._read_count += 1
            if self._read_count == n:
                self.read.set()

    async def _update(self, note: schema.SessionNotification) -> None:
        update = note.update
        if not (isinstance(update, schema.AgentMessageChunk) and isinstance(update.content, schema.TextContent)):
            return
        if note.session_id == self.slow:
            await asyncio.sleep(SLOW)  # a slow consumer (rendering, say)
        self.chunks.setdefault(note.session_id, []).append(update.content.text)

    def handled(self, session: str) -> int:
        return len(self.chunks.get(session, ()))

    async def _ping(self, params: Any) -> None:
        assert self.slow is not None
        self.at_ping.append(self.handled(self.slow))

    async def _permission(self, request: schema.RequestPermissionRequest, ctx: Any) -> schema.RequestPermissionResponse:
        self.at_permission.append(self.handled(request.session_id))
        return schema.RequestPermissionResponse(outcome=schema.SelectedPermissionOutcome(option_id=request.options[0].option_id))

    async def sessions(self, count: int) -> list[str]:
        await self.client.initialize()
        return [(await self.client.new_session(str(Path.cwd()))).session_id for _ in range(count)]

    async def prompt(self, session: str, text: str) -> int:
        """Run a turn; how many of the session's chunks were handled when it returned."""
        await self.client.prompt(session, text)
        return self.handled(session)


def _two_sessions(ordering: str, n: int, agent: str) -> tuple[int, int, int]:
    """Session s1 streams n slow updates; once the reader has read them all, s2 runs a quick
    turn. Returns (s1's updates handled when s2's turn returned, s2's handled then, s1's
    handled when its own turn returned)."""

    async def main() -> tuple[int, int, int]:
        rec = Recorder(ordering, agent, slow="s1", watch=("s1", n))
        async with await rec.open():
            s1, s2 = await rec.sessions(2)
            assert (s1, s2) == ("s1", "s2")
            slow = asyncio.ensure_future(rec.prompt(s1, f"stream {n}"))
            await asyncio.wait_for(rec.read.wait(), WAIT)  # every slow update is read (and queued)
            fast = await rec.prompt(s2, "stream 3")
            slow_when_fast = rec.handled(s1)
            slow_done = await slow
        assert rec.chunks[s1] == [str(i) for i in range(n)]
        return slow_when_fast, fast, slow_done

    return run(main, timeout=WAIT * 2)


@pytest.mark.parametrize("agent", AGENTS)
def test_connection_ordering_makes_a_quick_session_wait_for_a_slow_one(agent: str, no_thread_leak: None) -> None:
    n = 40
    slow_when_fast, fast, slow_done = _two_sessions("connection", n, agent)
    assert slow_when_fast == n  # the quick turn's answer was read after every slow update
    assert fast == 3
    assert slow_done == n


@pytest.mark.parametrize("agent", AGENTS)
def test_session_ordering_lets_a_quick_session_finish_before_a_slow_one(agent: str, no_thread_leak: None) -> None:
    n = 300  # 3 s of slow handling; the quick turn needs a round trip
    slow_when_fast, fast, slow_done = _two_sessions("session", n, agent)
    assert slow_when_fast < n  # finished before the slow session's updates were all handled
    assert fast == 3  # its own updates were all handled before prompt() returned
    assert slow_done == n  # and so were the slow session's, before its prompt() returned


def test_session_ordering_keeps_each_sessions_order(no_thread_leak: None) -> None:
    n = 300

    async def main() -> None:
        rec = Recorder("session")
        async with await rec.open() as client:
            sessions = await rec.sessions(4)
            done = await asyncio.gather(*(rec.prompt(s, f"stream {n}") for s in sessions))
            assert done == [n] * 4  # each turn's own updates were all handled when it returned
            # Every lane ended with its work: idle sessions hold no task.
            assert not client._conn._sched.lanes
        for s in sessions:
            assert rec.chunks[s] == [str(i) for i in range(n)]

    run(main, timeout=WAIT * 2)


def test_session_ordering_a_session_less_message_waits_for_everything_before_it(no_thread_leak: None) -> None:
    async def main() -> None:
        rec = Recorder("session", slow="s1")
        async with await rec.open():
            (s1,) = await rec.sessions(1)
            assert await rec.prompt(s1, "ping 30") == 30
        assert rec.at_ping == [30]  # _test/ping has no sessionId: it waited for s1's 30 updates

    run(main, timeout=WAIT * 2)


@pytest.mark.parametrize("agent", AGENTS)
def test_session_ordering_an_agent_request_comes_after_its_sessions_updates(agent: str, no_thread_leak: None) -> None:
    async def main() -> None:
        rec = Recorder("session", agent, slow="s1")
        async with await rec.open():
            (s1,) = await rec.sessions(1)
            await rec.prompt(s1, "ask 30")
        assert rec.at_permission == [30]

    run(main, timeout=WAIT * 2)


@pytest.mark.parametrize("timeout", [WAIT, 0.0])
def test_session_ordering_close_drains_the_lanes_or_cancels_them(timeout: float, no_thread_leak: None) -> None:
    """``close()`` while a slow session's lane still works through its queue: within its
    timeout it drains the lane (the turn returns with every update handled); out of time, the
    lane task is cancelled with everything else. Either way no task is left (``run`` checks)."""

    async def main() -> None:
        n = 100
        rec = Recorder("session", slow="s1", watch=("s1", n))
        client = await rec.open()
        (s1,) = await rec.sessions(1)
        turn = asyncio.ensure_future(rec.prompt(s1, f"stream {n}"))
        await asyncio.wait_for(rec.read.wait(), WAIT)
        assert client._conn._lane_tasks  # s1's lane is busy
        await client.close(timeout=timeout)
        if timeout:
            assert await turn == n
        else:
            with pytest.raises(acp.ConnectionClosedError):
                await turn
            assert rec.handled(s1) < n
        assert not client._conn._lane_tasks

    run(main, timeout=WAIT * 2)


def test_the_asyncio_builders_take_session_ordering() -> None:
    async def main() -> None:
        async with acp.AsyncAgent.builder().ordering("session").build() as agent:
            transport = await agent.serve_in_process()
            async with acp.AsyncClient.builder().transport(transport).ordering("session").build() as client:
                await client.initialize()
                assert client._conn.ordering == "session"
                assert [c.connection.ordering for c in agent.connections] == ["session"]

    run(main)
    with pytest.raises(ValueError, match="ordering"):
        acp.AsyncAgent.builder().ordering("turn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ordering"):
        acp.AsyncClient.builder().ordering("turn")  # type: ignore[arg-type]
