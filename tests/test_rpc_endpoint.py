"""The sans-I/O core, rpc.Endpoint: no threads, no pipes, no I/O at all.

Two Endpoints form a :class:`Pair` (as h11's ConnectionPair): the lines one side produces are
fed, as bytes, into the other. Every rule the runtimes rely on is checked here once: ids,
"pop wins" for pending calls, refusals, ``$/cancel_request``, bad input, answer-once on every
path, the encoding fallbacks and the layering of acp/rpc itself.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from acp import rpc
from acp.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosedError,
    RequestError,
)


class Point(msgspec.Struct):
    x: int
    y: int = 0


def wire(lines: list[bytes]) -> list[dict[str, Any]]:
    """Lines as the peer would read them (each one exactly one JSON line)."""
    out = []
    for line in lines:
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        out.append(json.loads(line))
    return out


def sent(ep: rpc.Endpoint) -> list[dict[str, Any]]:
    """What ``ep`` decided while receiving (``data_to_send``), decoded."""
    return wire(ep.data_to_send())


def receive(ep: rpc.Endpoint, data: bytes) -> list[Any]:
    """Feed ``data`` into ``ep`` the way a runtime does and return what each message gave:
    a Start, a cancelled call, a ``(fn, args)`` for a notification, a taken Pending or an
    ErrorResponse standing in for a malformed answer (None where a receive_* returned None)."""
    framer = rpc.LineFramer()
    events: list[Any] = []
    for line in framer.feed(data):
        assert isinstance(line, bytes)
        decoded = rpc.decode_line(line)
        for msg in decoded if isinstance(decoded, list) else [decoded]:
            if type(msg) is rpc.Request:
                events.append(ep.receive_request(msg))
            elif type(msg) is rpc.Notification and msg.method == rpc.CANCEL_REQUEST:
                events.append(ep.receive_cancel(msg))
            elif type(msg) is rpc.Notification:
                events.append(ep.notification_params(msg))
            elif type(msg) is rpc.Invalid:
                events.append(ep.receive_invalid(msg))
            else:
                assert isinstance(msg, (rpc.Response, rpc.ErrorResponse))
                events.append(complete(ep, msg))
    return events


def complete(ep: rpc.Endpoint, msg: rpc.ResponseLike) -> rpc.Pending | None:
    """Deliver an answer as a runtime does: take the call and store its outcome."""
    pending = ep.take(msg.id)
    if pending is not None:
        if isinstance(msg, rpc.Response):
            pending.raw = msg.result
        else:
            pending.error = ep.response_error(msg)
    return pending


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **obj}).encode() + b"\n"


class Pair:
    """A client and an agent Endpoint joined by bytes."""

    def __init__(self) -> None:
        self.client = rpc.Endpoint(name="client")
        self.agent = rpc.Endpoint(name="agent")

    def peer(self, ep: rpc.Endpoint) -> rpc.Endpoint:
        return self.agent if ep is self.client else self.client

    def send(self, ep: rpc.Endpoint, *lines: bytes | None) -> list[Any]:
        """Lines ``ep`` produced, received by the other side; then whatever the other side
        decided while receiving goes back to ``ep``. Returns the receiver's events."""
        data = b"".join(chunk for chunk in lines if chunk is not None)
        other = self.peer(ep)
        events = receive(other, data)
        back = other.data_to_send()
        if back:
            receive(ep, b"".join(back))
        return events

    def call(self, ep: rpc.Endpoint, method: str, params: Any = None, result_type: Any = None) -> rpc.Pending:
        pending = ep.register(method, result_type, waiter=None)
        self.send(ep, ep.request_line(pending, params))
        return pending


def echo(params: Any, call: Any) -> Any:
    return params


# ---------------------------------------------------------------------- a full round trip


def test_a_request_goes_and_its_answer_comes_back() -> None:
    pair = Pair()
    pair.agent.on_request("echo", echo, Point)
    pending = pair.client.register("echo", Point, waiter="the runtime's")
    assert pending.waiter == "the runtime's" and pair.client.pending == {pending.id: pending}
    [start] = pair.send(pair.client, pair.client.request_line(pending, Point(1, 2)))
    call, handler, _raw, params = start
    assert (call.id, call.method, params) == (pending.id, "echo", rpc.UNDECODED)
    assert pair.agent.inbound == {call.id: call} and not call.is_answered
    fn, args = pair.agent.request_params(start)
    assert fn is echo and args == (Point(1, 2), call)
    [taken] = pair.send(pair.agent, pair.agent.answer(call, fn(*args)))
    assert taken is pending and pair.client.pending == {} and pair.agent.inbound == {}
    assert pair.client.outcome(pending) == Point(1, 2)
    assert call.is_answered


def test_an_error_answer_raises_in_the_caller_with_code_message_data() -> None:
    pair = Pair()
    pair.agent.on_request("fail", echo)
    pending = pair.client.register("fail", None, None)
    [start] = pair.send(pair.client, pair.client.request_line(pending, None))
    pair.send(pair.agent, pair.agent.answer_error(start[0], -32001, "nope", {"why": 1}))
    with pytest.raises(RequestError) as info:
        pair.client.outcome(pending)
    assert (info.value.code, info.value.message, info.value.data) == (-32001, "nope", {"why": 1})


def test_notifications_carry_their_decoded_params() -> None:
    pair = Pair()
    got: list[Any] = []
    pair.agent.on_notification("note", got.append, Point)
    [(fn, args)] = pair.send(pair.client, pair.client.notification_line("note", {"x": 3}))
    assert fn == got.append and args == (Point(3),)
    assert pair.agent.data_to_send() == []  # notifications are never answered


# ---------------------------------------------------------------------- ids and pending calls


def test_ids_count_up_from_one_and_are_never_reused() -> None:
    ep = rpc.Endpoint()
    first = [ep.register("m", None, None).id for _ in range(3)]
    assert first == [1, 2, 3]
    assert ep.abandon(2) is not None and ep.take(3) is not None
    assert ep.register("m", None, None).id == 4
    assert json.loads(ep.request_line(ep.pending[4], {"a": 1})) == {
        "jsonrpc": "2.0", "id": 4, "method": "m", "params": {"a": 1},
    }


def test_whoever_pops_a_pending_call_completes_it() -> None:
    ep = rpc.Endpoint()
    a = ep.register("a", None, None)
    b = ep.register("b", None, None)
    assert ep.peek(a.id) is a and ep.peek(a.id) is a  # peeking leaves it in place
    assert ep.take(a.id) is a
    assert ep.take(a.id) is None and ep.abandon(a.id) is None  # taken: nobody else gets it
    assert ep.abandon(b.id) is b
    assert ep.take(b.id) is None and ep.abandon(b.id) is None  # abandoned: a late answer is dropped
    assert ep.pending == {}


@pytest.mark.parametrize("msg_id", ["1", None, 1.0, True])
def test_an_answer_naming_no_int_id_takes_nothing(msg_id: Any) -> None:
    ep = rpc.Endpoint()
    ep.register("m", None, None)
    assert ep.take(msg_id) is None and ep.peek(msg_id) is None
    assert list(ep.pending) == [1]


def test_abandoning_gives_the_cancel_line_until_closed() -> None:
    ep = rpc.Endpoint()
    pending = ep.register("slow", None, None)
    assert ep.abandon(pending.id) is pending
    assert wire([ep.cancel_line(pending.id)]) == [  # type: ignore[list-item]
        {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}},
    ]
    ep.close()
    assert ep.cancel_line(pending.id) is None


def test_params_that_cannot_be_encoded_leave_nothing_pending() -> None:
    ep = rpc.Endpoint()
    pending = ep.register("m", None, None)
    with pytest.raises(TypeError):
        ep.request_line(pending, {"x": object()})
    assert ep.pending == {}


def test_a_late_answer_to_an_abandoned_call_is_dropped() -> None:
    pair = Pair()
    pair.agent.on_request("slow", echo)
    pending = pair.client.register("slow", None, None)
    [start] = pair.send(pair.client, pair.client.request_line(pending, None))
    pair.client.abandon(pending.id)
    assert pair.send(pair.agent, pair.agent.answer(start[0], {"late": True})) == [None]
    assert pending.raw is None and pending.error is None


# ---------------------------------------------------------------------- end of input and close


def test_end_of_input_fails_every_pending_call_and_refuses_new_ones() -> None:
    ep = rpc.Endpoint()
    calls = [ep.register("m", None, None) for _ in range(3)]
    assert ep.can_send
    assert sorted(p.id for p in ep.receive_eof()) == [c.id for c in calls]
    assert ep.pending == {} and not ep.can_send
    error = ep.closed_error()
    assert isinstance(error, ConnectionClosedError) and str(error) == "connection closed by peer"
    with pytest.raises(ConnectionClosedError, match="connection closed by peer"):
        ep.register("m", None, None)
    with pytest.raises(ConnectionClosedError):
        ep.notification_line("n", None)


def test_inbound_requests_stay_answerable_after_end_of_input() -> None:
    ep = rpc.Endpoint()
    ep.on_request("m", echo)
    [start] = receive(ep, line({"id": 5, "method": "m"}))
    ep.receive_eof()
    assert wire([ep.answer(start[0], {"ok": 1})]) == [{"jsonrpc": "2.0", "id": 5, "result": {"ok": 1}}]  # type: ignore[list-item]


def test_close_takes_every_call_in_both_directions() -> None:
    ep = rpc.Endpoint()
    ep.on_request("m", echo)
    out = ep.register("out", None, None)
    starts = receive(ep, line({"id": 1, "method": "m"}) + line({"id": "two", "method": "m"}))
    inbound, pending = ep.close()
    assert sorted(str(c.id) for c in inbound) == ["1", "two"] and pending == [out]
    assert all(c.is_answered for c in inbound) and ep.inbound == {} and ep.pending == {}
    assert str(ep.closed_error()) == "connection closed"
    # Nothing more goes out for them, whoever tries.
    assert ep.answer(starts[0][0], {}) is None and ep.answer_error(starts[1][0], -1, "x") is None
    with pytest.raises(ConnectionClosedError, match="^connection closed$"):
        ep.register("m", None, None)


def test_close_after_end_of_input_says_connection_closed() -> None:
    ep = rpc.Endpoint()
    ep.receive_eof()
    ep.close()
    assert str(ep.closed_error()) == "connection closed"


def test_a_close_racing_a_register_leaves_nothing_behind() -> None:
    """``register`` checks again after its insert: a close between the first check and the
    insert (another thread, in the threaded runtime) must not leave the entry behind."""
    ep = rpc.Endpoint()
    failed: list[rpc.Pending] = []

    class ClosesFirst(dict):  # type: ignore[type-arg]
        def __setitem__(self, key: Any, value: Any) -> None:
            failed.extend(ep.close()[1])  # as if another thread closed just before this insert
            super().__setitem__(key, value)

    ep.pending = ClosesFirst()
    with pytest.raises(ConnectionClosedError, match="^connection closed$"):
        ep.register("m", None, None)
    assert ep.pending == {} and failed == []


def test_a_close_right_after_a_register_takes_the_call_to_fail_it() -> None:
    ep = rpc.Endpoint()
    failed: list[rpc.Pending] = []

    class ClosesAfter(dict):  # type: ignore[type-arg]
        def __setitem__(self, key: Any, value: Any) -> None:
            super().__setitem__(key, value)
            failed.extend(ep.close()[1])

    ep.pending = ClosesAfter()
    pending = ep.register("m", None, None)  # the closer popped it: the closer completes it
    assert failed == [pending] and ep.pending == {}


def test_graceful_close_refuses_new_requests_but_lets_running_ones_answer() -> None:
    ep = rpc.Endpoint()
    ep.on_request("m", echo)
    [start] = receive(ep, line({"id": 1, "method": "m"}))
    assert ep.start_closing() == [start[0]]
    assert receive(ep, line({"id": 2, "method": "m"})) == [None]
    assert sent(ep) == [{"jsonrpc": "2.0", "id": 2, "error": {"code": INTERNAL_ERROR, "message": "Connection closing"}}]
    assert ep.answer(start[0], {}) is not None


# ---------------------------------------------------------------------- receiving requests


def test_a_duplicate_id_is_refused_while_the_first_runs() -> None:
    ep = rpc.Endpoint()
    ep.on_request("m", echo)
    [start] = receive(ep, line({"id": 1, "method": "m"}))
    assert receive(ep, line({"id": 1, "method": "m"})) == [None]
    assert sent(ep) == [{
        "jsonrpc": "2.0", "id": 1,
        "error": {"code": INVALID_REQUEST, "message": "Invalid request", "data": {"reason": "duplicate request id"}},
    }]
    assert ep.inbound == {1: start[0]}  # the first one is untouched
    ep.answer(start[0], {})
    assert receive(ep, line({"id": 1, "method": "m"}))[0] is not None  # answered: the id is free again


@pytest.mark.parametrize("register", ["nothing", "notification"])
def test_an_unknown_method_is_refused(register: str) -> None:
    ep = rpc.Endpoint()
    if register == "notification":
        ep.on_notification("m", print)  # a notification method called as a request
    assert receive(ep, line({"id": 3, "method": "m"})) == [None]
    assert sent(ep) == [{
        "jsonrpc": "2.0", "id": 3,
        "error": {"code": METHOD_NOT_FOUND, "message": "Method not found", "data": {"method": "m"}},
    }]
    assert ep.inbound == {}


def test_the_fallback_takes_unknown_requests_with_their_method() -> None:
    ep = rpc.Endpoint()
    fallback = object()
    ep.fallback_request = lambda method, params, call: fallback
    [start] = receive(ep, line({"id": 3, "method": "ext/x", "params": {"a": [1]}}))
    fn, args = ep.request_params(start)
    assert fn is ep.fallback_request and args == ("ext/x", {"a": [1]}, start[0])


def test_bad_params_via_the_arrival_hook_are_refused_at_once() -> None:
    ep = rpc.Endpoint()
    hooked: list[Any] = []
    ep.on_request("m", echo, Point, on_arrival=lambda params, call: hooked.append(params))
    refused = receive(ep, line({"id": 1, "method": "m", "params": {"x": "not an int"}})
                      + b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"x":"\xff"}}\n')
    assert refused == [None, None] and hooked == [] and ep.inbound == {}
    bad_type, bad_utf8 = sent(ep)
    assert bad_type["id"] == 1 and bad_type["error"]["code"] == INVALID_PARAMS
    assert bad_type["error"]["message"].startswith("Invalid params: ")
    assert bad_utf8["id"] == 2 and bad_utf8["error"]["code"] == PARSE_ERROR
    assert bad_utf8["error"]["message"] == "Parse error" and "not valid JSON" in bad_utf8["error"]["data"]["reason"]
    # Good params: the hook sees them decoded, and the Start carries them (no second decode).
    [start] = receive(ep, line({"id": 3, "method": "m", "params": {"x": 1}}))
    assert hooked == [Point(1)] and start[3] == Point(1)
    assert ep.request_params(start)[1] == (Point(1), start[0])


def test_an_arrival_hook_refuses_with_its_request_error_or_an_internal_error() -> None:
    ep = rpc.Endpoint()

    def refuse(params: Any, call: Any) -> None:
        raise RequestError(-32002, "no such session", {"sessionId": params["s"]})

    def crash(params: Any, call: Any) -> None:
        raise ValueError("a bug")

    ep.on_request("refuse", echo, on_arrival=refuse)
    ep.on_request("crash", echo, on_arrival=crash)
    assert receive(ep, line({"id": 1, "method": "refuse", "params": {"s": "x"}})
                   + line({"id": 2, "method": "crash"})) == [None, None]
    assert [m["error"] for m in sent(ep)] == [
        {"code": -32002, "message": "no such session", "data": {"sessionId": "x"}},
        {"code": INTERNAL_ERROR, "message": "Internal error"},  # details stay in our log
    ]


def test_bad_params_found_when_the_handler_starts_raise_the_error_to_answer() -> None:
    ep = rpc.Endpoint()
    ep.on_request("m", echo, Point)
    ep.fallback_request = lambda method, params, call: None
    starts = receive(ep, line({"id": 1, "method": "m", "params": {"y": 1}})
                     + b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"x":"\xff"}}\n'
                     + b'{"jsonrpc":"2.0","id":3,"method":"other","params":{"x":"\xff"}}\n')
    codes = []
    for start in starts:
        with pytest.raises(RequestError) as info:
            ep.request_params(start)
        codes.append(info.value.code)
        assert ep.answer_exception(start[0], info.value) is not None
    assert codes == [INVALID_PARAMS, PARSE_ERROR, PARSE_ERROR]
    assert ep.inbound == {}


# ---------------------------------------------------------------------- $/cancel_request


@pytest.mark.parametrize("call_id", [7, "seven"])
def test_cancel_answers_minus_32800_once_and_returns_the_call(call_id: Any) -> None:
    ep = rpc.Endpoint()
    ep.on_request("m", echo)
    [start] = receive(ep, line({"id": call_id, "method": "m"}))
    cancel = line({"method": "$/cancel_request", "params": {"requestId": call_id}})
    assert receive(ep, cancel) == [start[0]]
    assert start[0].is_answered and ep.inbound == {}
    assert sent(ep) == [{"jsonrpc": "2.0", "id": call_id,
                         "error": {"code": REQUEST_CANCELLED, "message": "Request cancelled"}}]
    assert receive(ep, cancel) == [None] and sent(ep) == []  # a second cancel: nothing
    assert ep.answer(start[0], {"late": 1}) is None  # the handler's late answer is dropped


def test_cancel_for_an_unknown_or_answered_id_is_ignored() -> None:
    ep = rpc.Endpoint()
    ep.on_request("m", echo)
    [start] = receive(ep, line({"id": 1, "method": "m"}))
    ep.answer(start[0], {})
    assert receive(ep, line({"method": "$/cancel_request", "params": {"requestId": 1}})
                   + line({"method": "$/cancel_request", "params": {"requestId": 99}})) == [None, None]
    assert sent(ep) == []


@pytest.mark.parametrize("params", [None, {}, {"requestId": [1]}, {"requestId": {"a": 1}}, {"requestId": 1.0},
                                    {"requestId": True}, {"requestId": None}, [1]])
def test_a_malformed_cancel_is_ignored(params: Any) -> None:
    ep = rpc.Endpoint()
    ep.on_request("m", echo)
    receive(ep, line({"id": 1, "method": "m"}))  # 1 == 1.0 == True: only an int names it
    msg = {"method": "$/cancel_request"} if params is None else {"method": "$/cancel_request", "params": params}
    assert receive(ep, line(msg)) == [None]
    assert sent(ep) == [] and 1 in ep.inbound


def test_a_cancel_whose_params_are_not_json_is_ignored() -> None:
    ep = rpc.Endpoint()
    msg = rpc.Notification(rpc.CANCEL_REQUEST, msgspec.Raw(b'{"requestId": \xff'))
    assert ep.receive_cancel(msg) is None and ep.data_to_send() == []


def test_cancel_round_trip_between_two_endpoints() -> None:
    pair = Pair()
    pair.agent.on_request("slow", echo)
    pending = pair.client.register("slow", None, None)
    [start] = pair.send(pair.client, pair.client.request_line(pending, None))
    assert pair.client.abandon(pending.id) is pending
    # The agent answers -32800; the client already gave up, so that answer is dropped.
    assert pair.send(pair.client, pair.client.cancel_line(pending.id)) == [start[0]]
    assert pair.client.pending == {} and pending.error is None and pair.agent.inbound == {}


# ---------------------------------------------------------------------- invalid input


def test_a_malformed_answer_is_never_answered_and_fails_its_caller() -> None:
    ep = rpc.Endpoint()
    pending = ep.register("m", None, None)
    [failed] = receive(ep, line({"id": pending.id, "result": 1, "error": {"code": 1, "message": "both"}}))
    assert sent(ep) == []  # its id is ours: answering it could complete an unrelated request of the peer
    assert isinstance(failed, rpc.ErrorResponse) and failed.id == pending.id
    assert failed.error.code == INTERNAL_ERROR and failed.error.message.startswith("malformed answer from the peer: ")
    assert complete(ep, failed) is pending  # delivered like any answer
    with pytest.raises(RequestError) as info:
        ep.outcome(pending)
    assert info.value.code == INTERNAL_ERROR


def test_a_malformed_answer_without_an_int_id_is_dropped() -> None:
    ep = rpc.Endpoint()
    assert receive(ep, line({"id": "s", "result": 1, "error": {"code": 1, "message": "x"}})) == [None]
    assert sent(ep) == []


def test_other_invalid_lines_are_answered() -> None:
    ep = rpc.Endpoint()
    assert receive(ep, b"{not json\n" + line({"id": 4, "method": 5})) == [None, None]
    parse, invalid = sent(ep)
    assert parse["id"] is None and parse["error"]["code"] == PARSE_ERROR and parse["error"]["message"] == "Parse error"
    assert invalid["id"] == 4 and invalid["error"]["code"] == INVALID_REQUEST
    assert invalid["error"]["message"] == "Invalid request" and invalid["error"]["data"]["reason"]


def test_notification_params_that_do_not_decode_are_dropped() -> None:
    ep = rpc.Endpoint()
    ep.on_notification("n", print, Point)
    assert receive(ep, line({"method": "n", "params": {"x": "no"}}) + line({"method": "unknown"})) == [None, None]
    unknown: list[Any] = []
    ep.fallback_notification = lambda method, params: unknown.append((method, params))
    [(fn, args)] = receive(ep, line({"method": "ext/n", "params": [1]}))
    assert fn is ep.fallback_notification and args == ("ext/n", [1])
    assert ep.data_to_send() == []


# ---------------------------------------------------------------------- answer once


def _start(ep: rpc.Endpoint, call_id: Any = 1) -> rpc.InboundRequest:
    if "m" not in ep.handlers:
        ep.on_request("m", echo)
    [start] = receive(ep, line({"id": call_id, "method": "m"}))
    return start[0]  # type: ignore[no-any-return]


def _cancel(ep: rpc.Endpoint, call: rpc.InboundRequest) -> bytes | None:
    got = ep.receive_cancel(rpc.Notification(rpc.CANCEL_REQUEST, msgspec.Raw(json.dumps({"requestId": call.id}).encode())))
    out = ep.data_to_send()
    assert (got is call) == bool(out)
    return out[0] if out else None


def _close(ep: rpc.Endpoint, call: rpc.InboundRequest) -> bytes | None:
    inbound, _ = ep.close()
    assert inbound in ([call], [])
    return None  # close answers nothing: it only takes


PATHS: dict[str, Any] = {
    "answer": lambda ep, call: ep.answer(call, {"r": 1}),
    "answer_error": lambda ep, call: ep.answer_error(call, -32001, "x"),
    "answer_exception": lambda ep, call: ep.answer_exception(call, KeyError("bug")),
    "cancel": _cancel,
    "close": _close,
}


@pytest.mark.parametrize("first", list(PATHS))
@pytest.mark.parametrize("second", list(PATHS))
def test_only_the_first_path_to_claim_a_call_answers_it(first: str, second: str) -> None:
    ep = rpc.Endpoint()
    call = _start(ep)
    out = [PATHS[first](ep, call), PATHS[second](ep, call)]
    assert call.is_answered and ep.inbound == {}
    assert out[1] is None
    assert (out[0] is None) == (first == "close")
    assert not ep.claim(call)


@pytest.mark.parametrize("winner", ["answer", "answer_error", "answer_exception", "cancel"])
@pytest.mark.parametrize("interloper", list(PATHS))
def test_a_path_running_between_another_ones_claim_and_its_removal_sends_nothing(winner: str, interloper: str) -> None:
    """The interleaving of issue #13: path A has taken the call but not yet removed it from
    the table when path B (a ``$/cancel_request`` read meanwhile, close, a second answer)
    looks. B must find it answered: no KeyError, exactly one answer."""
    ep = rpc.Endpoint()
    call = _start(ep)
    late: list[bytes | None] = []

    class Interleaves(dict):  # type: ignore[type-arg]
        def pop(self, key: Any, *default: Any) -> Any:
            if not late:  # the first removal (path A's): run path B right here
                late.append(PATHS[interloper](ep, call))
            return super().pop(key, *default)

    ep.inbound = Interleaves(ep.inbound)
    first = PATHS[winner](ep, call)
    assert late == [None]  # B ran inside A's claim and sent nothing
    assert first is not None and len(wire([first])) == 1  # A's answer is the one
    assert ep.inbound == {} and call.is_answered


def test_claim_all_skips_calls_already_claimed() -> None:
    ep = rpc.Endpoint()
    a, b = _start(ep, 1), _start(ep, 2)
    ep.answer(a, {})
    assert ep.claim_all() == [b] and ep.claim_all() == []


def test_is_answered_follows_the_claim() -> None:
    call = rpc.InboundRequest(1, "m")
    assert not call.is_answered and call.attachment is None
    assert rpc.Endpoint().claim(call) and call.is_answered


# ---------------------------------------------------------------------- payloads


def test_a_result_that_cannot_be_encoded_is_answered_internal_error() -> None:
    ep = rpc.Endpoint()
    call = _start(ep)
    assert wire([ep.answer(call, {"x": object()})]) == [  # type: ignore[list-item]
        {"jsonrpc": "2.0", "id": 1, "error": {"code": INTERNAL_ERROR, "message": "Internal error"}},
    ]


def test_error_data_that_cannot_be_encoded_is_answered_internal_error() -> None:
    ep = rpc.Endpoint()
    call = _start(ep)
    assert wire([ep.answer_error(call, -32001, "x", {"x": object()})]) == [  # type: ignore[list-item]
        {"jsonrpc": "2.0", "id": 1, "error": {"code": INTERNAL_ERROR, "message": "Internal error"}},
    ]


def test_a_none_result_is_written_as_an_empty_object() -> None:
    ep = rpc.Endpoint()
    assert wire([ep.answer(_start(ep), None)]) == [{"jsonrpc": "2.0", "id": 1, "result": {}}]  # type: ignore[list-item]


def test_results_decode_as_the_call_asked() -> None:
    ep = rpc.Endpoint()
    typed = ep.register("m", Point, None)
    plain = ep.register("m", None, None)
    assert ep.decode_result(typed, msgspec.Raw(b'{"x": 2}')) == Point(2)
    assert ep.decode_result(plain, msgspec.Raw(b'{"x": 2}')) == {"x": 2}
    with pytest.raises(RequestError, match="m: malformed result") as info:
        ep.decode_result(typed, msgspec.Raw(b'{"x": "no"}'))
    assert info.value.code == INTERNAL_ERROR
    assert rpc.decoder_for(Point) is rpc.decoder_for(Point) and rpc.decoder_for(None) is rpc.ANY_DECODER


def test_typed_decode_keeps_the_lenient_rebuild_and_the_empty_payloads() -> None:
    """The one-call payload decode (``rpc.payload_decoder``) used for params and results: a
    payload msgspec alone refuses still gets the schema's lenient rebuild, an absent, ``{}`` or
    ``null`` payload decodes as ``{}``, and a malformed one still raises."""
    from acp import schema

    handler = rpc.Handler(print, schema.SessionNotification, True)
    update = b'{"sessionUpdate":"tool_call","toolCallId":"t","title":"x","status":7}'
    value = handler.decode(msgspec.Raw(b'{"sessionId":"s","update":' + update + b"}"))
    assert isinstance(value.update, schema.ToolCall) and value.update.status is None  # default-on-error
    empty = rpc.Handler(print, schema.ListSessionsRequest, False)
    for raw in (b"", b"{}", b"null"):
        assert empty.decode(msgspec.Raw(raw)) == schema.ListSessionsRequest()
    with pytest.raises(msgspec.ValidationError):
        handler.decode(msgspec.Raw(b'{"sessionId":5}'))
    ep = rpc.Endpoint()
    pending = ep.register("session/new", schema.NewSessionResponse, None)
    assert ep.decode_result(pending, msgspec.Raw(b'{"sessionId":"s","modes":7}')).session_id == "s"


def test_the_hot_notification_gets_a_one_pass_decode_only_with_a_typed_handler() -> None:
    from acp import schema

    ep = rpc.Endpoint()
    assert ep.one_pass is None
    ep.on_notification(rpc.HOT_NOTIFICATION, print)  # untyped: nothing to fuse
    assert ep.one_pass is None
    ep.on_notification(rpc.HOT_NOTIFICATION, print, schema.SessionNotification, immediate=True)
    assert ep.one_pass is None
    ep.on_notification("other", print, schema.SessionNotification)
    assert ep.one_pass is None
    ep.on_notification(rpc.HOT_NOTIFICATION, print, schema.SessionNotification)
    assert ep.one_pass is not None and ep.one_pass.handler is ep.handlers[rpc.HOT_NOTIFICATION]
    ep.on_request(rpc.HOT_NOTIFICATION, print)  # replaced by a request handler
    assert ep.one_pass is None


def test_one_pass_decodes_what_the_general_path_would_and_misses_the_rest() -> None:
    from acp import schema

    ep = rpc.Endpoint()
    ep.on_notification(rpc.HOT_NOTIFICATION, print, schema.SessionNotification)
    one_pass = ep.one_pass
    assert one_pass is not None
    update = b'{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}'
    good = b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b"}"
    assert good.startswith(one_pass.prefix)
    general = rpc.decode_line(good)
    assert isinstance(general, rpc.Notification)
    assert one_pass.decode(good) == ep.handlers[rpc.HOT_NOTIFICATION].decode(general.params)
    lenient = b'{"sessionUpdate":"tool_call","toolCallId":"t","title":"x","status":7}'
    misses = [
        b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b',"id":1}',  # a request
        b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b',"extra":1}',
        b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b',"jsonrpc":"1.0"}',
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":' + lenient + b"}}",
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":5}}',
        b'{"jsonrpc":"2.0","method":"session/update","params":null}',
        b'{"jsonrpc":"2.0","method":"session/update"}',
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s",',  # not JSON
        b'{"jsonrpc":"2.0","method":"session/update","params":' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"jsonrpc":"2.0","method":"session/update","params":' + update + b',"method":"other"}',
    ]
    for line in misses:
        assert one_pass.decode(line) is rpc.MISS, line[:120]
    # A read's lines at once: all of them, or MISS as soon as one is not sure.
    assert one_pass.decode_lines([good, good, good]) == [one_pass.decode(good)] * 3
    for line in misses:
        assert one_pass.decode_lines([good, line, good]) is rpc.MISS, line[:120]
    assert one_pass.decode_lines([good, rpc.LineTooLong(10**9), good]) is rpc.MISS
    # What the readers call: only a read whose first and last lines look like ours is tried.
    answer = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    assert one_pass.decode_read([good, good]) == [one_pass.decode(good)] * 2
    for read in ([], [answer], [good, answer], [answer, good], [rpc.LineTooLong(5), good], [good, rpc.LineTooLong(5)]):
        assert one_pass.decode_read(read) is rpc.MISS, read
    # The general path still decides those: the lenient one is rebuilt, the request refused...
    rebuilt = ep.handlers[rpc.HOT_NOTIFICATION].decode(rpc.decode_line(misses[3]).params)  # type: ignore[union-attr]
    assert isinstance(rebuilt.update, schema.ToolCall) and rebuilt.update.status is None


def test_data_to_send_gives_each_decision_once_oldest_first() -> None:
    ep = rpc.Endpoint()
    receive(ep, line({"id": 1, "method": "a"}) + line({"id": 2, "method": "b"}))
    assert [m["id"] for m in sent(ep)] == [1, 2]
    assert ep.data_to_send() == []


# ---------------------------------------------------------------------- layering


FORBIDDEN = ("threading", "asyncio", "socket", "selectors", "time", "subprocess", "concurrent",
             "acp.transport", "acp.connection", "acp.aio")


def _imports(path: Path, package: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_the_rpc_layer_imports_no_runtime() -> None:
    root = Path(rpc.__file__).parent
    modules = sorted(root.glob("*.py"))
    assert {p.name for p in modules} >= {"__init__.py", "endpoint.py", "framing.py", "messages.py"}
    for path in modules:
        for name in _imports(path, "acp.rpc"):
            bad = [f for f in FORBIDDEN if name == f or name.startswith(f + ".")]
            assert not bad, f"{path.name} imports {name}: acp/rpc must stay sans-I/O"


def test_the_layering_check_resolves_relative_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from ..transport import base\nfrom . import framing\nimport time\n")
    names = _imports(module, "acp.rpc")
    assert {"acp.transport", "acp.transport.base", "acp.rpc", "acp.rpc.framing", "time"} <= names
