"""Fuzzing (issue 7, part 2): random and mutated JSON-RPC lines thrown at a live agent (a
SyncAgent) and at a live client (a SyncClient), from a raw peer on the other end of the pipe.

Every line is answered per spec or ignored, and a normal request round-trips after every case:

* not JSON (truncated, invalid UTF-8, NUL bytes, nested too deeply)  -> -32700, id null
* JSON but not an object (a scalar, an empty array)                   -> -32600, id null
* a request whose id is not an integer or a string                    -> -32600, id null
* a request whose params are not an object or an array                -> -32600, its id
* a request whose "jsonrpc" is missing or not "2.0"                    -> -32600, its id
* an object with an id but no method, result nor error                -> -32600, its id
* a request for a method nobody handles                               -> -32601, its id
* a request whose params miss a required field or have it mistyped    -> -32602, its id
* a notification (known, unknown, mistyped), or a malformed response  -> nothing
* anything else (random mutations, batches): every answer is a well-formed JSON-RPC response
  to an id the line carried (or null), at most one per request, and never a traceback.

Memory stays bounded: the fuzz runs in rounds; after the warm-up round the resident size gets a
loose bound and one more round runs under tracemalloc, which must leave (almost) nothing
allocated outside hypothesis; a 100 MB line (over the 64 MiB cap) is discarded without being held whole (the agent process's
peak RSS, VmHWM, grows by less than the line; the client's traced allocations likewise).

``make test`` runs 3,000 examples per target (about 7 s each); ``ACP_LOAD=full`` (``make
test-load``) 30,000.
"""

from __future__ import annotations

import gc
import itertools
import json
import logging
import os
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acp
from acp import rpc, schema
from acp.agent import PromptContext, SyncAgent
from acp.client import ClientRequestContext, SyncClient
from acp.connection import Connection, InboundCall
from acp.errors import RequestError
from acp.transport import ProcessTransport, memory_pair

from .conftest import helper_argv
from .helpers.fault_support import WAIT, RawPeer, size

FUZZ_EXAMPLES = size(3000, 30000)
# Run in rounds: one hypothesis run keeps a tree of everything it generated (tens of MB over
# 30,000 examples), which would hide the SDK's own memory; between rounds it is freed.
FUZZ_ROUND = 1500 if FUZZ_EXAMPLES <= 3000 else 3000
TRACED_ROUND = 150  # tracemalloc slows the cases down several times
_fuzz_settings = settings(
    max_examples=FUZZ_ROUND,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)



# Deeper than msgspec goes on every supported Python: 5,000 fails on 3.10-3.12 (recursion limit
# 1,000) but decodes on 3.13, whose C stack guard only trips at about 10,000-20,000.
_TOO_DEEP = 20_000

def _fuzz_rounds(strategy: Any, target: Target) -> tuple[float, int, int]:
    """Run FUZZ_EXAMPLES cases in rounds, then one more round under tracemalloc.

    Returns (seconds, RSS growth after the first round, bytes allocated by the SDK during the
    traced round and still alive after it). The first round warms up (allocator arenas of new
    threads, caches). RSS also moves with allocator fragmentation (deeply nested lines make big
    short-lived buffers), so it only gets a loose bound; the traced round is the leak check:
    whatever is allocated with acp code on the stack (msgspec included) and kept is counted,
    what hypothesis keeps of the generated cases is not."""

    @_fuzz_settings
    @given(strategy)
    def run(case: Case) -> None:
        target.check(case)

    started = time.monotonic()
    run()
    gc.collect()
    warm = _rss_bytes()
    for _ in range(FUZZ_EXAMPLES // FUZZ_ROUND - 1):
        run()
    gc.collect()
    rss_growth = _rss_bytes() - warm
    elapsed = time.monotonic() - started
    traced_run = settings(_fuzz_settings, max_examples=TRACED_ROUND)(given(strategy)(run.hypothesis.inner_test))
    tracemalloc.start(2)
    try:
        before = tracemalloc.take_snapshot()
        traced_run()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # The package's own folder: "*/acp/*" would also match a checkout named acp (and its .venv).
    sdk = [tracemalloc.Filter(True, os.path.join(os.path.dirname(acp.__file__), "*"), all_frames=True)]
    kept = sum(d.size_diff for d in after.filter_traces(sdk).compare_to(before.filter_traces(sdk), "filename"))
    return elapsed, rss_growth, kept


# ---------------------------------------------------------------------------------------------
# what each side receives when it is valid

SESSION = "s1"

AGENT_TEMPLATES: list[tuple[str, dict[str, Any] | None, bool]] = [
    # (method, params, is_notification)
    ("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}}}, False),
    ("session/new", {"cwd": "/tmp", "mcpServers": []}, False),
    ("session/load", {"sessionId": SESSION, "cwd": "/tmp", "mcpServers": []}, False),
    ("session/list", {}, False),
    ("session/set_mode", {"sessionId": SESSION, "modeId": "code"}, False),
    ("session/prompt", {"sessionId": SESSION, "prompt": [{"type": "text", "text": "hello"}]}, False),
    ("authenticate", {"methodId": "token"}, False),
    ("_fuzz/echo", {"x": [1, "two", None]}, False),
    ("session/cancel", {"sessionId": SESSION}, True),
    ("_fuzz/note", {"n": 1}, True),
    ("$/cancel_request", {"requestId": 12345}, True),
]

CLIENT_TEMPLATES: list[tuple[str, dict[str, Any] | None, bool]] = [
    ("fs/read_text_file", {"sessionId": SESSION, "path": "/tmp/x.txt"}, False),
    ("fs/write_text_file", {"sessionId": SESSION, "path": "/tmp/x.txt", "content": "text"}, False),
    (
        "session/request_permission",
        {
            "sessionId": SESSION,
            "toolCall": {"toolCallId": "t1", "title": "Edit"},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}],
        },
        False,
    ),
    ("terminal/create", {"sessionId": SESSION, "command": "ls", "args": ["-l"]}, False),
    ("terminal/output", {"sessionId": SESSION, "terminalId": "term-1"}, False),
    ("terminal/wait_for_exit", {"sessionId": SESSION, "terminalId": "term-1"}, False),
    ("terminal/release", {"sessionId": SESSION, "terminalId": "term-1"}, False),
    ("_fuzz/echo", {"x": {"y": [1.5, True]}}, False),
    (
        "session/update",
        {"sessionId": SESSION, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}},
        True,
    ),
    (
        "session/update",
        {"sessionId": SESSION, "update": {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read"}},
        True,
    ),
    ("_fuzz/note", {"n": 1}, True),
    ("$/cancel_request", {"requestId": 12345}, True),
]

# Required params fields whose JSON type is plain (str / int / list): missing or mistyped, the
# spec fixes the answer at -32602.
REQUIRED = {
    "initialize": {"protocolVersion": int},
    "session/new": {"cwd": str},  # mcpServers is lenient (x-deserialize-default-on-error)
    "session/load": {"sessionId": str, "cwd": str},
    "session/set_mode": {"sessionId": str, "modeId": str},
    "session/prompt": {"sessionId": str, "prompt": list},
    "authenticate": {"methodId": str},
    "fs/read_text_file": {"sessionId": str, "path": str},
    "fs/write_text_file": {"sessionId": str, "path": str, "content": str},
    "session/request_permission": {"sessionId": str, "options": list},
    "terminal/create": {"sessionId": str, "command": str},
    "terminal/output": {"sessionId": str, "terminalId": str},
    "terminal/wait_for_exit": {"sessionId": str, "terminalId": str},
    "terminal/release": {"sessionId": str, "terminalId": str},
}

# ---------------------------------------------------------------------------------------------
# strategies

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_value = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _wrong_type_for(kind: type) -> Any:
    if kind is str:
        return st.one_of(st.integers(), st.booleans(), st.none(), st.lists(st.integers(), max_size=2), st.just({"a": 1}))
    if kind is int:
        return st.one_of(st.text(max_size=5), st.booleans(), st.none(), st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)), st.just([1]))
    return st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.none(), st.just({"a": 1}))


class Case:
    """One fuzz line and what the spec fixes about its answers.

    ``expect``: None (only the general invariants), ``("none",)`` (no answer at all), or
    ``("error", code, id)`` (exactly one error answer with that code and id).
    ``ids``: the request ids the line carries, each to be answered (once per request).
    """

    def __init__(self, kind: str, line: bytes, expect: tuple[Any, ...] | None, ids: list[Any]) -> None:
        self.kind = kind
        self.line = line
        self.expect = expect
        self.ids = ids

    def __repr__(self) -> str:
        shown = self.line if len(self.line) < 300 else self.line[:300] + b"..."
        return f"Case({self.kind}, {shown!r}, expect={self.expect}, ids={self.ids})"


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _message(method: str, params: Any, notification: bool, msg_id: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    if not notification:
        msg["id"] = msg_id
    return msg


@st.composite
def cases(draw: Any, templates: list[tuple[str, dict[str, Any] | None, bool]]) -> Case:
    method, params, notification = draw(st.sampled_from(templates))
    params = json.loads(json.dumps(params))  # a private copy
    # Ids come from the draw (never from outside state: hypothesis replays choices). A case
    # waits for all its answers, so a reused id never meets a request still running.
    def fresh() -> int:
        return draw(st.integers(1000, 2**31))  # type: ignore[no-any-return]

    msg_id: Any = fresh() if draw(st.booleans()) else f"f-{fresh()}"
    kind = draw(
        st.sampled_from(
            [
                "valid", "drop-required", "mistype-required", "mutate", "unknown-method",
                "params-scalar", "bad-id", "bad-version", "method-not-string", "not-json",
                "scalar", "empty-batch", "batch", "deep", "huge-number", "nul", "bad-utf8",
                "response", "no-method", "random-bytes",
            ]
        )
    )
    ids = [] if notification else [msg_id]
    no_answer = ("none",)

    if kind == "valid":
        return Case(kind, _dump(_message(method, params, notification, msg_id)), no_answer if notification else None, ids)
    if kind in ("drop-required", "mistype-required"):
        fields = REQUIRED.get(method)
        if not fields or params is None:
            return Case("valid", _dump(_message(method, params, notification, msg_id)), None, ids)
        name = draw(st.sampled_from(sorted(fields)))
        if kind == "drop-required":
            params.pop(name)
        else:
            params[name] = draw(_wrong_type_for(fields[name]))
        return Case(kind, _dump(_message(method, params, notification, msg_id)), ("error", -32602, msg_id), ids)
    if kind == "mutate":
        msg = _message(method, params, notification, msg_id)
        for _ in range(draw(st.integers(1, 3))):
            target = msg
            if "params" in msg and isinstance(msg["params"], dict) and draw(st.booleans()):
                target = msg["params"]
            keys = sorted(target)
            if keys and draw(st.booleans()):
                target.pop(draw(st.sampled_from(keys)))
            else:
                key = draw(st.sampled_from(keys)) if keys and draw(st.booleans()) else draw(st.text(max_size=6))
                target[key] = draw(json_value)
        line = _dump(msg)
        return Case(kind, line, None, _requests_in(line))
    if kind == "unknown-method":
        name = draw(st.sampled_from(["nope", "session/nope", "_vendor/unknown", "fs/nope", "x"]))
        msg = _message(name, params, notification, msg_id)
        return Case(kind, _dump(msg), no_answer if notification else ("error", -32601, msg_id), ids)
    if kind == "params-scalar":
        msg = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": draw(st.one_of(st.integers(), st.text(max_size=5), st.booleans()))}
        return Case(kind, _dump(msg), ("error", -32600, msg_id), [msg_id])
    if kind == "bad-id":
        bad = draw(st.one_of(st.booleans(), st.floats(allow_nan=False, allow_infinity=False), st.just([1]), st.just({"a": 1})))
        msg = {"jsonrpc": "2.0", "id": bad, "method": method}
        return Case(kind, _dump(msg), ("error", -32600, None), [])
    if kind == "bad-version":
        # A wrong or missing "jsonrpc" makes an invalid request, answered with its id.
        version = draw(st.sampled_from(["1.0", "2", 2, 2.0, None, "absent"]))
        msg = {"id": msg_id, "method": method} if version == "absent" else {"jsonrpc": version, "id": msg_id, "method": method}
        return Case(kind, _dump(msg), ("error", -32600, msg_id), [msg_id])
    if kind == "no-method":
        # An id but no method, result nor error: a request without a method, answered.
        msg = {"jsonrpc": "2.0", "id": msg_id}
        if draw(st.booleans()):
            msg["params"] = params if params is not None else {}
        return Case(kind, _dump(msg), ("error", -32600, msg_id), [msg_id])
    if kind == "method-not-string":
        msg = {"jsonrpc": "2.0", "id": msg_id, "method": draw(st.one_of(st.integers(), st.just(["x"]), st.just({"m": 1})))}
        return Case(kind, _dump(msg), ("error", -32600, msg_id), [msg_id])
    if kind == "not-json":
        full = _dump(_message(method, params, notification, msg_id))
        cut = draw(st.integers(1, len(full) - 1))
        return Case(kind, full[:cut], ("error", -32700, None), [])
    if kind == "scalar":
        value = draw(st.one_of(st.integers(), st.text(max_size=10), st.booleans(), st.none(), st.floats(allow_nan=False, allow_infinity=False)))
        return Case(kind, _dump(value), ("error", -32600, None), [])
    if kind == "empty-batch":
        return Case(kind, b"[]", ("error", -32600, None), [])
    if kind == "batch":
        items = []
        for _ in range(draw(st.integers(1, 3))):
            m, p, n = draw(st.sampled_from(templates))
            items.append(_message(m, json.loads(json.dumps(p)), n, fresh()) if draw(st.booleans()) else draw(json_value))
        line = _dump(items)
        return Case(kind, line, None, _requests_in(line))
    if kind == "deep":
        depth = draw(st.sampled_from([10, 100, _TOO_DEEP, 100_000]))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        body = opener * depth + b"1" + closer * depth
        if draw(st.booleans()):
            line = b'{"jsonrpc":"2.0","id":%d,"method":"_fuzz/echo","params":{"x":' % fresh() + body + b"}}"
            carried_id = int(line.split(b'"id":')[1].split(b",")[0])
            if depth >= _TOO_DEEP:
                return Case(kind, line, ("error", -32700, None), [])
            return Case(kind, line, None, [carried_id])
        return Case(kind, body, ("error", -32700, None) if depth >= _TOO_DEEP else ("error", -32600, None), [])
    if kind == "huge-number":
        number = draw(st.sampled_from([b"1e400", b"-1e400", b"1" + b"0" * 400, b"123456789012345678901234567890", b"-0", b"1.5e308"]))
        where = draw(st.sampled_from(["id", "params"]))
        if where == "id":
            line = b'{"jsonrpc":"2.0","id":' + number + b',"method":"_fuzz/echo","params":{}}'
            if number in (b"123456789012345678901234567890", b"-0", b"1" + b"0" * 400):
                return Case(kind, line, None, [json.loads(number)])  # integers of any size are ids
            return Case(kind, line, ("error", -32600, None), [])  # a float is not an id
        line = b'{"jsonrpc":"2.0","id":%d,"method":"_fuzz/echo","params":{"n":' % fresh() + number + b"}}"
        return Case(kind, line, None, [int(line.split(b'"id":')[1].split(b",")[0])])
    if kind in ("nul", "bad-utf8"):
        full = _dump(_message(method, params, notification, msg_id))
        pos = draw(st.integers(0, len(full)))
        junk = b"\x00" if kind == "nul" else draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]))
        line = full[:pos] + junk + full[pos:]
        # Where the junk lands decides: in the envelope, the line is -32700 with id null; inside
        # params, -32700 with the request's id once they are decoded; in a member nobody reads
        # (an unknown key), msgspec skips it and the request runs normally.
        # In a key name, it can also turn the message into any other shape (an unknown
        # "\xffmethod" key leaves no method). The SDK's own envelope decoder tells which ids
        # to wait for; the answers are then checked against the general rules.
        envelope = rpc.decode_line(line)
        if type(envelope) is rpc.Invalid and envelope.code == -32700:
            return Case(kind, line, ("error", -32700, None), [])
        return Case(kind, line, None, _requests_in(line))
    if kind == "response":
        answer = draw(
            st.sampled_from(
                [
                    {"jsonrpc": "2.0", "id": msg_id, "result": {}},
                    {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32000, "message": "x"}},
                    {"jsonrpc": "2.0", "id": msg_id, "result": {}, "error": {"code": 1, "message": "x"}},
                    {"jsonrpc": "2.0", "id": None, "error": {"code": "bad"}},
                    {"id": msg_id, "result": {}},  # no "jsonrpc": still never answered
                    {"jsonrpc": "1.0", "id": msg_id, "error": {"code": -32000, "message": "x"}},
                    {"jsonrpc": "2.0", "result": 1},
                ]
            )
        )
        return Case(kind, _dump(answer), no_answer, [])
    # random bytes: anything at all (no newline inside, it would make two lines)
    data = draw(st.binary(min_size=1, max_size=60)).replace(b"\n", b" ").replace(b"\r", b" ")
    return Case(kind, data, None, _requests_in(data) if data.strip() else [])


def _requests_in(line: bytes) -> list[Any]:
    """The ids of the requests in ``line`` (each must be answered: a result, or an error for an
    invalid one whose id could be read), by the SDK's own envelope
    decoder: which random mutations still make a request is its call, the answers are not."""
    decoded = rpc.decode_line(line)
    items = decoded if isinstance(decoded, list) else [decoded]
    return [
        item.id
        for item in items
        if type(item) is rpc.Request or (type(item) is rpc.Invalid and item.id is not None and not item.response)
    ]


# ---------------------------------------------------------------------------------------------
# checking the answers


def _check_answer(msg: dict[str, Any]) -> None:
    """A well-formed JSON-RPC response, without a traceback or exception text."""
    assert msg.get("jsonrpc") == "2.0", msg
    assert "id" in msg, msg
    assert ("result" in msg) != ("error" in msg), msg
    if "error" in msg:
        error = msg["error"]
        assert type(error["code"]) is int and isinstance(error["message"], str), msg
        assert error["code"] in (-32700, -32600, -32601, -32602, -32603, -32800, -32000, -32002), msg
    text = json.dumps(msg)
    assert "Traceback" not in text and 'File "' not in text, msg


class Target:
    """A live SDK side with a raw peer on the other end; ``check`` throws one case at it."""

    def __init__(self, transport_for_peer: Any, probe: Any) -> None:
        self.peer = RawPeer(transport_for_peer, name="fuzz-peer")
        self._probe = probe
        self._probes = itertools.count()
        self.cases_run = 0
        self.kinds: dict[str, int] = {}

    def check(self, case: Case) -> None:
        self.cases_run += 1
        self.kinds[case.kind] = self.kinds.get(case.kind, 0) + 1
        self.peer.send(case.line + b"\n")
        probe_id = f"probe-{next(self._probes)}"
        answers: list[dict[str, Any]] = []
        waiting = {repr(i): case.ids.count(i) for i in case.ids}

        def take(msg: Any) -> None:
            assert isinstance(msg, dict), (case, msg)
            if "method" in msg:
                return  # a notification (session/update of a fuzzed prompt...) or a request
            _check_answer(msg)
            answers.append(msg)
            key = repr(msg["id"])
            if msg["id"] is not None:
                assert waiting.get(key, 0) > 0, (case, "answer to an id the line did not carry (or twice)", msg)
                waiting[key] -= 1

        # The probe is answered after every error the reader wrote for the case; requests the
        # case carried may still be running: wait for their answers too.
        answer, before = self._probe(self.peer, probe_id)
        for msg in before:
            take(msg)
        deadline = time.monotonic() + WAIT
        while any(waiting.values()):
            take(self.peer.recv(max(0.0, deadline - time.monotonic())))
        if case.kind not in ("mutate", "batch", "random-bytes"):
            # Bad input is the peer's fault: never an internal error.
            assert all(a.get("error", {}).get("code") != -32603 for a in answers), (case, answers)
        if case.expect is not None:
            if case.expect[0] == "none":
                assert answers == [], (case, answers)
            else:
                _, code, msg_id = case.expect
                assert len(answers) == 1, (case, answers)
                assert answers[0]["id"] == msg_id and answers[0].get("error", {}).get("code") == code, (case, answers)


def _agent_probe(peer: RawPeer, probe_id: str) -> tuple[dict[str, Any], list[Any]]:
    peer.send({"jsonrpc": "2.0", "id": probe_id, "method": "_fuzz/echo", "params": {"probe": probe_id}})
    answer, before = peer.recv_until(lambda m: isinstance(m, dict) and m.get("id") == probe_id)
    assert answer.get("result") == {"probe": probe_id}, answer
    return answer, before


def _client_probe(peer: RawPeer, probe_id: str) -> tuple[dict[str, Any], list[Any]]:
    peer.send({"jsonrpc": "2.0", "id": probe_id, "method": "fs/read_text_file", "params": {"sessionId": SESSION, "path": "/probe"}})
    answer, before = peer.recv_until(lambda m: isinstance(m, dict) and m.get("id") == probe_id)
    assert answer.get("result") == {"content": "probe"}, answer
    return answer, before


def fuzz_agent() -> SyncAgent:
    """An agent with the stable handlers, each quick and side-effect free."""

    def prompt(req: schema.PromptRequest, ctx: PromptContext) -> Any:
        ctx.send_message("ok")
        return "end_turn"

    return (
        SyncAgent.builder()
        .agent_info("fuzz-agent", "1.0")
        .auth_methods(schema.AuthMethodAgent(id="token", name="Token"))
        .authenticate_handler(lambda req, ctx: None)
        .new_session_handler(lambda req, ctx: schema.NewSessionResponse(session_id=SESSION))
        .load_session_handler(lambda req, ctx: None)
        .list_sessions_handler(lambda req, ctx: schema.ListSessionsResponse(sessions=[]))
        .set_session_mode_handler(lambda req, ctx: None)
        .prompt_handler(prompt)
        .cancel_handler(lambda note: None)
        .ext_request_handler("_fuzz/echo", lambda params, ctx: params)
        .ext_notification_handler("_fuzz/note", lambda params: None)
        .build()
    )


class FakeTerminals:
    def create_terminal(self, req: Any, ctx: Any) -> schema.CreateTerminalResponse:
        return schema.CreateTerminalResponse(terminal_id="term-1")

    def terminal_output(self, req: Any, ctx: Any) -> schema.TerminalOutputResponse:
        return schema.TerminalOutputResponse(output="", truncated=False)

    def release_terminal(self, req: Any, ctx: Any) -> None:
        return None

    def wait_for_terminal_exit(self, req: Any, ctx: Any) -> schema.WaitForTerminalExitResponse:
        return schema.WaitForTerminalExitResponse(exit_code=0)

    def kill_terminal(self, req: Any, ctx: Any) -> None:
        return None


def fuzz_client(transport: Any, updates: list[Any]) -> SyncClient:
    def read(req: schema.ReadTextFileRequest, ctx: ClientRequestContext) -> str:
        return "probe" if req.path == "/probe" else "content"

    def permission(req: schema.RequestPermissionRequest, ctx: ClientRequestContext) -> Any:
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id=req.options[0].option_id) if req.options else schema.CancelledPermissionOutcome()
        )

    return (
        SyncClient.builder()
        .transport(transport)
        .session_update_handler(updates.append)
        .read_text_file_handler(read)
        .write_text_file_handler(lambda req, ctx: None)
        .request_permission_handler(permission)
        .terminal_handlers(FakeTerminals())
        .ext_request_handler("_fuzz/echo", lambda params, ctx: params)
        .ext_notification_handler("_fuzz/note", lambda params: None)
        .request_timeout(WAIT)
        .build()
    )


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _report(name: str, target: Target, seconds: float, rss_growth: int, kept: int) -> None:
    print(
        f"\nfuzz {name}: {target.cases_run} cases ({seconds:.1f} s untraced), RSS growth after warm-up "
        f"{rss_growth / 1e6:.1f} MB, kept by a traced round {kept / 1e3:.1f} kB, "
        f"by kind {dict(sorted(target.kinds.items()))}"
    )


# ---------------------------------------------------------------------------------------------
# the fuzz runs


def _no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    """Bad input is logged as a warning at most: no ERROR record, no traceback."""
    bad = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert bad == [], bad[:5]


def test_fuzz_live_agent(no_thread_leak: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    agent = fuzz_agent()
    target = Target(agent.serve_in_process(), _agent_probe)
    try:
        init = target.peer.request("init", "initialize", {"protocolVersion": 1})
        assert init["result"]["protocolVersion"] == 1
        elapsed, growth, kept = _fuzz_rounds(cases(AGENT_TEMPLATES), target)
        _report("agent", target, elapsed, growth, kept)
        assert target.cases_run >= FUZZ_EXAMPLES // 2
        assert growth < 100_000_000
        assert kept < 150_000, f"{kept} bytes still allocated after {TRACED_ROUND} more cases"
        # Still the same connection, still working.
        assert len(agent.connections) == 1
        assert "result" in target.peer.request("after", "session/new", {"cwd": "/tmp", "mcpServers": []})
        _no_errors_logged(caplog)
    finally:
        agent.close()
        target.peer.close()


def test_fuzz_live_client(no_thread_leak: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    ours, theirs = memory_pair()
    updates: list[Any] = []
    client = fuzz_client(ours, updates)
    target = Target(theirs, _client_probe)
    try:
        # The raw peer plays the agent for initialize.
        done = threading.Event()
        result: list[Any] = []
        init_thread = threading.Thread(target=lambda: (result.append(client.initialize()), done.set()), name="init")
        init_thread.start()
        msg, _ = target.peer.recv_until(lambda m: isinstance(m, dict) and m.get("method") == "initialize")
        target.peer.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}})
        assert done.wait(WAIT)
        init_thread.join(WAIT)
        elapsed, growth, kept = _fuzz_rounds(cases(CLIENT_TEMPLATES), target)
        _report("client", target, elapsed, growth, kept)
        assert target.cases_run >= FUZZ_EXAMPLES // 2
        assert growth < 100_000_000
        assert kept < 150_000, f"{kept} bytes still allocated after {TRACED_ROUND} more cases"
        assert not client.is_closed
        # The client -> agent direction still works too.
        pending: list[Any] = []
        caller = threading.Thread(target=lambda: pending.append(client.ext_request("_agent/x", {"q": 1})), name="caller")
        caller.start()
        msg, _ = target.peer.recv_until(lambda m: isinstance(m, dict) and m.get("method") == "_agent/x")
        target.peer.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"a": 1}})
        caller.join(WAIT)
        assert pending == [{"a": 1}]
        _no_errors_logged(caplog)
    finally:
        client.close()
        target.peer.close()


def test_fuzz_agent_subprocess_survives_a_sample(no_thread_leak: None) -> None:
    """A smaller run against a real agent process (tests/helpers/fault_agent.py over stdio)."""
    transport = ProcessTransport(helper_argv("fault_agent"))
    peer = RawPeer(transport, name="fuzz-peer")
    try:
        assert "result" in peer.request("init", "initialize", {"protocolVersion": 1})

        def probe(p: RawPeer, probe_id: str) -> tuple[dict[str, Any], list[Any]]:
            p.send({"jsonrpc": "2.0", "id": probe_id, "method": "_fault/ping", "params": {"probe": probe_id}})
            answer, before = p.recv_until(lambda m: isinstance(m, dict) and m.get("id") == probe_id)
            assert answer.get("result") == {"pong": {"probe": probe_id}}, answer
            return answer, before

        target = Target.__new__(Target)
        target.peer, target._probe, target._probes, target.cases_run, target.kinds = peer, probe, itertools.count(), 0, {}
        # fault_agent has no _fuzz/echo: keep to the cases whose answer does not depend on it.
        templates = [t for t in AGENT_TEMPLATES if t[0] not in ("_fuzz/echo", "session/load", "session/list", "session/set_mode", "authenticate", "session/prompt")]

        @settings(max_examples=size(300, 3000), deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(cases(templates))
        def run(case: Case) -> None:
            if case.kind in ("deep", "huge-number", "batch", "mutate"):
                return  # these target _fuzz/echo or may prompt: covered in process
            target.check(case)

        run()
        assert transport.returncode is None  # the agent is alive and well
    finally:
        peer.close()


# ---------------------------------------------------------------------------------------------
# one over-long line


def _vm_hwm(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


LINE_BYTES = 100 * 1024 * 1024


def _send_huge_line(peer: RawPeer) -> None:
    chunk = b"x" * (1024 * 1024)
    peer.send(b'{"jsonrpc":"2.0","id":"huge","method":"_fault/ping","params":{"pad":"')
    for _ in range(LINE_BYTES // len(chunk)):
        peer.send(chunk)
    peer.send(b'"}}\n')


def test_100mb_line_to_an_agent_process_is_discarded_in_bounded_memory(no_thread_leak: None) -> None:
    transport = ProcessTransport(helper_argv("fault_agent"))
    peer = RawPeer(transport, name="huge-peer")
    try:
        assert "result" in peer.request("init", "initialize", {"protocolVersion": 1})
        before = _vm_hwm(transport.pid)
        _send_huge_line(peer)
        answer = peer.request("after", "_fault/ping", {"n": 1}, timeout=60)
        assert answer["result"] == {"pong": {"n": 1}}
        assert peer.other == []  # the huge line itself got no answer (its id is unknowable)
        growth = _vm_hwm(transport.pid) - before
        print(f"\n100 MB line: agent peak RSS grew {growth / 1e6:.1f} MB")
        # The framer drops what it buffered once the 64 MiB cap is passed: never the whole line.
        assert growth < LINE_BYTES * 0.9, growth
    finally:
        peer.close()


def test_100mb_line_to_a_client_is_discarded_in_bounded_memory(no_thread_leak: None) -> None:
    ours, theirs = memory_pair()
    client = fuzz_client(ours, [])
    peer = RawPeer(theirs, name="huge-peer")
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        _send_huge_line(peer)
        answer = peer.request("after", "fs/read_text_file", {"sessionId": SESSION, "path": "/probe"}, timeout=60)
        assert answer["result"] == {"content": "probe"}
        _, peak = tracemalloc.get_traced_memory()
        print(f"\n100 MB line: client traced peak {peak / 1e6:.1f} MB")
        assert peak < LINE_BYTES * 0.9, peak
        assert peer.other == []
    finally:
        tracemalloc.stop()
        client.close()
        peer.close()


# ---------------------------------------------------------------------------------------------
# regressions found by fuzzing (each failed before its fix in acp/connection.py / acp/rpc)


@pytest.fixture
def engine(no_thread_leak: None) -> Iterator[tuple[Connection, RawPeer]]:
    ours, theirs = memory_pair()
    conn = Connection(ours, name="engine", request_timeout=WAIT)
    conn.on_request("echo", lambda params, call: params)
    peer = RawPeer(theirs)
    yield conn, peer
    conn.close()
    peer.close()


def _alive(conn: Connection, peer: RawPeer) -> None:
    assert peer.request("alive", "echo", {"ok": 1})["result"] == {"ok": 1}
    assert not conn.is_closed


@pytest.mark.parametrize("depth", [_TOO_DEEP, 100_000])
def test_deeply_nested_line_is_a_parse_error(engine: tuple[Connection, RawPeer], depth: int) -> None:
    """msgspec raises RecursionError (not DecodeError) past the recursion limit; it used to
    escape the reader and end the connection."""
    conn, peer = engine
    conn.start()
    peer.send(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":' + b"[" * depth + b"]" * depth + b"}}\n")
    peer.send(b"[" + b"[" * depth + b"]" * depth + b"]\n")  # inside a batch too
    for _ in range(2):
        error = peer.recv()
        assert error["id"] is None and error["error"]["code"] == -32700, error
    _alive(conn, peer)


def test_result_nested_too_deeply_to_encode(engine: tuple[Connection, RawPeer]) -> None:
    """A handler result too deep to encode used to raise RecursionError out of the reader
    (which runs quick handlers itself), ending the connection."""
    conn, peer = engine
    deep: Any = 1
    for _ in range(_TOO_DEEP):
        deep = [deep]
    conn.on_request("deep", lambda params, call: {"x": deep})
    conn.start()
    for k in range(3):
        assert peer.request(k, "deep")["error"] == {"code": -32603, "message": "Internal error"}
    _alive(conn, peer)


def test_request_error_with_unencodable_data(engine: tuple[Connection, RawPeer]) -> None:
    conn, peer = engine

    def refuse(params: Any, call: InboundCall) -> Any:
        raise RequestError(-32002, "gone", {"why": object()})

    conn.on_request("refuse", refuse)
    conn.start()
    for k in range(3):
        assert peer.request(k, "refuse")["error"] == {"code": -32603, "message": "Internal error"}
    _alive(conn, peer)


def test_cancel_request_with_an_unhashable_id(engine: tuple[Connection, RawPeer]) -> None:
    """``$/cancel_request`` with ``requestId: [1]`` while a request runs used to raise
    TypeError (unhashable) in the reader and end the connection."""
    conn, peer = engine
    gate = threading.Event()
    entered = threading.Event()
    conn.on_request("block", lambda params, call: (entered.set(), gate.wait(WAIT)) and {})
    conn.start()
    try:
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "block"})
        assert entered.wait(WAIT)
        for bad in ([1], {"a": 1}, None, True, 1.5):
            peer.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": bad}})
        peer.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": [1]})
        _alive(conn, peer)
    finally:
        gate.set()
    assert peer.recv()["id"] == 1  # the blocked request was not cancelled by any of them


def test_unencodable_params_leave_nothing_pending(engine: tuple[Connection, RawPeer]) -> None:
    conn, peer = engine
    conn.start()
    with pytest.raises(TypeError):
        conn.request("echo", {"x": object()})
    with pytest.raises(TypeError):
        conn.request_future("echo", {"x": object()})
    assert conn._sched.endpoint.pending == {}
    _alive(conn, peer)


def test_invalid_utf8_inside_params_is_a_parse_error(engine: tuple[Connection, RawPeer]) -> None:
    """The envelope decodes (params stay raw), then the params do not: -32700 with the
    request's id, not -32603 as if a handler had failed."""
    conn, peer = engine
    conn.on_request("typed", lambda params, call: {"ok": True}, schema.AuthenticateRequest)
    conn.start()
    peer.send(b'{"jsonrpc":"2.0","id":1,"method":"typed","params":{"methodId":"a\xffb"}}\n')
    peer.send(b'{"jsonrpc":"2.0","id":2,"method":"echo","params":{"x":"a\xffb"}}\n')
    for _ in range(2):
        answer = peer.recv()
        assert answer["id"] in (1, 2) and answer["error"]["code"] == -32700, answer
    _alive(conn, peer)


def test_bad_notification_params_are_a_warning_not_an_error(
    engine: tuple[Connection, RawPeer], caplog: pytest.LogCaptureFixture
) -> None:
    conn, peer = engine
    seen: list[Any] = []
    conn.on_notification("note", seen.append, schema.CancelNotification)
    conn.start()
    peer.send(b'{"jsonrpc":"2.0","method":"note","params":{"sessionId":"a\xffb"}}\n')
    peer.send(b'{"jsonrpc":"2.0","method":"note","params":{"sessionId":5}}\n')
    peer.send(b'{"jsonrpc":"2.0","method":"note","params":{"sessionId":"ok"}}\n')
    _alive(conn, peer)
    assert [n.session_id for n in seen] == ["ok"]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert len([r for r in caplog.records if "invalid params" in r.getMessage()]) == 2
