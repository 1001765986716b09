"""The connection engine over real bytes: ordering, the deadlock rule, cancellation, timeouts,
bad input, close. Nothing here waits by sleeping: events and joins with timeouts only."""

from __future__ import annotations

import gc
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin before 3.11
from typing import Any

import pytest

from acp.connection import Connection, InboundCall
from acp.errors import (
    ConnectionClosedError,
    RequestCancelledError,
    RequestError,
    RequestTimeoutError,
)
from acp.transport import memory_pair
from acp.transport.base import Transport
from tests.helpers.fault_support import ManualCancel
from tests.helpers.one_go import chunk_line, count_reads_in_one_go, lenient_line

WAIT = 10.0


@pytest.fixture
def pair(no_thread_leak: None) -> Iterator[tuple[Connection, Connection]]:
    """Two connections joined by a memory pair; started by the test after registering."""
    a_side, b_side = memory_pair()
    a = Connection(a_side, name="a", request_timeout=WAIT)
    b = Connection(b_side, name="b", request_timeout=WAIT)
    yield a, b
    a.close()
    b.close()


class RawPeer:
    """The far end of a transport driven by hand: write raw bytes, read whole JSON lines."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._buffer = b""

    def send(self, data: bytes | dict[str, Any]) -> None:
        self.transport.write(data if isinstance(data, bytes) else json.dumps(data).encode() + b"\n")

    def recv(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            chunk = self.transport.read()
            if not chunk:
                raise EOFError
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        result: dict[str, Any] = json.loads(line)
        return result


@pytest.fixture
def raw(no_thread_leak: None) -> Iterator[tuple[Connection, RawPeer]]:
    ours, theirs = memory_pair()
    conn = Connection(ours, name="engine", request_timeout=WAIT)
    conn.on_request("echo", lambda params, call: params)
    yield conn, RawPeer(theirs)
    conn.close()
    theirs.close()


def test_request_round_trip_and_result_types(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    b.on_request("echo", lambda params, call: params)
    b.on_request("nothing", lambda params, call: None)
    a.start()
    b.start()
    assert a.request("echo", {"x": [1, "two"]}) == {"x": [1, "two"]}
    assert a.request("nothing") == {}  # a handler returning None answers {}
    assert a.request_future("echo", {"y": 1}).result(WAIT) == {"y": 1}


def test_ordering_slow_notification_handler(pair: tuple[Connection, Connection]) -> None:
    """When a response reaches its caller, every notification sent before it was handled."""
    a, b = pair
    seen: list[int] = []
    gate = threading.Event()

    def on_chunk(params: Any) -> None:
        if params["i"] == 0:
            gate.wait(WAIT)  # the first handler is slow: everything behind it must wait
        seen.append(params["i"])

    def stream(params: Any, call: InboundCall) -> Any:
        for k in range(50):
            b.notify("chunk", {"i": k})
        return {"sent": 50}

    a.on_notification("chunk", on_chunk)
    b.on_request("stream", stream)
    a.start()
    b.start()
    future = a.request_future("stream")
    with pytest.raises(FutureTimeout):
        future.result(0.2)  # held behind the slow handler, as the guarantee requires
    gate.set()
    assert future.result(WAIT) == {"sent": 50}
    assert seen == list(range(50))


def test_inbound_request_waits_for_earlier_notifications(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    seen: list[int] = []
    answers: list[list[int]] = []
    a.on_notification("chunk", lambda p: seen.append(p["i"]))
    a.on_request("snapshot", lambda p, call: answers.append(list(seen)) or {})

    def stream_then_ask(params: Any, call: InboundCall) -> Any:
        for k in range(200):
            b.notify("chunk", {"i": k})
        return b.request("snapshot")

    b.on_request("go", stream_then_ask)
    a.start()
    b.start()
    a.request("go")
    assert answers == [list(range(200))]


def test_deadlock_rule_notification_handler_makes_a_request(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    got: list[Any] = []
    done = threading.Event()

    def on_note(params: Any) -> None:
        got.append(a.request("echo", {"from": "handler"}))  # blocks the dispatcher meanwhile
        done.set()

    a.on_notification("note", on_note)
    a.on_notification("after", lambda p: got.append(p))
    a.on_request("ping", lambda p, call: p)
    b.on_request("echo", lambda p, call: p)
    a.start()
    b.start()
    b.notify("note", {})
    b.notify("after", {"n": 1})
    assert done.wait(WAIT)
    b.request("ping", {})  # answered after "after" was handled (it arrived first)
    assert got == [{"from": "handler"}, {"n": 1}]


def test_burst_of_10000_notifications_complete_and_in_order(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    seen: list[int] = []
    a.on_notification("chunk", lambda p: seen.append(p["i"]))
    b.on_request("stream", lambda p, call: [b.notify("chunk", {"i": k}) for k in range(10_000)] and {})
    a.start()
    b.start()
    a.request("stream")
    assert seen == list(range(10_000))


def test_one_pass_and_general_path_updates_are_handled_in_one_order(raw: tuple[Connection, RawPeer]) -> None:
    """session/update lines as our encoder writes them take the one-pass decode, others (spaced,
    reordered, params only the lenient rebuild accepts, a request of that name) the general
    path; sent in one write they are handled in arrival order, typed, before the answer."""
    from acp import schema

    conn, peer = raw
    seen: list[Any] = []
    conn.on_notification("session/update", seen.append, schema.SessionNotification)
    conn.start()
    future = conn.request_future("ping")
    request = peer.recv()

    def chunk(i: int) -> dict[str, Any]:
        return {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": str(i)}}}

    lines = []
    for i in range(30):
        if i % 3 == 0:  # compact, our member order: one pass
            lines.append(b'{"jsonrpc":"2.0","method":"session/update","params":'
                         + json.dumps(chunk(i), separators=(",", ":")).encode() + b"}")
        elif i % 3 == 1:  # json.dumps' spacing
            lines.append(json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": chunk(i)}).encode())
        else:  # params first
            lines.append(json.dumps({"params": chunk(i), "method": "session/update", "jsonrpc": "2.0"}).encode())
    tool_call = {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x", "status": 7}  # lenient
    lines.append(b'{"jsonrpc":"2.0","method":"session/update","params":'
                 + json.dumps({"sessionId": "s", "update": tool_call}, separators=(",", ":")).encode() + b"}")
    lines.append(b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"},"id":99}')  # a request
    lines.append(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": "pong"}).encode())
    peer.send(b"\n".join(lines) + b"\n")
    assert future.result(WAIT) == "pong"
    assert [p.update.content.text for p in seen[:30]] == [str(i) for i in range(30)]
    assert isinstance(seen[30].update, schema.ToolCall) and seen[30].update.status is None
    assert len(seen) == 31
    assert peer.recv()["id"] == 99  # answered (method not found), not handled as an update


def test_a_read_of_updates_only_is_handled_in_one_go_in_order_before_the_answer(raw: tuple[Connection, RawPeer]) -> None:
    """A read holding only one-pass updates is decoded in one go (OnePass.decode_lines) and
    queued as one item; a read it cannot take whole (a lenient update between two good ones)
    falls back line by line. Either way: arrival order, a failing handler costs only its own
    update, and the answer read after them completes last."""
    from acp import schema

    conn, peer = raw
    seen: list[str] = []
    arrived = threading.Condition()

    def on_update(params: schema.SessionNotification) -> None:
        update = params.update
        text = update.content.text if isinstance(update, schema.AgentMessageChunk) else type(update).__name__  # type: ignore[union-attr]
        if text == "boom":
            raise RuntimeError("a handler bug")
        with arrived:
            seen.append(text)
            arrived.notify_all()

    def handled(count: int) -> bool:
        with arrived:
            return arrived.wait_for(lambda: len(seen) >= count, WAIT)

    conn.on_notification("session/update", on_update, schema.SessionNotification)
    taken = count_reads_in_one_go(conn._sched.endpoint)
    conn.start()
    future = conn.request_future("ping")
    request = peer.recv()
    peer.send(b"".join(chunk_line("s", str(i) if i != 7 else "boom") for i in range(200)))
    assert handled(199)
    peer.send(chunk_line("s", "a") + lenient_line("s") + chunk_line("s", "b"))
    assert handled(202)
    peer.send(chunk_line("s", "c") + json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": "pong"}).encode() + b"\n")
    assert future.result(WAIT) == "pong"
    assert seen == [str(i) for i in range(200) if i != 7] + ["a", "ToolCall", "b", "c"]
    assert sum(taken) == 200  # the first write went the one-go way (in however many reads)


def test_a_big_line_is_freed_once_handled_not_when_the_next_message_comes(no_thread_leak: None) -> None:
    """Neither the reader (blocked in its next read) nor the dispatcher (waiting for its next
    batch) keeps the last line, or what was decoded from it, alive."""
    import os
    import queue
    import tracemalloc

    import acp

    ours, theirs = memory_pair()
    line_read = threading.Event()  # the read that ended the big line returned
    reader_back = threading.Event()  # the reader asked for more after that read
    gets = threading.Semaphore(0)

    class Watched:  # the transport, telling when the reader is back for more
        description = "watched"

        def read(self) -> bytes:
            if line_read.is_set():
                reader_back.set()
            data = ours.read()
            if data.endswith(b'"}}\n'):
                line_read.set()
            return data

        def write(self, data: bytes | bytearray) -> None:
            ours.write(data)

        def close(self) -> None:
            ours.close()

    class WatchedQueue(queue.SimpleQueue):  # type: ignore[type-arg]
        def get(self, block: bool = True, timeout: float | None = None) -> Any:
            gets.release()
            return super().get(block, timeout)

    conn = Connection(Watched(), name="engine", request_timeout=WAIT)  # type: ignore[arg-type]
    conn._wakeups = WatchedQueue()
    got = threading.Event()
    conn.on_notification("big", lambda params: got.set())
    try:
        conn.start()
        assert gets.acquire(timeout=WAIT)  # the dispatcher waits for its first batch
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            theirs.write(b'{"jsonrpc":"2.0","method":"big","params":{"x":"' + b"a" * 4_000_000 + b'"}}\n')
            assert got.wait(WAIT)
            # Back in their waits: the reader for more bytes, the dispatcher for its next batch.
            assert reader_back.wait(WAIT) and gets.acquire(timeout=WAIT)
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        sdk = [tracemalloc.Filter(True, os.path.join(os.path.dirname(acp.__file__), "*"), all_frames=True)]
        kept = [d for d in after.filter_traces(sdk).compare_to(before.filter_traces(sdk), "traceback") if d.size_diff > 1_000_000]
        assert kept == [], [d.traceback.format()[-2:] for d in kept]
    finally:
        conn.close()
        theirs.close()


def test_1000_concurrent_requests_from_8_threads(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    b.on_request("square", lambda p, call: {"v": p["v"] * p["v"]})
    a.start()
    b.start()

    def worker(base: int) -> list[bool]:
        return [a.request("square", {"v": base + k}) == {"v": (base + k) ** 2} for k in range(125)]

    with ThreadPoolExecutor(8) as pool:
        results = [ok for chunk in pool.map(worker, range(0, 1000, 125)) for ok in chunk]
    assert len(results) == 1000 and all(results)


# ---------------------------------------------------------------- polling for an answer (wait_spin)


def test_wait_spin_must_be_zero_or_more_seconds() -> None:
    ours, theirs = memory_pair()
    try:
        with pytest.raises(ValueError, match="wait_spin"):
            Connection(ours, wait_spin=-1)
        assert Connection(ours, wait_spin=0).wait_spin == 0
    finally:
        ours.close()
        theirs.close()


@pytest.fixture
def polling(no_thread_leak: None) -> Iterator[tuple[Connection, RawPeer]]:
    """A connection whose blocking requests poll for their answer for up to an hour: any wait
    in these tests is spent polling, never asleep on the lock."""
    ours, theirs = memory_pair()
    conn = Connection(ours, name="polling", request_timeout=WAIT, wait_spin=3600.0)
    yield conn, RawPeer(theirs)
    conn.close()
    theirs.close()


def test_a_polling_request_gets_its_answer_and_a_second_waiter_sleeps_meanwhile(polling: tuple[Connection, RawPeer]) -> None:
    conn, peer = polling
    conn.start()
    results: dict[str, Any] = {}
    threads = [
        threading.Thread(target=lambda k=k: results.__setitem__(k, conn.request("ask", {"k": k})), name=f"caller-{k}")
        for k in ("one", "two")
    ]
    for thread in threads:
        thread.start()
    asked = [peer.recv(), peer.recv()]  # both sent: one thread polls, the other sleeps
    for msg in reversed(asked):
        peer.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"k": msg["params"]["k"]}})
    for thread in threads:
        thread.join(WAIT)
    assert results == {"one": {"k": "one"}, "two": {"k": "two"}}


def test_with_one_cpu_a_request_sleeps_at_once(polling: tuple[Connection, RawPeer], monkeypatch: pytest.MonkeyPatch) -> None:
    import acp.polling as waiting

    polls: list[float] = []
    monkeypatch.setattr(waiting, "SEVERAL_CPUS", False)
    monkeypatch.setattr(waiting, "spin_for", lambda lock, seconds: polls.append(seconds))
    conn, peer = polling
    conn.start()
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(conn.request("ask", {})), name="caller")
    thread.start()
    peer.send({"jsonrpc": "2.0", "id": peer.recv()["id"], "result": {"ok": True}})
    thread.join(WAIT)
    assert answer == [{"ok": True}]
    assert polls == []  # wait_spin is an hour, but nobody polled


def test_a_polling_request_still_times_out_within_its_timeout(polling: tuple[Connection, RawPeer]) -> None:
    conn, peer = polling
    conn.start()
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError):
        conn.request("never", timeout=0.2)  # the hour of polling is cut to the timeout
    assert time.monotonic() - started < WAIT
    assert peer.recv()["method"] == "never"
    cancel = peer.recv()
    assert cancel["method"] == "$/cancel_request"


def test_a_polling_request_is_cancelled_at_once(polling: tuple[Connection, RawPeer]) -> None:
    conn, peer = polling
    conn.start()
    source = ManualCancel()  # fired from the test thread

    errors: list[BaseException] = []

    def call() -> None:
        try:
            conn.request("slow", timeout=None, cancel=source)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=call, name="caller")
    thread.start()
    assert peer.recv()["method"] == "slow"  # sent...
    assert source.registered.wait(WAIT)  # ...and the caller registered its cancel (it polls now)
    source.fire()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert [type(e) for e in errors] == [RequestCancelledError]


def test_timeout_sends_cancel_request_and_drops_late_answer(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    release = threading.Event()
    cancelled = threading.Event()

    def slow(params: Any, call: InboundCall) -> Any:
        call.on_cancel(cancelled.set)
        release.wait(WAIT)
        return {"late": True}

    b.on_request("slow", slow)
    b.on_request("echo", lambda p, call: p)
    a.start()
    b.start()
    with pytest.raises(RequestTimeoutError):
        a.request("slow", timeout=0.2)
    assert cancelled.wait(WAIT)  # the peer saw $/cancel_request
    release.set()
    assert a.request("echo", {"still": "works"}) == {"still": "works"}


def test_future_timeout_and_cancel(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    seen_cancel = threading.Semaphore(0)
    b.on_request("hang", lambda p, call: call.on_cancel(seen_cancel.release) or call.cancelled.wait(WAIT) and None)
    a.start()
    b.start()
    future = a.request_future("hang", timeout=0.2)
    with pytest.raises(RequestTimeoutError):
        future.result(WAIT)
    assert seen_cancel.acquire(timeout=WAIT)
    future = a.request_future("hang", timeout=None)
    assert future.cancel()
    assert seen_cancel.acquire(timeout=WAIT)


def test_inbound_cancel_request_answers_32800(raw: tuple[Connection, RawPeer]) -> None:
    conn, peer = raw
    started = threading.Event()
    finished = threading.Event()

    def hang(params: Any, call: InboundCall) -> Any:
        started.set()
        assert call.cancelled.wait(WAIT)
        finished.set()
        return {"too": "late"}

    conn.on_request("hang", hang)
    conn.start()
    peer.send({"jsonrpc": "2.0", "id": "h1", "method": "hang", "params": {}})
    assert started.wait(WAIT)
    peer.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "h1"}})
    answer = peer.recv()
    assert answer["id"] == "h1" and answer["error"]["code"] == -32800
    assert finished.wait(WAIT)
    peer.send({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": {"k": 1}})
    assert peer.recv() == {"jsonrpc": "2.0", "id": 2, "result": {"k": 1}}  # no second answer to h1


def test_cancel_request_from_our_side(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    entered = threading.Event()
    b.on_request("hang", lambda p, call: entered.set() or call.cancelled.wait(WAIT) and None)
    a.start()
    b.start()
    future = a.request_future("hang", timeout=None)
    assert entered.wait(WAIT)
    msg_id = next(iter(a._sched.endpoint.pending))
    a.cancel_request(msg_id)
    with pytest.raises(RequestCancelledError):
        future.result(WAIT)


def test_error_answers_keep_code_message_data(pair: tuple[Connection, Connection]) -> None:
    a, b = pair

    def deliberate(params: Any, call: InboundCall) -> Any:
        raise RequestError(-32002, "Resource not found", {"uri": "file:///x"})

    def unexpected(params: Any, call: InboundCall) -> Any:
        raise ValueError("secret detail")

    b.on_request("deliberate", deliberate)
    b.on_request("unexpected", unexpected)
    a.start()
    b.start()
    with pytest.raises(RequestError) as info:
        a.request("deliberate")
    assert (info.value.code, info.value.message, info.value.data) == (-32002, "Resource not found", {"uri": "file:///x"})
    with pytest.raises(RequestError) as info:
        a.request("unexpected")
    assert info.value.code == -32603 and info.value.message == "Internal error"
    assert "secret" not in repr(info.value.data)
    with pytest.raises(RequestError) as info:
        a.request("no/such/method")
    assert info.value.code == -32601


@pytest.mark.parametrize(
    ("line", "code", "answer_id"),
    [
        (b"this is not json\n", -32700, None),
        (b'{"jsonrpc":"2.0","id":5,"method":7}\n', -32600, 5),
        (b'[1]\n', -32600, None),
        (b'"just a string"\n', -32600, None),
        (b'{"jsonrpc":"2.0","id":6,"method":"nope","params":{}}\n', -32601, 6),
        (b'{"jsonrpc":"2.0","id":7,"method":"typed","params":{"n":"not an int"}}\n', -32602, 7),
    ],
)
def test_bad_input_is_answered_and_the_connection_goes_on(
    raw: tuple[Connection, RawPeer], line: bytes, code: int, answer_id: Any
) -> None:
    import msgspec

    class Typed(msgspec.Struct):
        n: int

    conn, peer = raw
    conn.on_request("typed", lambda p, call: {"n": p.n}, Typed)
    conn.start()
    peer.send(line)
    answer = peer.recv()
    assert answer["id"] == answer_id and answer["error"]["code"] == code
    if code == -32602:
        assert "$.n" in answer["error"]["message"]  # names the field
    peer.send({"jsonrpc": "2.0", "id": 100, "method": "echo", "params": {"ok": 1}})
    assert peer.recv() == {"jsonrpc": "2.0", "id": 100, "result": {"ok": 1}}


def test_a_batch_array_gets_one_answer_per_request(raw: tuple[Connection, RawPeer]) -> None:
    conn, peer = raw
    conn.start()
    peer.send(b'[{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}},'
              b'{"jsonrpc":"2.0","id":2,"method":"echo","params":{"b":2}}]\n')
    answers = sorted((peer.recv(), peer.recv()), key=lambda m: m["id"])
    assert [a["result"] for a in answers] == [{"a": 1}, {"b": 2}]


def test_unknown_notifications_are_ignored(raw: tuple[Connection, RawPeer]) -> None:
    conn, peer = raw
    conn.start()
    peer.send({"jsonrpc": "2.0", "method": "_vendor/ping", "params": {}})
    peer.send({"jsonrpc": "2.0", "method": "unknown/thing"})
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {}})
    assert peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": {}}


def test_over_long_line_is_discarded(no_thread_leak: None) -> None:
    ours, theirs = memory_pair()
    conn = Connection(ours, name="engine", max_message_bytes=1024)
    conn.on_request("echo", lambda p, call: p)
    conn.start()
    peer = RawPeer(theirs)
    writer = threading.Thread(target=peer.send, args=(b'{"x":"' + b"y" * 5_000_000 + b'"}\n',))
    writer.start()  # one writer at a time: the transport's contract
    writer.join(WAIT)
    assert not writer.is_alive()
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"after": True}})
    assert peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": {"after": True}}
    conn.close()
    theirs.close()


def test_pending_calls_fail_at_once_on_eof(raw: tuple[Connection, RawPeer]) -> None:
    conn, peer = raw
    conn.start()
    futures = [conn.request_future("hang", timeout=None) for _ in range(5)]
    for _ in futures:
        peer.recv()
    peer.transport.close()
    for future in futures:
        with pytest.raises(ConnectionClosedError):
            future.result(WAIT)
    with pytest.raises(ConnectionClosedError):
        conn.request("echo")
    with pytest.raises(ConnectionClosedError):
        conn.notify("x")


def test_graceful_close_drains_queued_notifications(no_thread_leak: None) -> None:
    received = threading.Semaphore(0)
    a_side, b_side = memory_pair()
    a = Connection(a_side, name="a", wire_tap=lambda d, line: received.release() if d == "in" else None)
    b = Connection(b_side, name="b")
    gate = threading.Event()
    seen: list[int] = []

    def on_chunk(p: Any) -> None:
        gate.wait(WAIT)
        seen.append(p["i"])

    a.on_notification("chunk", on_chunk)
    b.on_request("stream", lambda p, call: [b.notify("chunk", {"i": k}) for k in range(100)] and {})
    a.start()
    b.start()
    future = a.request_future("stream")
    for _ in range(101):  # 100 chunks and the answer have arrived
        assert received.acquire(timeout=WAIT)
    # Lines are queued once their whole read was routed: a line of a later read proves it.
    b.notify("marker", {})
    assert received.acquire(timeout=WAIT)
    closer = threading.Thread(target=a.close, kwargs={"graceful": True, "timeout": WAIT})
    closer.start()
    gate.set()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert seen == list(range(100))
    assert future.result(WAIT) == {}
    b.close()


def test_close_is_immediate_idempotent_and_leaks_no_thread(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    entered = threading.Event()
    b.on_request("hang", lambda p, call: entered.set() or call.cancelled.wait(WAIT) and None)
    a.start()
    b.start()
    future = a.request_future("hang", timeout=None)
    assert entered.wait(WAIT)
    b.close()  # the running handler sees cancelled; the pool is joined
    b.close()
    with pytest.raises(ConnectionClosedError):
        future.result(WAIT)
    a.close()
    a.close()


def test_close_lets_a_write_under_way_end_and_writes_what_was_left_behind_it(
    no_thread_leak: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A notification left to another thread's write (it held the write lock) was dropped when
    # close() closed the transport under that writer: an agent that closed right after its last
    # update lost it about one time in twenty.
    monkeypatch.setattr("acp.connection._STOP_GRACE", WAIT)  # the wait below is an event's, not the clock's
    ours, theirs = memory_pair()
    in_write, release = threading.Event(), threading.Event()

    class HeldWrite:
        """The transport, whose write of the request "first" waits for ``release``."""

        def __getattr__(self, name: str) -> Any:
            return getattr(ours, name)

        def write(self, data: bytes) -> None:
            if b'"first"' in data:
                in_write.set()
                assert release.wait(WAIT)
            ours.write(data)

    conn = Connection(HeldWrite(), name="a").start()  # type: ignore[arg-type]
    writer = threading.Thread(target=lambda: conn.request_future("first", timeout=None))
    writer.start()
    assert in_write.wait(WAIT)
    conn.notify("second")
    closer = threading.Thread(target=conn.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # close waits for the write under way
    release.set()
    closer.join(WAIT)
    writer.join(WAIT)
    peer = RawPeer(theirs)
    assert [peer.recv()["method"], peer.recv()["method"]] == ["first", "second"]
    theirs.close()


def test_user_executor_is_not_shut_down(no_thread_leak: None) -> None:
    user_pool = ThreadPoolExecutor(2, thread_name_prefix="user")
    a_side, b_side = memory_pair()
    a = Connection(a_side, name="a").start()
    b = Connection(b_side, name="b", executor=user_pool)
    names: list[str] = []
    b.on_request("who", lambda p, call: names.append(threading.current_thread().name) or {})
    b.start()
    a.request("who")
    a.close()
    b.close()
    assert names[0].startswith("user")
    assert user_pool.submit(lambda: 42).result(WAIT) == 42
    user_pool.shutdown()


def test_wire_tap_sees_every_line(no_thread_leak: None) -> None:
    taps: list[tuple[str, bytes]] = []
    a_side, b_side = memory_pair()
    a = Connection(a_side, name="a", wire_tap=lambda d, line: taps.append((d, line)))
    b = Connection(b_side, name="b")
    b.on_request("echo", lambda p, call: p)
    a.start()
    b.start()
    a.request("echo", {"t": 1})
    a.close()
    b.close()
    assert [d for d, _ in taps] == ["out", "in"]
    assert json.loads(taps[0][1])["method"] == "echo"
    assert json.loads(taps[1][1])["result"] == {"t": 1}


def test_wire_tap_to_a_jsonl_file(tmp_path: Any, no_thread_leak: None) -> None:
    path = tmp_path / "wire.jsonl"
    a_side, b_side = memory_pair()
    a = Connection(a_side, name="a", wire_tap=str(path))
    b = Connection(b_side, name="b")
    b.on_request("echo", lambda p, call: p)
    a.start()
    b.start()
    a.request("echo", {"t": 2})
    b.close()
    a.close()
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["dir"] for e in entries] == ["out", "in"]
    assert entries[0]["msg"]["params"] == {"t": 2}
    assert entries[1]["msg"]["result"] == {"t": 2}
    assert all(isinstance(e["t"], float) for e in entries)


def test_a_blocked_handler_on_the_reader_does_not_stop_reading(pair: tuple[Connection, Connection]) -> None:
    """A quick handler runs on the reader thread; one that blocks on something other than a
    request must not keep the connection from reading what would unblock it."""
    a, b = pair
    go = threading.Event()
    b.on_notification("go", lambda p: go.set())
    b.on_request("wait_for_go", lambda p, call: {"went": go.wait(WAIT)})
    a.start()
    b.start()
    future = a.request_future("wait_for_go")
    a.notify("go", {})
    assert future.result(WAIT) == {"went": True}


def test_many_handlers_that_call_back_while_others_stream(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    a.on_request("double", lambda p, call: {"v": p["v"] * 2})
    seen: list[int] = []
    a.on_notification("tick", lambda p: seen.append(p["k"]))

    def work(p: Any, call: InboundCall) -> Any:
        b.notify("tick", {"k": p["k"]})
        return b.request("double", {"v": p["k"]})

    b.on_request("work", work)
    a.start()
    b.start()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda k: a.request("work", {"k": k}), range(200)))
    assert results == [{"v": 2 * k} for k in range(200)]
    assert sorted(seen) == list(range(200))


def test_a_long_handler_on_the_reader_hands_reading_over_while_the_clock_waits_for_something_else(
    raw: tuple[Connection, RawPeer],
) -> None:
    # The clock thread is in a long timed wait for a timer (not idle, not watching parks) when a
    # request's handler starts on the reader and blocks. Reading must still move to another
    # thread, so that the next request is read and answered while the first handler runs.
    # (Before: only an idle clock was poked, and reading stayed parked until the timer came.)
    conn, peer = raw
    release, started = threading.Event(), threading.Event()

    def block(params: Any, call: InboundCall) -> Any:
        started.set()
        release.wait(WAIT)
        return {"released": release.is_set()}

    conn.on_request("block", block)
    conn.start()
    conn.call_later(3600.0, lambda: None)  # the clock now waits an hour for this timer
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "block", "params": {}})
    assert started.wait(WAIT)  # running (on the reader: it was alone in its read)
    peer.send({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": {"n": 2}})
    answers: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: [answers.append(peer.recv()) for _ in range(2)], daemon=True)
    reader.start()
    deadline = time.monotonic() + WAIT
    while not answers and time.monotonic() < deadline:
        reader.join(0.05)
    assert answers and answers[0] == {"jsonrpc": "2.0", "id": 2, "result": {"n": 2}}  # while 1 still runs
    release.set()
    reader.join(WAIT)
    assert answers[1] == {"jsonrpc": "2.0", "id": 1, "result": {"released": True}}

