"""Ordering modes over real processes: ``ordering="session"`` keeps arrival order within each
session and lets sessions go concurrently; ``"connection"`` (the default) orders connection-wide.

A "slow" session's update handler takes 10 ms per update. Assertions compare events (how many
updates were handled when a call returned), never wall-clock thresholds.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin before 3.11
from pathlib import Path
from typing import Any

import pytest

import acp
from acp import schema
from acp.connection import Connection
from acp.transport import memory_pair

from .conftest import helper_argv
from .helpers.one_go import chunk_line, count_reads_in_one_go, lenient_line

WAIT = 30.0
SLOW = 0.01  # per update of the slow session


class Recorder:
    """A client whose update handler records each session's chunks (slowly for ``slow``)."""

    def __init__(self, ordering: str, slow: str | None = None, watch: tuple[str, int] | None = None) -> None:
        self.lock = threading.Lock()
        self.chunks: dict[str, list[str]] = {}
        self.slow = slow
        self.at_ping: list[int] = []
        self.at_permission: list[int] = []
        # watch=(session, n): `read` is set once the reader has read n chunks of that session.
        self.read = threading.Event()
        self._watch = watch
        self._read_count = 0
        builder = (
            acp.SyncClient.builder()
            .agent_process(*helper_argv("session_order_agent", ordering))
            .ordering(ordering)  # type: ignore[arg-type]
            .request_timeout(WAIT)
            .session_update_handler(self._update)
            .ext_notification_handler("_test/ping", self._ping)
            .request_permission_handler(self._permission)
        )
        if watch is not None:
            # Only then: a wire tap sends every line down the line-by-line path, and the other
            # tests should see reads of updates decoded in one go, as a client without a tap does.
            builder.wire_tap(self._tap)
        self.client = builder.build()

    def _tap(self, direction: str, line: bytes) -> None:
        if self._watch is None or direction != "in" or b"agent_message_chunk" not in line:
            return
        session, n = self._watch
        if f'"sessionId":"{session}"'.encode() in line:
            self._read_count += 1  # the reader thread only
            if self._read_count == n:
                self.read.set()

    def _update(self, note: schema.SessionNotification) -> None:
        update = note.update
        if not (isinstance(update, schema.AgentMessageChunk) and isinstance(update.content, schema.TextContent)):
            return
        if note.session_id == self.slow:
            time.sleep(SLOW)  # a slow consumer (rendering, say)
        with self.lock:
            self.chunks.setdefault(note.session_id, []).append(update.content.text)

    def handled(self, session: str) -> int:
        with self.lock:
            return len(self.chunks.get(session, ()))

    def _ping(self, params: Any) -> None:
        assert self.slow is not None
        self.at_ping.append(self.handled(self.slow))

    def _permission(self, request: schema.RequestPermissionRequest, ctx: Any) -> schema.RequestPermissionResponse:
        self.at_permission.append(self.handled(request.session_id))
        return schema.RequestPermissionResponse(outcome=schema.SelectedPermissionOutcome(option_id=request.options[0].option_id))

    def sessions(self, count: int) -> list[str]:
        self.client.initialize()
        return [self.client.new_session(str(Path.cwd())).session_id for _ in range(count)]

    def prompt(self, session: str, text: str) -> int:
        """Run a turn; how many of the session's chunks were handled when it returned."""
        self.client.prompt(session, text)
        return self.handled(session)


def _two_sessions(ordering: str, n: int) -> tuple[int, int, int]:
    """Session s1 streams n slow updates; once the reader has read them all, s2 runs a quick
    turn. Returns (s1's updates handled when s2's turn returned, s2's handled then, s1's
    handled when its own turn returned)."""
    rec = Recorder(ordering, slow="s1", watch=("s1", n))
    slow_done: list[int] = []
    with rec.client:
        s1, s2 = rec.sessions(2)
        assert (s1, s2) == ("s1", "s2")
        slow = threading.Thread(target=lambda: slow_done.append(rec.prompt(s1, f"stream {n}")))
        slow.start()
        try:
            assert rec.read.wait(WAIT)  # every slow update is read (and queued) before s2 asks
            fast = rec.prompt(s2, "stream 3")
            slow_when_fast = rec.handled(s1)
        finally:
            slow.join(WAIT)
    assert not slow.is_alive()
    assert rec.chunks[s1] == [str(i) for i in range(n)]
    return slow_when_fast, fast, slow_done[0]


def test_connection_ordering_makes_a_quick_session_wait_for_a_slow_one(no_thread_leak: None) -> None:
    n = 40
    slow_when_fast, fast, slow_done = _two_sessions("connection", n)
    assert slow_when_fast == n  # the quick turn's answer was read after every slow update
    assert fast == 3
    assert slow_done == n


def test_session_ordering_lets_a_quick_session_finish_before_a_slow_one(no_thread_leak: None) -> None:
    n = 300  # 3 s of slow handling; the quick turn needs a round trip
    slow_when_fast, fast, slow_done = _two_sessions("session", n)
    assert slow_when_fast < n  # finished before the slow session's updates were all handled
    assert fast == 3  # its own updates were all handled before prompt() returned
    assert slow_done == n  # and so were the slow session's, before its prompt() returned


def test_session_ordering_keeps_each_sessions_order(no_thread_leak: None) -> None:
    rec = Recorder("session")
    n = 300
    done: dict[str, int] = {}
    with rec.client:
        sessions = rec.sessions(4)
        threads = [
            threading.Thread(target=lambda s=s: done.__setitem__(s, rec.prompt(s, f"stream {n}")))
            for s in sessions
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
    assert done == {s: n for s in sessions}
    for s in sessions:
        assert rec.chunks[s] == [str(i) for i in range(n)]


def test_session_ordering_a_session_less_message_waits_for_everything_before_it(no_thread_leak: None) -> None:
    rec = Recorder("session", slow="s1")
    with rec.client:
        (s1,) = rec.sessions(1)
        assert rec.prompt(s1, "ping 30") == 30
    assert rec.at_ping == [30]  # _test/ping has no sessionId: it waited for s1's 30 updates


def test_session_ordering_an_agent_request_comes_after_its_sessions_updates(no_thread_leak: None) -> None:
    rec = Recorder("session", slow="s1")
    with rec.client:
        (s1,) = rec.sessions(1)
        rec.prompt(s1, "ask 30")
    assert rec.at_permission == [30]


def test_ordering_rejects_an_unknown_mode() -> None:
    a, _b = memory_pair()
    with pytest.raises(ValueError, match="ordering"):
        Connection(a, ordering="sessions")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ordering"):
        acp.SyncClient.builder().ordering("turn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ordering"):
        acp.SyncAgent.builder().ordering("turn")  # type: ignore[arg-type]


# ---------------------------------------------------------------- the engine, in process


@pytest.fixture
def session_pair(no_thread_leak: None) -> Any:
    """``a`` orders by session, ``b`` is a plain peer; started by the test."""
    a_side, b_side = memory_pair()
    a = Connection(a_side, name="a", request_timeout=WAIT, ordering="session")
    b = Connection(b_side, name="b", request_timeout=WAIT)
    yield a, b
    a.close()
    b.close()


def test_session_ordering_a_read_of_updates_only_goes_to_the_lanes_in_one_go(no_thread_leak: None) -> None:
    """By session too, a read of one-pass updates only is decoded in one go and each update
    queued in its session's lane, typed; a read it cannot take whole (a lenient update) goes
    line by line. Each session keeps its order, a failing handler costs only its own update,
    and a request waits for its session's updates."""
    ours, theirs = memory_pair()
    conn = Connection(ours, name="a", request_timeout=WAIT, ordering="session")
    seen: dict[str, list[str]] = {}
    arrived = threading.Condition()

    def on_update(params: schema.SessionNotification) -> None:
        update = params.update
        text = update.content.text if isinstance(update, schema.AgentMessageChunk) else type(update).__name__  # type: ignore[union-attr]
        if text == "boom":
            raise RuntimeError("a handler bug")
        with arrived:
            seen.setdefault(params.session_id, []).append(text)
            arrived.notify_all()

    def handled(count: int) -> bool:
        with arrived:
            return arrived.wait_for(lambda: sum(map(len, seen.values())) >= count, WAIT)

    conn.on_notification("session/update", on_update, schema.SessionNotification)
    conn.on_request("ping", lambda params, call: {"seen": len(seen.get(params["sessionId"], ()))})
    taken = count_reads_in_one_go(conn._sched.endpoint)
    try:
        conn.start()
        texts = {"s1": [f"a{i}" for i in range(60)], "s2": [f"b{i}" for i in range(60)]}
        texts["s2"][9] = "boom"
        theirs.write(b"".join(chunk_line(s, texts[s][i]) for i in range(60) for s in ("s1", "s2")))
        assert handled(119)
        theirs.write(chunk_line("s2", "y") + lenient_line("s1") + chunk_line("s1", "z"))
        theirs.write(chunk_line("s1", "last") + b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"sessionId":"s1"}}\n')
        answer = b""
        while b"\n" not in answer:
            answer += theirs.read()
        assert json.loads(answer) == {"jsonrpc": "2.0", "id": 1, "result": {"seen": 63}}
        assert seen["s1"] == texts["s1"] + ["ToolCall", "z", "last"]
        assert seen["s2"] == [t for t in texts["s2"] if t != "boom"] + ["y"]
        assert sum(taken) == 120  # the first write went the one-go way
    finally:
        conn.close()
        theirs.close()


def test_session_deadlock_rule_a_notification_handler_waits_for_its_own_sessions_answer(session_pair: Any) -> None:
    a, b = session_pair
    got: list[Any] = []
    done = threading.Event()

    def on_note(params: Any) -> None:
        # The answer names session s, whose lane is busy with this very handler.
        got.append(a.request("echo", {"sessionId": "s", "from": "handler"}))
        done.set()

    a.on_notification("note", on_note)
    a.on_notification("after", lambda p: got.append(p))
    b.on_request("echo", lambda p, call: p)
    a.on_request("ping", lambda p, call: p)
    a.start()
    b.start()
    b.notify("note", {"sessionId": "s"})
    b.notify("after", {"sessionId": "s", "n": 1})
    assert done.wait(WAIT)
    b.request("ping", {"sessionId": "s"})  # started after "after" (same session, arrived first)
    assert got == [{"sessionId": "s", "from": "handler"}, {"sessionId": "s", "n": 1}]


def test_session_ordering_a_request_waits_only_for_its_own_session(session_pair: Any) -> None:
    a, b = session_pair
    release = threading.Event()
    a.on_notification("block", lambda p: release.wait(WAIT))
    a.on_request("ping", lambda p, call: p)
    a.start()
    b.start()
    b.notify("block", {"sessionId": "busy"})
    assert b.request("ping", {"sessionId": "other"}) == {"sessionId": "other"}
    waiting = b.request_future("ping", {"sessionId": "busy"})
    session_less = b.request_future("ping", {})
    with pytest.raises(FutureTimeout):
        waiting.result(0.2)  # behind the blocked notification of its session
    assert not session_less.done()  # a session-less request waits for everything before it
    release.set()
    assert waiting.result(WAIT) == {"sessionId": "busy"}
    assert session_less.result(WAIT) == {}


def test_session_ordering_backpressure_holds_the_reader(session_pair: Any) -> None:
    a, b = session_pair
    a._sched.max_queued = 100  # the scheduler's threshold, small
    release = threading.Event()
    held = threading.Event()
    seen: dict[str, list[int]] = {"x": [], "y": []}
    hold = a._hold_reading

    def spy() -> None:
        held.set()
        hold()

    a._hold_reading = spy

    def on_chunk(params: Any) -> None:
        release.wait(WAIT)
        seen[params["sessionId"]].append(params["i"])

    a.on_notification("chunk", on_chunk)
    b.on_request("stream", lambda p, call: [b.notify("chunk", {"sessionId": "xy"[k % 2], "i": k}) for k in range(1000)] and {})
    a.start()
    b.start()
    future = a.request_future("stream", {})  # session-less: answered after every chunk
    assert held.wait(WAIT)  # both lanes blocked: the reader stopped reading
    assert not future.done()
    release.set()
    assert future.result(WAIT) == {}
    assert seen == {"x": list(range(0, 1000, 2)), "y": list(range(1, 1000, 2))}


def test_session_ordering_graceful_close_drains_the_lanes(no_thread_leak: None) -> None:
    a_side, b_side = memory_pair()
    a = Connection(a_side, name="a", request_timeout=WAIT, ordering="session")
    b = Connection(b_side, name="b", request_timeout=WAIT)
    release = threading.Event()
    handled: list[str] = []
    a.on_notification("block", lambda p: (release.wait(WAIT), handled.append("block")))
    a.on_notification("after", lambda p: handled.append("after"))
    a.on_request("ping", lambda p, call: p)
    a.start()
    b.start()
    try:
        b.notify("block", {"sessionId": "s"})
        b.notify("after", {"sessionId": "s"})
        queued = b.request_future("ping", {"sessionId": "s"})
        b.request("ping", {"sessionId": "t"})  # everything above was read by now
        release.set()
        a.close(graceful=True, timeout=WAIT)
        assert handled == ["block", "after"]
        assert queued.result(WAIT) == {"sessionId": "s"}
    finally:
        a.close()
        b.close()

