"""Envelope decoding and encoding: every message kind, every bad-input case, ids echoed."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from acp import rpc
from acp.errors import INVALID_REQUEST, PARSE_ERROR


def decode(obj: Any) -> Any:
    return rpc.decode_line(json.dumps(obj).encode())


@pytest.mark.parametrize("msg_id", [0, 7, -3, 2**53, "abc", "", "ü"])
def test_request_ids_are_kept_exactly(msg_id: Any) -> None:
    msg = decode({"jsonrpc": "2.0", "id": msg_id, "method": "m", "params": {"x": 1}})
    assert isinstance(msg, rpc.Request)
    assert msg.id == msg_id and type(msg.id) is type(msg_id)
    assert json.loads(bytes(msg.params)) == {"x": 1}
    line = rpc.Encoder().response(msg.id, {"ok": True})
    assert json.loads(line)["id"] == msg_id


def test_notification_without_params() -> None:
    msg = decode({"jsonrpc": "2.0", "method": "session/cancel"})
    assert isinstance(msg, rpc.Notification)
    assert msg.method == "session/cancel" and not msg.params


def test_notification_into_appends_the_same_line_as_notification() -> None:
    """Written into a batch (head cached per method, params encoded alone) or whole: the same
    bytes, for every kind of params; a failed encode leaves the batch as it was."""
    from acp import schema

    encoder = rpc.Encoder()
    update = schema.SessionNotification(
        session_id="s", update=schema.AgentMessageChunk(content=schema.TextContent(text='a "q"\n'))
    )
    cases: list[tuple[str, Any]] = [
        ("session/update", update),
        ("session/update", update),  # the cached head
        ("session/cancel", None),
        ("_x/ext", {"k": [1, 2]}),
        ('_odd"name\\', {"k": 1}),
        ("_raw", msgspec.Raw(b'{"a":1}')),
    ]
    buf = bytearray(b"earlier\n")
    expected = b"earlier\n"
    for method, params in cases:
        encoder.notification_into(buf, method, params)
        expected += encoder.notification(method, params)
        assert bytes(buf) == expected, method
    for line in bytes(buf).splitlines()[1:]:
        json.loads(line)
    with pytest.raises(TypeError):
        encoder.notification_into(buf, "session/update", object())
    assert bytes(buf) == expected
    many = rpc.Encoder()  # past the head cache's bound: whole envelopes, same bytes
    out = bytearray()
    for i in range(100):
        many.notification_into(out, f"_m/{i}", {"i": i})
    assert bytes(out) == b"".join(many.notification(f"_m/{i}", {"i": i}) for i in range(100))


def test_null_params_count_as_absent() -> None:
    msg = decode({"jsonrpc": "2.0", "id": 1, "method": "m", "params": None})
    assert isinstance(msg, rpc.Request) and not msg.params


def test_response_and_null_result() -> None:
    msg = decode({"jsonrpc": "2.0", "id": 4, "result": None})
    assert isinstance(msg, rpc.Response)
    assert bytes(msg.result) == b"null"
    # A null result decodes like {} into a type whose fields are all optional.

    class AllOptional(msgspec.Struct):
        a: int = 1

    assert rpc.decode_payload(msg.result, msgspec.json.Decoder(AllOptional)) == AllOptional()


def test_error_response() -> None:
    msg = decode({"jsonrpc": "2.0", "id": "x", "error": {"code": -32601, "message": "nope", "data": [1]}})
    assert isinstance(msg, rpc.ErrorResponse)
    assert msg.id == "x" and msg.error == rpc.ErrorObject(-32601, "nope", [1])


def test_error_response_with_null_id() -> None:
    msg = decode({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
    assert isinstance(msg, rpc.ErrorResponse) and msg.id is None


@pytest.mark.parametrize(
    "line",
    [b"not json", b'{"jsonrpc":"2.0","id":1,"method":', b"\xff\xfe", b'{"a":1}}', b""],
)
def test_not_json_is_a_parse_error(line: bytes) -> None:
    msg = rpc.decode_line(line)
    assert isinstance(msg, rpc.Invalid)
    assert msg.code == PARSE_ERROR and msg.id is None


@pytest.mark.parametrize(
    ("obj", "expected_id"),
    [
        (5, None),
        ("text", None),
        (None, None),
        ({}, None),
        ({"jsonrpc": "2.0", "id": 3}, 3),
        ({"jsonrpc": "1.0", "id": 3, "method": "m"}, 3),
        ({"jsonrpc": "2.0", "id": 3, "method": 12}, 3),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": [1], "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": None, "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": 2, "method": "m", "params": 3}, 2),
        ({"jsonrpc": "2.0", "id": 2, "method": "m", "params": "s"}, 2),
        ({"jsonrpc": "2.0", "id": 2, "result": {}, "error": {"code": 1, "message": "m"}}, 2),
        ({"jsonrpc": "2.0", "id": 2, "error": {"code": "x"}}, 2),
        ({"jsonrpc": "2.0", "result": {}}, None),
    ],
)
def test_invalid_envelopes(obj: Any, expected_id: Any) -> None:
    msg = decode(obj)
    assert isinstance(msg, rpc.Invalid), msg
    assert msg.code == INVALID_REQUEST
    assert msg.id == expected_id
    assert msg.reason


@pytest.mark.parametrize(
    ("obj", "expected_id", "response"),
    [
        # A request or notification needs "jsonrpc": "2.0": absent, null or wrong, it is invalid
        # (answered, with its id when it has one).
        ({"id": 3, "method": "m"}, 3, False),
        ({"jsonrpc": None, "id": "a", "method": "m"}, "a", False),
        ({"method": "session/cancel", "params": {}}, None, False),
        ({"jsonrpc": "2.0", "id": 3}, 3, False),  # an id but no method: a request without one
        ({"jsonrpc": "2.0", "id": 3, "params": {}}, 3, False),
        # A response with a bad version is a malformed answer: never answered back.
        ({"id": 3, "result": {}}, 3, True),
        ({"jsonrpc": "1.0", "id": 3, "error": {"code": 1, "message": "m"}}, 3, True),
    ],
)
def test_version_and_method_are_required(obj: Any, expected_id: Any, response: bool) -> None:
    msg = decode(obj)
    assert isinstance(msg, rpc.Invalid), msg
    assert (msg.code, msg.id, msg.response) == (INVALID_REQUEST, expected_id, response)


def test_batch_items_are_each_handled() -> None:
    msgs = decode([{"jsonrpc": "2.0", "method": "a"}, 3, {"jsonrpc": "2.0", "id": 1, "method": "b"}])
    assert isinstance(msgs, list) and len(msgs) == 3
    assert isinstance(msgs[0], rpc.Notification)
    assert isinstance(msgs[1], rpc.Invalid)
    assert isinstance(msgs[2], rpc.Request)


def test_empty_batch_is_invalid() -> None:
    msg = decode([])
    assert isinstance(msg, rpc.Invalid) and msg.code == INVALID_REQUEST


def test_encoded_lines_are_single_compact_lines() -> None:
    enc = rpc.Encoder()
    lines = [
        enc.request(1, "m", {"text": "a\nb\r\u2028"}),
        enc.notification("n", {"x": "\n"}),
        enc.notification("n", None),
        enc.response("id", None),
        enc.response(2, {"a": [1, 2]}),
        enc.error(None, -32700, "Parse error"),
        enc.error(3, -32000, "Auth", {"why": "x"}),
    ]
    for line in lines:
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert b" " not in line.replace(b'"Parse error"', b"")
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert json.loads(lines[0]) == {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"text": "a\nb\r\u2028"}}
    assert json.loads(lines[2]) == {"jsonrpc": "2.0", "method": "n"}
    assert json.loads(lines[3]) == {"jsonrpc": "2.0", "id": "id", "result": {}}
    assert json.loads(lines[5]) == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
    assert json.loads(lines[6])["error"]["data"] == {"why": "x"}


def test_encode_then_decode_round_trip() -> None:
    enc = rpc.Encoder()
    req = rpc.decode_line(enc.request(9, "session/prompt", {"sessionId": "s"}).rstrip(b"\n"))
    assert isinstance(req, rpc.Request) and req.id == 9 and req.method == "session/prompt"
    err = rpc.decode_line(enc.error(9, -32800, "Request cancelled").rstrip(b"\n"))
    assert isinstance(err, rpc.ErrorResponse) and err.error.code == -32800


@pytest.mark.parametrize(
    "prefix", [b"\x1b[?1049l", b"\x1b[2J\x1b[H", b"\x1b[1G\x1b[0J", b"\x1b[<u\x1b[?7h", b"\x1b7"]
)
def test_a_message_behind_terminal_escapes_is_that_message(prefix: bytes) -> None:
    # gemini-cli leaves its alternate screen and answers authenticate on one line.
    line = prefix + b'{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"Failed"}}'
    msg = rpc.decode_line(line)
    assert isinstance(msg, rpc.ErrorResponse) and msg.id == 3 and msg.error.code == -32000


@pytest.mark.parametrize(
    "line",
    [
        b"\x1b[1mPlease visit https://example.test\x1b[0m",  # text behind the escapes: not a message
        b'Enter the code: \x1b[31G{"jsonrpc":"2.0","id":1,"result":{}}',  # text first: not guessed
        b"\x1b",
        b"\x1b[",
        b"\x1b[?1049",  # no final byte
        b'\x1b[?1049l{"jsonrpc":',  # a message cut short stays a parse error
    ],
)
def test_escapes_in_front_of_anything_else_stay_a_parse_error(line: bytes) -> None:
    msg = rpc.decode_line(line)
    assert isinstance(msg, rpc.Invalid) and msg.code == PARSE_ERROR


def test_strip_terminal_escapes_removes_only_the_leading_sequences() -> None:
    from acp.rpc.messages import strip_terminal_escapes

    assert strip_terminal_escapes(b"\x1b[?1049h\x1b[2J\x1b[HPlease \x1b[1mvisit") == b"Please \x1b[1mvisit"
    assert strip_terminal_escapes(b"plain") == b"plain"
    assert strip_terminal_escapes(b"\x1b[31") == b"\x1b[31"  # unfinished: kept
