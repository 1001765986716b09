"""``AsyncConnection(..., ordering="session")`` over acp.aio.transport.memory_pair: per-session
lanes, the gate for session-less messages, answers ordered with their request's session, the
deadlock rule per session, backpressure, graceful and abrupt close. Every test runs its
coroutine with ``run`` (bounded, failing if a task outlives it); waits are on events and loop
rounds, never on the clock. The process-level twin is tests/test_aio_session_ordering.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import acp.rpc.scheduler as rpc_scheduler
from acp.aio import AsyncConnection, AsyncInboundCall
from acp.aio import connection as aio_connection
from acp.aio.transport import AsyncTransport, MemoryTransport, memory_pair
from acp.errors import ConnectionClosedError
from tests.helpers.aio_support import WAIT, PullOnly, RawPeer, run, yield_loop
from tests.helpers.one_go import chunk_line, count_reads_in_one_go, lenient_line

# Every test runs twice: the transport pushing what it reads, and the reader task pulling.
_MODE = ["push"]


@pytest.fixture(autouse=True, params=["push", "pull"])
def reading_mode(request: pytest.FixtureRequest) -> None:
    _MODE[0] = request.param


def _end(transport: MemoryTransport) -> AsyncTransport:
    return transport if _MODE[0] == "push" else PullOnly(transport)


def _pair() -> tuple[AsyncConnection, AsyncConnection]:
    """``a`` orders by session, ``b`` is a plain peer."""
    a_side, b_side = memory_pair()
    return (AsyncConnection(_end(a_side), name="a", request_timeout=WAIT, ordering="session"),
            AsyncConnection(_end(b_side), name="b", request_timeout=WAIT))


def _raw() -> tuple[AsyncConnection, RawPeer]:
    ours, theirs = memory_pair()
    return AsyncConnection(_end(ours), name="conn", request_timeout=WAIT, ordering="session"), RawPeer(theirs)


def _note(method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def _req(msg_id: int, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def _result(msg_id: int, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


async def _until(predicate: Any, rounds: int = 500) -> None:
    """Let the loop run until ``predicate()`` holds (bounded by loop rounds, not time)."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


def test_ordering_rejects_an_unknown_mode() -> None:
    a, _b = memory_pair()
    with pytest.raises(ValueError, match="ordering"):
        AsyncConnection(a, ordering="sessions")  # type: ignore[arg-type]
    assert AsyncConnection(a).ordering == "connection"
    assert aio_connection.ORDERINGS == ("connection", "session")


def test_a_slow_session_does_not_hold_up_another_and_keeps_its_own_order() -> None:
    async def main() -> None:
        conn, peer = _raw()
        release = asyncio.Event()
        seen: list[tuple[str, int]] = []

        async def on_update(params: Any) -> None:
            if params["sessionId"] == "slow":
                await release.wait()
            seen.append((params["sessionId"], params["i"]))

        conn.on_notification("update", on_update)
        conn.start()
        peer.send(*(_note("update", {"sessionId": s, "i": i}) for i in range(5) for s in ("slow", "quick")))
        await _until(lambda: len(seen) == 5)
        assert seen == [("quick", i) for i in range(5)]  # the blocked session held up nobody
        release.set()
        await _until(lambda: len(seen) == 10)
        assert [i for s, i in seen if s == "slow"] == list(range(5))
        await _until(lambda: not conn._lane_tasks)  # both lanes ended with their work
        assert not conn._sched.lanes
        await conn.close()

    run(main)


def test_an_answer_waits_only_for_its_own_sessions_notifications() -> None:
    async def main() -> None:
        conn, peer = _raw()
        release = asyncio.Event()
        handled: list[str] = []

        async def on_update(params: Any) -> None:
            await release.wait()
            handled.append(params["sessionId"])

        conn.on_notification("update", on_update)
        conn.start()
        busy = asyncio.ensure_future(conn.request("ask", {"sessionId": "busy"}))
        other = asyncio.ensure_future(conn.request("ask", {"sessionId": "other"}))
        session_less = asyncio.ensure_future(conn.request("ask", {}))
        ids = [(await peer.recv())["id"] for _ in range(3)]
        peer.send(_note("update", {"sessionId": "busy"}), *(_result(i, i) for i in ids))
        assert await other == ids[1]  # the other session's answer did not wait
        await yield_loop()
        assert not busy.done()  # behind its session's notification, still being handled
        assert not session_less.done()  # a session-less answer waits for everything before it
        release.set()
        assert await busy == ids[0]
        assert await session_less == ids[2]
        assert handled == ["busy"]
        await conn.close()

    run(main)


def test_a_request_waits_only_for_its_own_session() -> None:
    async def main() -> None:
        a, b = _pair()
        release = asyncio.Event()
        arrived: list[Any] = []

        async def block(params: Any) -> None:
            await release.wait()

        a.on_notification("block", block)
        a.on_request("ping", lambda p, call: p, on_arrival=lambda p, call: arrived.append(p))
        a.start()
        b.start()
        b.notify("block", {"sessionId": "busy"})
        assert await b.request("ping", {"sessionId": "other"}) == {"sessionId": "other"}
        waiting = asyncio.ensure_future(b.request("ping", {"sessionId": "busy"}))
        session_less = asyncio.ensure_future(b.request("ping", {}))
        await _until(lambda: len(arrived) == 3)  # both were read...
        await yield_loop()
        assert not waiting.done()  # ...but wait behind the blocked notification of their session
        assert not session_less.done()  # and behind everything read before it
        release.set()
        assert await waiting == {"sessionId": "busy"}
        assert await session_less == {}
        await a.close()
        await b.close()

    run(main)


def test_a_session_less_message_waits_for_everything_before_it_and_holds_up_what_follows() -> None:
    async def main() -> None:
        conn, peer = _raw()
        release = asyncio.Event()
        seen: list[str] = []

        async def on_update(params: Any) -> None:
            if params.get("i") == 0:
                await release.wait()
            seen.append(f"{params['sessionId']}{params['i']}")

        async def on_global(params: Any) -> None:
            seen.append("global")

        conn.on_notification("update", on_update)
        conn.on_notification("global", on_global)
        conn.start()
        peer.send(_note("update", {"sessionId": "x", "i": 0}), _note("update", {"sessionId": "y", "i": 1}),
                  _note("global", {}), _note("update", {"sessionId": "y", "i": 2}),
                  _note("update", {"sessionId": "z", "i": 3}))
        await _until(lambda: seen == ["y1"])
        await yield_loop()
        assert seen == ["y1"]  # "global" waits for x's blocked update; y2 and z3 wait for "global"
        release.set()
        await _until(lambda: len(seen) == 5)
        assert seen[:2] == ["y1", "x0"] and seen[2] == "global" and sorted(seen[3:]) == ["y2", "z3"]
        await conn.close()

    run(main)


def test_deadlock_rule_a_notification_handler_awaits_its_own_sessions_answer() -> None:
    async def main() -> None:
        a, b = _pair()
        got: list[Any] = []

        async def on_note(params: Any) -> None:
            # The answer names session s, whose lane is busy with this very handler.
            got.append(await a.request("echo", {"sessionId": "s", "from": "handler"}))

        async def after(params: Any) -> None:
            got.append(params)

        a.on_notification("note", on_note)
        a.on_notification("after", after)
        b.on_request("echo", lambda p, call: p)
        a.on_request("ping", lambda p, call: p)
        a.start()
        b.start()
        b.notify("note", {"sessionId": "s"})
        b.notify("after", {"sessionId": "s", "n": 1})
        await b.request("ping", {"sessionId": "s"})  # started after "after" (same session, read first)
        assert got == [{"sessionId": "s", "from": "handler"}, {"sessionId": "s", "n": 1}]
        await a.close()
        await b.close()

    run(main)


def test_only_awaited_notification_handlers_run_marked_serial() -> None:
    async def main() -> None:
        conn, peer = _raw()
        marks: list[tuple[str, bool]] = []
        release = asyncio.Event()

        async def slow(params: Any) -> None:
            marks.append(("slow", aio_connection._serial.get()))
            await release.wait()

        async def on_async(params: Any) -> None:
            marks.append(("async", aio_connection._serial.get()))

        def on_plain(params: Any) -> None:
            marks.append(("plain", aio_connection._serial.get()))

        def plain_request(params: Any, call: AsyncInboundCall) -> Any:
            marks.append(("request", aio_connection._serial.get()))
            return "ok"

        conn.on_notification("slow", slow)
        conn.on_notification("async", on_async)
        conn.on_notification("plain", on_plain)
        conn.on_request("req", plain_request)
        conn.start()
        s = {"sessionId": "s"}
        peer.send(_note("slow", s), _note("async", s), _note("plain", s), _req(1, "req", s), _note("async", s))
        await _until(lambda: bool(marks))
        release.set()
        assert (await peer.recv())["result"] == "ok"
        await _until(lambda: len(marks) == 5)
        assert marks == [("slow", True), ("async", True), ("plain", False), ("request", False), ("async", True)]
        await conn.close()

    run(main)


def test_backpressure_holds_the_reader_while_every_lane_is_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc_scheduler, "MAX_QUEUED_MESSAGES", 10)

    async def main() -> None:
        conn, peer = _raw()
        release = asyncio.Event()
        seen: dict[str, list[int]] = {"x": [], "y": []}

        async def on_chunk(params: Any) -> None:
            await release.wait()
            seen[params["sessionId"]].append(params["i"])

        conn.on_notification("chunk", on_chunk)
        conn.on_request("echo", lambda params, call: params)
        conn.start()
        peer.send(*(_note("chunk", {"sessionId": "xy"[k % 2], "i": k}) for k in range(30)))
        await yield_loop()
        peer.send(_req(1, "echo", ["after"]))  # session-less: after every chunk
        await yield_loop()
        assert conn._transport.buffered > 0  # type: ignore[attr-defined]  # the reader stopped reading
        assert conn._sched.queued == 30  # what backpressure counts: every chunk of both lanes
        release.set()
        assert await peer.recv() == _result(1, ["after"])
        assert seen == {"x": list(range(0, 30, 2)), "y": list(range(1, 30, 2))}
        await conn.close()

    run(main)


def test_the_reader_keeps_reading_while_a_lane_awaits_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    # x's first handler awaits an answer that only the reader can bring in, behind a full
    # backlog; another lane finishing handlers meanwhile must not let the reader be held.
    monkeypatch.setattr(rpc_scheduler, "MAX_QUEUED_MESSAGES", 10)

    async def main() -> None:
        conn, peer = _raw()
        seen: list[Any] = []

        async def on_update(params: Any) -> None:
            if params == {"sessionId": "x", "i": 0}:
                seen.append(await conn.request("ask", {"sessionId": "x"}))
            seen.append((params["sessionId"], params["i"]))

        conn.on_notification("update", on_update)
        conn.start()
        peer.send(*(_note("update", {"sessionId": "x", "i": i}) for i in range(30)))
        request = await peer.recv()
        for batch in range(2):  # y's lane runs (and ends) between the two reads
            peer.send(*(_note("update", {"sessionId": "y", "i": 5 * batch + i}) for i in range(5)))
            await _until(lambda n=5 * (batch + 1): len(seen) == n)
        peer.send(_result(request["id"], "answer"))
        await _until(lambda: len(seen) == 41, rounds=2000)
        assert seen[10:] == ["answer", *(("x", i) for i in range(30))]
        await conn.close()

    run(main)


def test_a_thousand_sessions_leave_no_idle_task() -> None:
    async def main() -> None:
        a, b = _pair()
        release = asyncio.Event()
        handled: list[str] = []

        async def on_update(params: Any) -> None:
            await release.wait()
            handled.append(params["sessionId"])

        a.on_notification("update", on_update)
        a.start()
        b.start()
        for k in range(1000):
            b.notify("update", {"sessionId": f"s{k}"})
        await _until(lambda: len(a._lane_tasks) == 1000)  # one task per session with work
        release.set()
        await _until(lambda: len(handled) == 1000 and not a._lane_tasks)
        assert not a._sched.lanes and a._sched.queued == 0
        await a.close()
        await b.close()

    run(main)


def test_graceful_close_drains_the_lanes() -> None:
    async def main() -> None:
        a, b = _pair()
        release = asyncio.Event()
        handled: list[str] = []

        async def block(params: Any) -> None:
            await release.wait()
            handled.append("block")

        async def after(params: Any) -> None:
            handled.append("after")

        a.on_notification("block", block)
        a.on_notification("after", after)
        a.on_request("ping", lambda p, call: p)
        a.start()
        b.start()
        b.notify("block", {"sessionId": "s"})
        b.notify("after", {"sessionId": "s"})
        queued = asyncio.ensure_future(b.request("ping", {"sessionId": "s"}))
        await b.request("ping", {"sessionId": "t"})  # everything above was read by now
        closing = asyncio.ensure_future(a.close(graceful=True, timeout=WAIT))
        await yield_loop()
        assert not closing.done()  # waits for s's lane
        release.set()
        await closing
        assert handled == ["block", "after"]
        assert await queued == {"sessionId": "s"}
        assert not a._lane_tasks
        await b.close()

    run(main)


@pytest.mark.parametrize("graceful", [False, True])
def test_close_from_inside_a_lane_leaves_nothing_behind(graceful: bool) -> None:
    # As from the dispatcher: a close from a notification handler does not wait for the lanes
    # (its own would never drain); the other lanes are cancelled.
    async def main() -> None:
        conn, peer = _raw()
        closed = asyncio.Event()

        async def shut(params: Any) -> None:
            await conn.close(graceful=graceful, timeout=WAIT)
            closed.set()

        async def block(params: Any) -> None:
            await asyncio.Event().wait()

        conn.on_notification("shut", shut)
        conn.on_notification("block", block)
        conn.start()
        peer.send(_note("block", {"sessionId": "other"}), _note("block", {"sessionId": "other"}),
                  _note("shut", {"sessionId": "s"}))
        await asyncio.wait_for(closed.wait(), WAIT)
        assert conn.is_closed
        await _until(lambda: not conn._lane_tasks)

    run(main)


def test_close_cancels_the_lanes_and_fails_what_waits_in_them() -> None:
    async def main() -> None:
        conn, peer = _raw()
        started = asyncio.Event()
        cancelled: list[str] = []

        async def block(params: Any) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(params["sessionId"])
                raise

        conn.on_notification("block", block)
        conn.start()
        call = asyncio.ensure_future(conn.request("ask", {"sessionId": "s"}))
        request = await peer.recv()
        peer.send(_note("block", {"sessionId": "s"}), _note("block", {"sessionId": "s"}), _result(request["id"], 1))
        await asyncio.wait_for(started.wait(), WAIT)
        await conn.close()
        assert cancelled == ["s"]  # the running handler was cancelled, the queued one never ran
        with pytest.raises(ConnectionClosedError):
            await call  # its answer was still queued behind the handler
        assert not conn._lane_tasks and conn._sched.queued == 0

    run(main)


def test_end_of_input_handles_every_lane_first_then_runs_on_close_once() -> None:
    async def main() -> None:
        conn, peer = _raw()
        release = asyncio.Event()
        events: list[str] = []

        async def on_update(params: Any) -> None:
            if params["sessionId"] == "slow":
                await release.wait()
            events.append(params["sessionId"])

        conn.on_notification("update", on_update)
        conn.on_close(lambda: events.append("closed"))
        conn.start()
        peer.send(_note("update", {"sessionId": "slow"}), _note("update", {"sessionId": "quick"}))
        await peer.transport.close()
        await _until(lambda: events == ["quick"])
        assert not await conn.wait_closed(timeout=0)
        release.set()
        assert await conn.wait_closed(timeout=WAIT)
        assert events == ["quick", "slow", "closed"]
        await conn.close()

    run(main)


def test_a_read_of_updates_only_goes_to_the_lanes_in_one_go() -> None:
    """A read of one-pass updates only is decoded in one go and each update goes to its
    session's lane typed (behind an awaitable one of them returned, or called at once); a read
    it cannot take whole (a lenient update) goes line by line. Each session keeps its order, a
    failing handler costs only its own update, a request waits for its session's updates."""
    from acp import schema

    async def main() -> None:
        conn, peer = _raw()
        seen: dict[str, list[str]] = {}

        async def later(session: str, text: str) -> None:
            await asyncio.sleep(0)  # what the read holds after it queues in the lane
            seen.setdefault(session, []).append(text)

        def on_update(params: schema.SessionNotification) -> Any:
            update = params.update
            text = update.content.text if isinstance(update, schema.AgentMessageChunk) else type(update).__name__  # type: ignore[union-attr]
            if text == "boom":
                raise RuntimeError("a handler bug")
            if text.endswith("slow"):
                return later(params.session_id, text)
            seen.setdefault(params.session_id, []).append(text)
            return None

        conn.on_notification("session/update", on_update, schema.SessionNotification)
        conn.on_request("ping", lambda params, call: {"seen": len(seen.get(params["sessionId"], ()))})
        taken = count_reads_in_one_go(conn._sched.endpoint)
        conn.start()
        texts = {"s1": [f"a{i}" for i in range(40)], "s2": [f"b{i}" for i in range(40)]}
        texts["s1"][3], texts["s2"][9] = "a3-slow", "boom"
        peer.send(*[chunk_line(s, texts[s][i]) for i in range(40) for s in ("s1", "s2")])
        await yield_loop()
        peer.send(chunk_line("s2", "y"), lenient_line("s1"), chunk_line("s1", "z"))
        await yield_loop()
        peer.send(chunk_line("s1", "last"), _req(1, "ping", {"sessionId": "s1"}))
        assert await peer.recv() == _result(1, {"seen": 43})
        assert seen["s1"] == texts["s1"] + ["ToolCall", "z", "last"]
        assert seen["s2"] == [t for t in texts["s2"] if t != "boom"] + ["y"]
        assert sum(taken) == 80  # the first write went the one-go way
        await conn.close()

    run(main)
