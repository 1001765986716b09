"""The asyncio engine (acp.aio.AsyncConnection) over acp.aio.transport.memory_pair: ordering,
the deadlock rule, cancellation, timeouts, bad input, close. Every test runs its coroutine with
``run`` (bounded, and failing if a task outlives it); waits are on events, never on the clock."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

import acp.rpc.scheduler as rpc_scheduler
from acp.aio import AsyncConnection, AsyncInboundCall
from acp.aio import connection as aio_connection
from acp.aio.transport import AsyncTransport, MemoryTransport, memory_pair
from acp.errors import (
    ConnectionClosedError,
    RequestCancelledError,
    RequestError,
    RequestTimeoutError,
)
from acp.schema import ReadTextFileRequest, ReadTextFileResponse
from tests.helpers.aio_support import WAIT, PullOnly, RawPeer, run, yield_loop
from tests.helpers.one_go import chunk_line, count_reads_in_one_go, lenient_line

# Every test runs twice: with the transport pushing what it reads (set_receiver, no reader
# task) and with the connection's reader task awaiting read().
_MODE = ["push"]


@pytest.fixture(autouse=True, params=["push", "pull"])
def reading_mode(request: pytest.FixtureRequest) -> None:
    _MODE[0] = request.param


def _end(transport: MemoryTransport) -> AsyncTransport:
    return transport if _MODE[0] == "push" else PullOnly(transport)


def _pair() -> tuple[AsyncConnection, AsyncConnection]:
    a_side, b_side = memory_pair()
    return (AsyncConnection(_end(a_side), name="a", request_timeout=WAIT),
            AsyncConnection(_end(b_side), name="b", request_timeout=WAIT))


def _raw() -> tuple[AsyncConnection, RawPeer]:
    ours, theirs = memory_pair()
    return AsyncConnection(_end(ours), name="conn", request_timeout=WAIT), RawPeer(theirs)


def _req(msg_id: int, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def _note(method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def _result(msg_id: int, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


# ---------------------------------------------------------------------------- requests


def test_request_answer_sync_and_async_handlers() -> None:
    async def main() -> None:
        a, b = _pair()

        async def slow(params: Any, call: AsyncInboundCall) -> Any:
            await asyncio.sleep(0)
            assert call.task is asyncio.current_task()
            return {"slow": params}

        b.on_request("echo", lambda params, call: params)
        b.on_request("slow", slow)
        a.start()
        b.start()
        assert await a.request("echo", {"x": 1}) == {"x": 1}
        assert await a.request("slow", [1, 2]) == {"slow": [1, 2]}
        # Concurrent requests each get their own answer.
        results = await asyncio.gather(*(a.request("slow", {"i": i}) for i in range(50)))
        assert results == [{"slow": {"i": i}} for i in range(50)]
        await a.close()
        await b.close()

    run(main)


def test_typed_params_and_results() -> None:
    async def main() -> None:
        a, b = _pair()
        seen: list[Any] = []

        async def read(params: ReadTextFileRequest, call: AsyncInboundCall) -> ReadTextFileResponse:
            seen.append(params)
            return ReadTextFileResponse(content=f"{params.path}:{params.line}")

        b.on_request("fs/read_text_file", read, ReadTextFileRequest)
        a.start()
        b.start()
        result = await a.request(
            "fs/read_text_file", ReadTextFileRequest(session_id="s", path="/x", line=3), ReadTextFileResponse
        )
        assert result == ReadTextFileResponse(content="/x:3")
        assert isinstance(seen[0], ReadTextFileRequest) and seen[0].session_id == "s"
        await a.close()
        await b.close()

    run(main)


def test_error_answers_keep_their_code() -> None:
    async def main() -> None:
        a, b = _pair()

        async def refuse(params: Any, call: AsyncInboundCall) -> Any:
            raise RequestError(-32002, "Resource not found", {"uri": "x"})

        def crash(params: Any, call: AsyncInboundCall) -> Any:
            raise ValueError("secret detail")

        b.on_request("refuse", refuse)
        b.on_request("crash", crash)
        a.start()
        b.start()
        with pytest.raises(RequestError) as info:
            await a.request("refuse")
        assert (info.value.code, info.value.data) == (-32002, {"uri": "x"})
        with pytest.raises(RequestError) as info:
            await a.request("crash")
        assert info.value.code == -32603 and "secret" not in str(info.value)
        with pytest.raises(RequestError) as info:
            await a.request("nobody")
        assert info.value.code == -32601
        await a.close()
        await b.close()

    run(main)


def test_blocking_handlers_run_on_the_executor_not_the_loop() -> None:
    async def main() -> None:
        a, b = _pair()
        loop_thread = threading.get_ident()
        threads: list[int] = []

        def blocking_handler(params: Any, call: AsyncInboundCall) -> Any:
            threads.append(threading.get_ident())
            return {"n": params["n"] * 2}

        def plain_handler(params: Any, call: AsyncInboundCall) -> Any:
            threads.append(threading.get_ident())
            return params

        b.on_request("blocking", b.blocking(blocking_handler))
        b.on_request("plain", plain_handler)
        a.start()
        b.start()
        assert await a.request("blocking", {"n": 21}) == {"n": 42}
        assert await a.request("plain", {"n": 1}) == {"n": 1}
        assert await b.run_blocking(threading.get_ident) != loop_thread
        assert threads[0] != loop_thread  # on a pool thread
        assert threads[1] == loop_thread  # plain functions are called on the loop
        await a.close()
        await b.close()

    before = set(threading.enumerate())
    run(main)
    assert set(threading.enumerate()) <= before  # the owned pool was shut down and joined


# ---------------------------------------------------------------------------- ordering


def test_notifications_handled_in_order_before_the_answer() -> None:
    async def main() -> None:
        a, b = _pair()
        seen: list[int] = []

        async def on_async(params: Any) -> None:
            await asyncio.sleep(0)
            seen.append(params["i"])

        def on_plain(params: Any) -> None:
            seen.append(params["i"])

        async def stream(params: Any, call: AsyncInboundCall) -> Any:
            for i in range(params["n"]):
                b.notify("async" if i % 3 == 0 else "plain", {"i": i})
                if i % 100 == 0:
                    await asyncio.sleep(0)  # spread over several reads
            return "done"

        a.on_notification("async", on_async)
        a.on_notification("plain", on_plain)
        b.on_request("stream", stream)
        a.start()
        b.start()
        assert await a.request("stream", {"n": 1000}) == "done"
        # The answer completed the caller only after every notification before it was handled.
        assert seen == list(range(1000))
        await a.close()
        await b.close()

    run(main)


def test_one_pass_and_general_path_updates_are_handled_in_one_order() -> None:
    """session/update lines written as our encoder writes them take the one-pass decode, others
    (members reordered, spaced, or params only the lenient rebuild accepts) the general path;
    mixed in one read and queued behind an awaiting handler, they are handled in arrival order
    with the same typed values, then the answer."""
    from acp import schema

    async def main() -> None:
        conn, peer = _raw()
        seen: list[Any] = []

        async def on_first(params: Any) -> None:
            await asyncio.sleep(0)  # the rest of the read queues behind this one
            seen.append("first")

        def on_update(params: schema.SessionNotification) -> None:  # plain: runs when called
            seen.append(params)

        conn.on_notification("first", on_first)
        conn.on_notification("session/update", on_update, schema.SessionNotification)
        conn.start()
        waiter = asyncio.ensure_future(conn.request("ping"))
        request = await peer.recv()

        def chunk(i: int) -> dict[str, Any]:
            return {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                                                 "content": {"type": "text", "text": str(i)}}}

        lines: list[bytes | dict[str, Any]] = [_note("first", {})]
        for i in range(30):
            if i % 3 == 0:  # the canonical member order, compact: one pass
                lines.append(b'{"jsonrpc":"2.0","method":"session/update","params":'
                             + json.dumps(chunk(i), separators=(",", ":")).encode() + b"}\n")
            elif i % 3 == 1:  # json.dumps' spacing: the general path
                lines.append(_note("session/update", chunk(i)))
            else:  # params first: the general path
                lines.append({"params": chunk(i), "method": "session/update", "jsonrpc": "2.0"})
        lines.append(_result(request["id"], "pong"))
        peer.send(*lines)
        assert await asyncio.wait_for(waiter, WAIT) == "pong"
        assert seen[0] == "first"
        assert [p.update.content.text for p in seen[1:]] == [str(i) for i in range(30)]
        assert all(isinstance(p, schema.SessionNotification) for p in seen[1:])
        await conn.close()

    run(main)


def test_a_read_of_updates_only_is_handled_in_one_go_in_order_before_the_answer() -> None:
    """A read holding only one-pass updates is decoded in one go: called from the reader while
    nothing is queued, queued behind an awaitable one of them returned; a failing handler costs
    only its own update; a read it cannot take whole (a lenient update) goes line by line; the
    answer read after them completes last."""
    from acp import schema

    async def main() -> None:
        conn, peer = _raw()
        seen: list[str] = []
        target = [0]
        reached = asyncio.Event()

        def record(text: str) -> None:
            seen.append(text)
            if len(seen) >= target[0]:
                reached.set()

        async def handled(count: int) -> None:
            target[0] = count
            reached.clear()
            if len(seen) < count:
                await asyncio.wait_for(reached.wait(), WAIT)

        async def later(text: str) -> None:
            await asyncio.sleep(0)  # what was read after it queues behind it
            record(text)

        def on_update(params: schema.SessionNotification) -> Any:
            update = params.update
            text = update.content.text if isinstance(update, schema.AgentMessageChunk) else type(update).__name__  # type: ignore[union-attr]
            if text == "boom":
                raise RuntimeError("a handler bug")
            if text == "slow":
                return later(text)
            record(text)
            return None

        conn.on_notification("session/update", on_update, schema.SessionNotification)
        taken = count_reads_in_one_go(conn._sched.endpoint)
        conn.start()
        waiter = asyncio.ensure_future(conn.request("ping"))
        request = await peer.recv()
        texts = [str(i) for i in range(100)]
        texts[5], texts[50] = "boom", "slow"
        peer.send(*[chunk_line("s", t) for t in texts])
        await handled(99)
        peer.send(chunk_line("s", "a"), lenient_line("s"), chunk_line("s", "b"))
        await handled(102)
        peer.send(chunk_line("s", "c"), _result(request["id"], "pong"))
        assert await asyncio.wait_for(waiter, WAIT) == "pong"
        assert seen == [t for t in texts if t != "boom"] + ["a", "ToolCall", "b", "c"]
        assert sum(taken) == 100  # the first write went the one-go way
        await conn.close()

    run(main)


def test_a_big_line_is_freed_once_handled_not_when_the_next_message_comes() -> None:
    """The reader (waiting for its next read, or pushed the next bytes) keeps neither the last
    line nor what was decoded from it alive; nor does the dispatcher."""
    import gc
    import os
    import tracemalloc

    import acp

    async def main() -> None:
        conn, peer = _raw()
        got = asyncio.Event()

        async def on_big(params: Any) -> None:  # awaited: the dispatcher's path
            await asyncio.sleep(0)
            got.set()

        conn.on_notification("big", on_big)
        conn.start()
        await yield_loop()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            peer.send(b'{"jsonrpc":"2.0","method":"big","params":{"x":"' + b"a" * 4_000_000 + b'"}}\n')
            await asyncio.wait_for(got.wait(), WAIT)
            await yield_loop()  # the reader and the dispatcher back in their waits
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        sdk = [tracemalloc.Filter(True, os.path.join(os.path.dirname(acp.__file__), "*"), all_frames=True)]
        kept = [d for d in after.filter_traces(sdk).compare_to(before.filter_traces(sdk), "traceback") if d.size_diff > 1_000_000]
        assert kept == [], [d.traceback.format()[-2:] for d in kept]
        await conn.close()

    run(main)


def test_response_completes_only_after_a_slow_notification_handler() -> None:
    async def main() -> None:
        conn, peer = _raw()
        gate = asyncio.Event()
        started = asyncio.Event()
        seen: list[str] = []

        async def on_update(params: Any) -> None:
            started.set()
            await gate.wait()
            seen.append("update")

        conn.on_notification("update", on_update)
        conn.start()
        call = asyncio.ensure_future(conn.request("ask"))
        request = await peer.recv()
        peer.send(_note("update"), _result(request["id"], "answer"))
        await asyncio.wait_for(started.wait(), WAIT)
        await yield_loop()
        assert not call.done()  # held behind the handler that was still running
        gate.set()
        assert await call == "answer"
        assert seen == ["update"]
        await conn.close()

    run(main)


def test_request_starts_only_after_earlier_notifications() -> None:
    async def main() -> None:
        conn, peer = _raw()
        gate = asyncio.Event()
        started = asyncio.Event()
        seen: list[str] = []

        async def on_update(params: Any) -> None:
            started.set()
            await gate.wait()
            seen.append("update")

        async def on_ask(params: Any, call: AsyncInboundCall) -> Any:
            seen.append("ask")
            return "ok"

        conn.on_notification("update", on_update)
        conn.on_request("ask", on_ask)
        conn.start()
        peer.send(_note("update"), _req(1, "ask"))
        await asyncio.wait_for(started.wait(), WAIT)
        await yield_loop()
        assert seen == []  # the request waits for the notification read before it
        gate.set()
        assert await peer.recv() == _result(1, "ok")
        assert seen == ["update", "ask"]
        await conn.close()

    run(main)


def test_deadlock_rule_notification_handler_awaits_its_own_request() -> None:
    async def main() -> None:
        a, b = _pair()
        seen: list[Any] = []

        async def on_update(params: Any) -> None:
            # The answer arrives while this handler runs: it must not be queued behind it.
            seen.append(await a.request("lookup", {"i": params["i"]}))

        async def lookup(params: Any, call: AsyncInboundCall) -> Any:
            return params["i"] * 10

        def stream(params: Any, call: AsyncInboundCall) -> Any:
            for i in range(5):
                b.notify("update", {"i": i})
            return "done"

        a.on_notification("update", on_update)
        b.on_request("lookup", lookup)
        b.on_request("stream", stream)
        a.start()
        b.start()
        assert await a.request("stream") == "done"
        assert seen == [0, 10, 20, 30, 40]
        await a.close()
        await b.close()

    run(main)


def test_on_arrival_runs_before_later_lines_and_can_refuse() -> None:
    async def main() -> None:
        conn, peer = _raw()
        order: list[str] = []

        def arrival(params: Any, call: AsyncInboundCall) -> None:
            if params["v"] == "no":
                raise RequestError(-32600, "refused")
            call.attachment = "set on arrival"
            order.append("arrival")

        async def handler(params: Any, call: AsyncInboundCall) -> Any:
            return call.attachment

        conn.on_request("m", handler, on_arrival=arrival)
        conn.on_notification("cancel", lambda params: order.append("cancel"), immediate=True)
        conn.start()
        peer.send(_req(1, "m", {"v": "yes"}), _note("cancel"), _req(2, "m", {"v": "no"}))
        answers = {}
        for _ in range(2):
            answer = await peer.recv()
            answers[answer["id"]] = answer
        assert answers[1] == _result(1, "set on arrival")
        assert answers[2]["error"] == {"code": -32600, "message": "refused"}
        assert order == ["arrival", "cancel"]
        await conn.close()

    run(main)


# ---------------------------------------------------------------------------- cancellation


def test_inbound_cancel_request_cancels_the_handler_task() -> None:
    async def main() -> None:
        conn, peer = _raw()
        started = asyncio.Event()
        outcome: list[str] = []
        calls: list[AsyncInboundCall] = []

        async def forever(params: Any, call: AsyncInboundCall) -> Any:
            calls.append(call)
            call.on_cancel(lambda: outcome.append("on_cancel"))
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                outcome.append("CancelledError")
                raise

        conn.on_request("forever", forever)
        conn.on_request("echo", lambda params, call: params)
        conn.start()
        peer.send(_req(7, "forever"))
        await asyncio.wait_for(started.wait(), WAIT)
        peer.send(_note("$/cancel_request", {"requestId": 7}))
        answer = await peer.recv()
        assert answer["id"] == 7 and answer["error"]["code"] == -32800
        task = calls[0].task
        assert task is not None
        await asyncio.wait((task,), timeout=WAIT)
        assert task.cancelled()
        assert outcome == ["on_cancel", "CancelledError"]
        assert calls[0].cancelled.is_set() and calls[0].is_answered
        # Nothing more was sent for it; the connection goes on.
        peer.send(_req(8, "echo", ["next"]))
        assert await peer.recv() == _result(8, ["next"])
        await conn.close()

    run(main)


def test_call_cancel_lets_the_facade_answer_itself() -> None:
    async def main() -> None:
        conn, peer = _raw()
        calls: list[AsyncInboundCall] = []

        async def turn(params: Any, call: AsyncInboundCall) -> Any:
            calls.append(call)
            await asyncio.Event().wait()

        def on_cancel_turn(params: Any) -> None:
            call = calls[0]
            call.cancel()
            assert call.answer({"stopReason": "cancelled"})

        conn.on_request("turn", turn)
        conn.on_notification("cancel", on_cancel_turn, immediate=True)
        conn.start()
        peer.send(_req(1, "turn"))
        await yield_loop()
        peer.send(_note("cancel"))
        assert await peer.recv() == _result(1, {"stopReason": "cancelled"})
        task = calls[0].task
        assert task is not None
        await asyncio.wait((task,), timeout=WAIT)
        assert task.cancelled()
        await conn.close()

    run(main)


def test_cancelling_the_awaiting_task_sends_cancel_request() -> None:
    async def main() -> None:
        conn, peer = _raw()
        conn.start()
        call = asyncio.ensure_future(conn.request("slow"))
        request = await peer.recv()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await peer.recv() == _note("$/cancel_request", {"requestId": request["id"]})
        # The late answer is dropped; the next call works.
        peer.send(_result(request["id"], "late"))
        nxt = asyncio.ensure_future(conn.request("next"))
        request2 = await peer.recv()
        peer.send(_result(request2["id"], "fine"))
        assert await nxt == "fine"
        await conn.close()

    run(main)


def test_cancel_request_by_id() -> None:
    async def main() -> None:
        conn, peer = _raw()
        conn.start()
        call = asyncio.ensure_future(conn.request("slow"))
        request = await peer.recv()
        conn.cancel_request(request["id"])
        with pytest.raises(RequestCancelledError):
            await call
        assert await peer.recv() == _note("$/cancel_request", {"requestId": request["id"]})
        await conn.close()

    run(main)


def test_timeout_raises_and_sends_cancel_request() -> None:
    async def main() -> None:
        conn, peer = _raw()
        conn.start()
        with pytest.raises(RequestTimeoutError):
            await conn.request("silent", timeout=0.05)
        request = await peer.recv()
        assert await peer.recv() == _note("$/cancel_request", {"requestId": request["id"]})
        peer.send(_result(request["id"], "late"))  # dropped
        nxt = asyncio.ensure_future(conn.request("next", timeout=None))
        request2 = await peer.recv()
        peer.send(_result(request2["id"], "ok"))
        assert await nxt == "ok"
        await conn.close()

    run(main)


# ---------------------------------------------------------------------------- bad input


def test_bad_input_is_answered_and_the_connection_goes_on() -> None:
    async def main() -> None:
        conn, peer = _raw()
        conn.on_request("typed", lambda params, call: params.path, ReadTextFileRequest)
        conn.on_request("echo", lambda params, call: params)
        conn.start()
        peer.send(b"this is not json\n")
        answer = await peer.recv()
        assert answer["id"] is None and answer["error"]["code"] == -32700
        peer.send(_req(1, "no/such/method"))
        answer = await peer.recv()
        assert answer["id"] == 1 and answer["error"]["code"] == -32601
        peer.send(_req(2, "typed", {"sessionId": 5}))
        answer = await peer.recv()
        assert answer["id"] == 2 and answer["error"]["code"] == -32602
        peer.send(b'{"jsonrpc":"2.0","id":3}\n')
        answer = await peer.recv()
        assert answer["id"] == 3 and answer["error"]["code"] == -32600
        peer.send(_note("unknown/notification"), _req(4, "echo", ["still here"]))
        assert await peer.recv() == _result(4, ["still here"])
        await conn.close()

    run(main)


def test_over_long_line_is_discarded() -> None:
    async def main() -> None:
        ours, theirs = memory_pair()
        conn = AsyncConnection(_end(ours), max_message_bytes=1000)
        peer = RawPeer(theirs)
        conn.on_request("echo", lambda params, call: params)
        conn.start()
        peer.send(_req(1, "echo", ["x" * 5000]), _req(2, "echo", ["small"]))
        assert await peer.recv() == _result(2, ["small"])
        await conn.close()

    run(main)


# ---------------------------------------------------------------------------- close


def _forever(started: asyncio.Event, outcome: list[str]) -> Any:
    """A handler that waits until its task is cancelled, then says whether its call was."""

    async def forever(params: Any, call: AsyncInboundCall) -> Any:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            outcome.append("cancelled" if call.is_cancelled else "not flagged")
            raise

    return forever


def test_close_cancels_running_handlers_and_fails_pending_calls() -> None:
    async def main() -> None:
        a, b = _pair()
        started = asyncio.Event()
        outcome: list[str] = []
        b.on_request("forever", _forever(started, outcome))
        closed: list[str] = []
        b.on_close(lambda: closed.append("b"))
        a.start()
        b.start()
        calls = [asyncio.ensure_future(a.request("forever")) for _ in range(3)]
        await asyncio.wait_for(started.wait(), WAIT)
        await yield_loop()
        await b.close()
        assert outcome == ["cancelled"] * 3
        assert closed == ["b"]
        assert b.is_closed
        # b's transport closed: a read EOF, its pending calls failed "by peer".
        for call in calls:
            with pytest.raises(ConnectionClosedError, match="closed by peer"):
                await call
        with pytest.raises(ConnectionClosedError):
            await a.request("anything")
        with pytest.raises(ConnectionClosedError):
            b.notify("late")
        await b.close()  # idempotent
        await a.close()
        assert closed == ["b"]

    run(main)  # run() checks that no task is left behind


def test_finished_handler_tasks_are_let_go_and_running_ones_kept_for_close() -> None:
    """No done callback per request task: finished ones are dropped in batches, running ones
    stay held, so close still cancels them after many requests came and went."""
    async def main() -> None:
        a, b = _pair()
        started = asyncio.Event()
        outcome: list[str] = []

        async def quick(params: Any, call: AsyncInboundCall) -> Any:
            await asyncio.sleep(0)
            return params

        b.on_request("forever", _forever(started, outcome))
        b.on_request("quick", quick)
        a.start()
        b.start()
        calls = [asyncio.ensure_future(a.request("forever")) for _ in range(3)]
        await asyncio.wait_for(started.wait(), WAIT)
        # Running: the 3 above and the quick one just started (then twice that, the batch
        # size and the one added past it).
        bound = 2 * 4 + aio_connection._TASKS_PRUNED_AT + 1
        for i in range(5 * bound):
            assert await a.request("quick", [i]) == [i]
            assert len(b._tasks) <= bound
        await b.close()
        assert outcome == ["cancelled"] * 3
        for call in calls:
            with pytest.raises(ConnectionClosedError):
                await call
        await a.close()

    run(main)


def test_close_fails_our_pending_calls() -> None:
    async def main() -> None:
        conn, peer = _raw()
        conn.start()
        call = asyncio.ensure_future(conn.request("slow"))
        await peer.recv()
        await conn.close()
        with pytest.raises(ConnectionClosedError, match="^connection closed$"):
            await call

    run(main)


def test_end_of_input_fails_pending_calls_and_runs_on_close_once() -> None:
    async def main() -> None:
        conn, peer = _raw()
        closed: list[int] = []
        conn.on_close(lambda: closed.append(1))
        conn.on_request("echo", lambda params, call: params)
        conn.start()
        call = asyncio.ensure_future(conn.request("never"))
        await peer.recv()
        # The peer sends one last request, then half-closes: the answer still goes out.
        peer.send(_req(1, "echo", ["last"]))
        peer.transport.close_write()
        with pytest.raises(ConnectionClosedError, match="connection closed by peer"):
            await call
        assert await peer.recv() == _result(1, ["last"])
        assert await conn.wait_closed(WAIT)
        assert conn.is_closed
        assert closed == [1]
        await conn.close()
        assert closed == [1]

    run(main)


def test_graceful_close_drains_and_waits_for_handlers() -> None:
    async def main() -> None:
        conn, peer = _raw()
        seen: list[str] = []
        gate = asyncio.Event()

        async def work(params: Any, call: AsyncInboundCall) -> Any:
            await asyncio.wait_for(call.cancelled.wait(), WAIT)  # told at once
            await gate.wait()
            return "finished"

        async def on_update(params: Any) -> None:
            await asyncio.sleep(0)
            seen.append(params)

        conn.on_request("work", work)
        conn.on_notification("update", on_update)
        conn.start()
        peer.send(_req(1, "work"), _note("update", [1]), _note("update", [2]))
        await yield_loop()
        closing = asyncio.ensure_future(conn.close(graceful=True, timeout=WAIT))
        await yield_loop()
        peer.send(_req(2, "work"))  # refused while closing
        refused = await peer.recv()
        assert refused["id"] == 2 and refused["error"]["code"] == -32603
        gate.set()
        assert await peer.recv() == _result(1, "finished")
        await closing
        assert seen == [[1], [2]]

    run(main)


def test_async_with_and_call_later() -> None:
    async def main() -> None:
        a_side, b_side = memory_pair()
        fired = asyncio.Event()
        async with AsyncConnection(_end(a_side)) as a, AsyncConnection(_end(b_side)) as b:
            b.on_request("echo", lambda params, call: params)
            assert await a.request("echo", [5]) == [5]
            a.call_later(0.01, fired.set)
            b.call_later(3600, lambda: None)  # cancelled by close
            await asyncio.wait_for(fired.wait(), WAIT)
        assert a.is_closed and b.is_closed

    run(main)


# ---------------------------------------------------------------------------- backpressure


def test_reader_pauses_while_the_queue_is_full_then_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc_scheduler, "MAX_QUEUED_MESSAGES", 10)

    async def main() -> None:
        conn, peer = _raw()
        gate = asyncio.Event()
        seen: list[int] = []

        async def on_update(params: Any) -> None:
            await gate.wait()
            seen.append(params)

        conn.on_notification("update", on_update)
        conn.on_request("echo", lambda params, call: params)
        conn.start()
        peer.send(*(_note("update", [i]) for i in range(30)))
        await yield_loop()
        peer.send(_note("update", [30]), _req(1, "echo", ["after"]))
        await yield_loop()
        ours = conn._transport
        assert ours.buffered > 0  # type: ignore[attr-defined]  # the reader stopped reading
        gate.set()
        assert await peer.recv() == _result(1, ["after"])
        assert seen == [[i] for i in range(31)]
        await conn.close()

    run(main)


def test_reader_keeps_reading_while_a_notification_handler_awaits_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc_scheduler, "MAX_QUEUED_MESSAGES", 4)

    async def main() -> None:
        conn, peer = _raw()
        seen: list[Any] = []

        async def on_update(params: Any) -> None:
            if params == [0]:
                seen.append(await conn.request("ask"))
            seen.append(params)

        conn.on_notification("update", on_update)
        conn.start()
        peer.send(*(_note("update", [i]) for i in range(20)))
        request = await peer.recv()
        peer.send(_result(request["id"], "answer"))
        for _ in range(100):
            if len(seen) == 21:
                break
            await yield_loop(1)
        assert seen == ["answer", *([i] for i in range(20))]
        await conn.close()

    run(main)


# ---------------------------------------------------------------------------- more edges


@pytest.mark.parametrize("where", ["request", "notification"])
def test_close_from_inside_handlers_leaves_nothing_behind(where: str) -> None:
    async def main() -> None:
        conn, peer = _raw()
        closed = asyncio.Event()

        async def shut(params: Any, call: AsyncInboundCall | None = None) -> Any:
            await conn.close()
            closed.set()
            return "unsent"

        conn.on_request("shut", shut)
        conn.on_notification("shut/note", shut)
        conn.start()
        peer.send(_req(1, "shut") if where == "request" else _note("shut/note"))
        await asyncio.wait_for(closed.wait(), WAIT)
        assert conn.is_closed
        with pytest.raises(EOFError):
            await peer.recv()  # nothing was answered after close
        await yield_loop()

    run(main)


def test_a_handler_task_cancelled_by_someone_else_is_still_answered() -> None:
    async def main() -> None:
        conn, peer = _raw()

        async def self_cancel(params: Any, call: AsyncInboundCall) -> Any:
            asyncio.current_task().cancel()  # type: ignore[union-attr]
            await asyncio.sleep(0)

        conn.on_request("m", self_cancel)
        conn.start()
        peer.send(_req(1, "m"))
        answer = await peer.recv()
        assert answer["id"] == 1 and answer["error"]["code"] == -32800
        await conn.close()

    run(main)


def test_unknown_handlers_and_duplicate_ids() -> None:
    async def main() -> None:
        conn, peer = _raw()
        seen: list[Any] = []
        gate = asyncio.Event()

        async def fallback(method: str, params: Any, call: AsyncInboundCall) -> Any:
            await gate.wait()
            return {"method": method, "params": params}

        async def fallback_note(method: str, params: Any) -> None:
            seen.append((method, params))

        conn.on_unknown_request(fallback)
        conn.on_unknown_notification(fallback_note)
        conn.start()
        peer.send(_req(1, "x/y", {"a": 1}), _req(1, "x/z"), _note("n/m", [2]))
        refused = await peer.recv()
        assert refused["id"] == 1 and refused["error"]["code"] == -32600  # duplicate id
        gate.set()
        assert await peer.recv() == _result(1, {"method": "x/y", "params": {"a": 1}})
        assert seen == [("n/m", [2])]
        await conn.close()

    run(main)


def test_malformed_answer_fails_its_caller_now() -> None:
    async def main() -> None:
        conn, peer = _raw()
        conn.start()
        call = asyncio.ensure_future(conn.request("m", timeout=None))
        request = await peer.recv()
        peer.send({"id": request["id"], "result": {}})  # no "jsonrpc": "2.0"
        with pytest.raises(RequestError) as info:
            await call
        assert info.value.code == -32603
        await conn.close()

    run(main)


def test_requests_refused_locally() -> None:
    async def main() -> None:
        conn, peer = _raw()
        with pytest.raises(ConnectionClosedError, match="not started"):
            await conn.request("m")
        conn.start()
        with pytest.raises(TypeError):
            await conn.request("m", {"bad": object()})
        assert not conn._sched.endpoint.pending  # nothing left waiting
        await conn.close()

    run(main)


def test_wire_tap_sees_both_directions() -> None:
    async def main() -> None:
        ours, theirs = memory_pair()
        lines: list[tuple[str, bytes]] = []
        conn = AsyncConnection(_end(ours), wire_tap=lambda direction, line: lines.append((direction, line)))
        peer = RawPeer(theirs)
        conn.on_request("echo", lambda params, call: params)
        conn.start()
        peer.send(_req(1, "echo", [1]))
        await peer.recv()
        conn.notify("note", {"x": 1})
        await peer.recv()
        assert [d for d, _ in lines] == ["in", "out", "out"]
        assert b'"method":"note"' in lines[2][1]
        await conn.close()

    run(main)


def test_notifications_are_batched_and_precede_the_answer() -> None:
    async def main() -> None:
        ours, theirs = memory_pair()
        conn = AsyncConnection(_end(ours))
        peer = RawPeer(theirs)

        def stream(params: Any, call: AsyncInboundCall) -> Any:
            for i in range(100):
                conn.notify("chunk", {"i": i})
            return "done"

        conn.on_request("stream", stream)
        conn.start()
        peer.send(_req(1, "stream"))
        while not theirs.buffered:
            await yield_loop(1)
        assert len(theirs._chunks) == 1  # 100 notifications and the answer: one write
        for i in range(100):
            assert await peer.recv() == _note("chunk", {"i": i})
        assert await peer.recv() == _result(1, "done")
        await conn.close()

    run(main)


def test_a_users_executor_is_used_and_not_shut_down() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2, thread_name_prefix="users") as pool:

        async def main() -> None:
            a_side, b_side = memory_pair()
            a = AsyncConnection(_end(a_side))
            b = AsyncConnection(_end(b_side), executor=pool)
            b.on_request("where", b.blocking(lambda params, call: threading.current_thread().name))
            a.start()
            b.start()
            assert b.executor is pool
            assert (await a.request("where")).startswith("users")
            await a.close()
            await b.close()

        run(main)
        assert pool.submit(lambda: 5).result(WAIT) == 5


def test_end_of_input_handles_what_was_queued_first() -> None:
    async def main() -> None:
        conn, peer = _raw()
        order: list[str] = []

        async def on_update(params: Any) -> None:
            await asyncio.sleep(0)
            order.append("update")

        conn.on_notification("update", on_update)
        conn.on_close(lambda: order.append("closed"))
        conn.start()
        peer.send(_note("update"), _note("update"))
        peer.transport.close_write()
        assert await conn.wait_closed(WAIT)
        assert order == ["update", "update", "closed"]
        assert not await AsyncConnection(memory_pair()[0]).wait_closed(0)  # never started
        await conn.close()

    run(main)


def test_wait_closed_times_out_while_input_goes_on() -> None:
    async def main() -> None:
        conn, peer = _raw()
        conn.start()
        assert not await conn.wait_closed(0.01)
        await conn.close()
        assert await conn.wait_closed(0)

    run(main)


def test_drain_waits_for_a_slow_reader() -> None:
    async def main() -> None:
        conn, peer = _raw()
        conn.start()
        for i in range(3000):
            conn.notify("chunk", {"i": i, "pad": "x" * 1000})  # ~3 MiB, over the high-water mark
        draining = asyncio.ensure_future(conn.drain())
        await yield_loop()
        assert not draining.done()  # the peer has read nothing yet
        for i in range(3000):
            assert (await peer.recv())["params"]["i"] == i
        await asyncio.wait_for(draining, WAIT)
        await conn.close()

    run(main)


def test_request_handlers_started_from_a_peers_notification_handler_are_not_serial() -> None:
    async def main() -> None:
        a, b = _pair()
        marks: list[bool] = []

        async def on_note(params: Any) -> None:
            # Awaited by a's dispatcher: a's requests from here are serial (deadlock rule)...
            assert aio_connection._serial.get()
            await a.request("ask")

        async def ask(params: Any, call: AsyncInboundCall) -> Any:
            # ...but b's handler for it is an ordinary request handler.
            marks.append(aio_connection._serial.get())
            return "ok"

        a.on_notification("note", on_note)
        b.on_request("ask", ask)
        b.on_request("go", lambda params, call: b.notify("note") or "went")
        a.start()
        b.start()
        assert await a.request("go") == "went"
        assert marks == [False]
        await a.close()
        await b.close()

    run(main)


def test_only_awaited_notification_handlers_run_marked_serial() -> None:
    # The dispatcher keeps the mark from one awaited handler to the next: a plain handler, the
    # start of a request handler and a plain fan-out queued between them must not see it.
    async def main() -> None:
        conn, peer = _raw()
        marks: list[tuple[str, bool]] = []
        release = asyncio.Event()

        async def slow(params: Any) -> None:
            marks.append(("slow", aio_connection._serial.get()))
            await release.wait()  # everything below queues behind this one

        async def on_async(params: Any) -> None:
            marks.append(("async", aio_connection._serial.get()))

        def on_plain(params: Any) -> None:
            marks.append(("plain", aio_connection._serial.get()))

        def fan_out(params: Any) -> Any:  # a plain function returning a coroutine
            marks.append(("fan-out", aio_connection._serial.get()))
            return on_async(params)

        def plain_request(params: Any, call: AsyncInboundCall) -> Any:
            marks.append(("request", aio_connection._serial.get()))
            return "ok"

        conn.on_notification("slow", slow)
        conn.on_notification("async", on_async)
        conn.on_notification("plain", on_plain)
        conn.on_notification("fan-out", fan_out)
        conn.on_request("req", plain_request)
        conn.start()
        lines = [_note("slow"), _note("async"), _note("async"), _note("plain"), _note("async"),
                 _req(1, "req"), _note("async"), _note("fan-out"), _note("async")]
        peer.send(*lines)
        for _ in range(100):
            if marks:
                break
            await yield_loop()
        release.set()
        assert (await peer.recv())["result"] == "ok"
        for _ in range(100):
            if len(marks) == len(lines) + 1:
                break
            await yield_loop()
        assert marks == [("slow", True), ("async", True), ("async", True), ("plain", False), ("async", True),
                         ("request", False), ("async", True), ("fan-out", False), ("async", True), ("async", True)]
        assert not aio_connection._serial.get()
        await conn.close()

    run(main)


def test_timeouts_of_several_durations_each_expire_on_time() -> None:
    async def main() -> None:
        conn, peer = _raw()
        conn.start()
        loop = asyncio.get_running_loop()
        # Answered calls leave nothing behind in the timeout bookkeeping.
        answered = asyncio.ensure_future(conn.request("quick", timeout=30))
        request = await peer.recv()
        peer.send(_result(request["id"], "done"))
        assert await answered == "done"
        started = loop.time()
        long_call = asyncio.ensure_future(conn.request("long", timeout=30))
        short_calls = [asyncio.ensure_future(conn.request("short", timeout=0.05)) for _ in range(3)]
        later_short = asyncio.ensure_future(conn.request("short", timeout=0.2))
        for call in short_calls:
            with pytest.raises(RequestTimeoutError):
                await call
        assert 0.04 <= loop.time() - started < 5
        assert not later_short.done() and not long_call.done()
        with pytest.raises(RequestTimeoutError):
            await later_short
        assert not long_call.done()
        ids = [(await peer.recv())["id"] for _ in range(5)]  # long, then the 4 short ones
        cancels = [(await peer.recv())["params"]["requestId"] for _ in range(4)]
        assert cancels == ids[1:]  # every short call, in order; not the long one
        peer.send(_result(ids[0], "long done"))
        assert await long_call == "long done"
        assert conn._sched.next_deadline() is None
        await conn.close()

    run(main)


def test_close_cancelled_midway_still_closes() -> None:
    async def main() -> None:
        conn, peer = _raw()
        started = asyncio.Event()
        closed: list[bool] = []

        async def stubborn(params: Any, call: AsyncInboundCall) -> Any:
            started.set()
            await asyncio.Event().wait()  # ignores the cancelled flag

        conn.on_request("stubborn", stubborn)
        conn.on_close(lambda: closed.append(True))
        conn.start()
        pending = asyncio.ensure_future(conn.request("never", timeout=None))
        peer.send(_req(1, "stubborn"))
        await asyncio.wait_for(started.wait(), WAIT)
        closing = asyncio.ensure_future(conn.close(graceful=True, timeout=None))  # would wait forever
        await yield_loop()
        assert not closing.done()
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        assert conn.is_closed and closed == [True]
        with pytest.raises(ConnectionClosedError):
            await pending
        await conn.close()  # idempotent, returns at once
        await yield_loop()  # the transport's close finishes in the background

    run(main)


def test_run_blocking_hands_back_results_and_exceptions() -> None:
    async def main() -> None:
        conn, _ = _raw()
        conn.start()
        loop_thread = threading.get_ident()
        assert await conn.run_blocking(lambda a, b: (a + b, threading.get_ident() != loop_thread), 2, 3) == (5, True)
        with pytest.raises(ZeroDivisionError):
            await conn.run_blocking(lambda: 1 / 0)
        # Cancelling the waiting task drops the late result; the pool keeps working.
        gate = threading.Event()
        waiting = asyncio.ensure_future(conn.run_blocking(gate.wait, WAIT))
        await yield_loop()
        waiting.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await conn.blocking(lambda x, *, y: x * y)(3, y=4) == 12
        await conn.close()

    before = set(threading.enumerate())
    run(main)
    assert set(threading.enumerate()) <= before


def test_acp_aio_imports_no_threading() -> None:
    import pathlib
    import re

    import acp.aio

    root = pathlib.Path(acp.aio.__file__).parent
    for path in root.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(import threading|from threading import)", source, re.M), path
