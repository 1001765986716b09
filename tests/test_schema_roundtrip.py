"""Round trips of every message type, validated against the official JSON Schema.

Instances are built from the schema itself (`Examples`): for every type with ``x-method`` one
minimal instance (required fields only) and one full instance (every property, values that
differ from the defaults) per union-variant choice, so every variant of every union the message
reaches is exercised. Decoding then encoding must give the same JSON.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acp.schema as schema
import acp.schema.unstable as unstable
from acp.schema import decoder, encode
from tests.helpers.schema_files import require_schema

# ../shared/acp-schema or the TypeScript SDK's copy; without one the module skips (fails under CI).
SCHEMA_DIR = require_schema() / "v1"

jsonschema = pytest.importorskip("jsonschema")

Json = Any


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))
    return data


STABLE = _load("schema.json")
UNSTABLE = _load("schema.unstable.json")
DEFS: dict[str, Any] = UNSTABLE["$defs"]


def _validator(root: dict[str, Any], name: str) -> Any:
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": root["$defs"]})


def validate(name: str, instance: Json, root: dict[str, Any] = UNSTABLE) -> None:
    errors = list(_validator(root, name).iter_errors(instance))
    assert not errors, f"{name}: {errors[0].message} at {list(errors[0].absolute_path)}"


def py_type(name: str) -> Any:
    return getattr(schema, name) if hasattr(schema, name) else getattr(unstable, name)


def roundtrip(name: str, instance: Json) -> Json:
    value = decoder(py_type(name)).decode(json.dumps(instance).encode())
    return json.loads(encode(value))


# ---------------------------------------------------------------------------------------------
# Instances from the JSON Schema


def _ref(node: dict[str, Any]) -> str | None:
    """The $def a node is an alias of (not a tagged alternative that extends one)."""
    if "properties" in node:
        return None
    if "$ref" in node:
        return str(node["$ref"]).rsplit("/", 1)[-1]
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).rsplit("/", 1)[-1]
    return None


class Examples:
    """Builds JSON instances of a schema. ``choice`` picks the alternative of every union
    (``choice % len(alternatives)``); ``full`` fills every property with a non-default value
    (down to ``max_full_depth``), otherwise only required ones (and object defaults, which
    the generated types write back explicitly, as the Rust SDK does)."""

    def __init__(self, choice: int, full: bool, max_full_depth: int = 5) -> None:
        self.choice = choice
        self.full = full
        self.max_full_depth = max_full_depth

    def of(self, node: dict[str, Any], depth: int = 0) -> Json:
        target = _ref(node)
        if target:
            return self.of(DEFS[target], depth)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return node["enum"][0]
        alts = node.get("oneOf") or node.get("anyOf")
        if alts and "properties" not in node and node.get("type") != "object":
            return self.of_alternative(self.pick(alts), depth)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next(k for k in kind if k != "null")
        if kind == "object" or "properties" in node:
            return self.of_object(node, depth)
        return self.of_scalar(kind, node, depth)

    def pick(self, alts: list[dict[str, Any]]) -> dict[str, Any]:
        usable = [a for a in alts if a.get("type") != "null"] or alts
        return usable[self.choice % len(usable)]

    def of_alternative(self, alt: dict[str, Any], depth: int) -> Json:
        if "not" in alt:  # the catch-all of an open union: an unknown tag
            return self.unknown_variant(alt, depth)
        props = alt.get("properties", {})
        if props and all(p.get("type") == "null" for p in props.values()):
            return {}  # the "none" alternative: omitted and null mean the same, null is not written back
        return self.of(alt, depth)

    def unknown_variant(self, alt: dict[str, Any], depth: int) -> Json:
        tag = next(iter(alt["properties"]))
        out = {tag: "zz_future_variant", "extra": {"nested": [1, "two"]}}
        for sub in alt.get("anyOf", [])[:1]:  # e.g. the elicitation scope
            out.update(self.of(sub, depth + 1))
        return out

    def of_object(self, node: dict[str, Any], depth: int) -> Json:
        if "additionalProperties" in node and not node.get("properties"):
            extra = node["additionalProperties"]
            if isinstance(extra, dict) and extra:
                return {"key": self.of(extra, depth + 1)}
            return {"k": "v"}
        out: dict[str, Json] = {}
        full = self.full and depth < self.max_full_depth
        required = set(node.get("required", []))
        for prop, sub in node.get("properties", {}).items():
            default = sub.get("default")
            if prop in required:
                out[prop] = self.of(sub, depth + 1)
            elif full:
                value = self.non_default(sub, default, depth + 1)
                if value is not _SKIP:
                    out[prop] = value
            elif isinstance(default, dict) and default and _ref(sub) or default == {} and _ref(sub):
                out[prop] = Examples(self.choice, False).of(sub, depth + 1)
        for part in node.get("allOf", []):
            out.update(self.of(part, depth))
        alts = node.get("oneOf") or node.get("anyOf")
        if alts:
            out.update(self.of_alternative(self.pick(alts), depth))
        return out

    def non_default(self, sub: dict[str, Any], default: Any, depth: int) -> Any:
        if isinstance(default, bool):
            return not default
        if isinstance(default, str):
            return _SKIP  # single-valued enum defaults ("object") cannot differ
        if default == [] or default == {} and not _ref(sub):
            value = self.of(sub, depth)
            return value if value not in ([], {}) else _SKIP
        if sub == {} or sub.keys() <= {"description", "x-deserialize-default-on-error"}:
            return {"any": ["json", 1]}  # rawInput / rawOutput / data
        return self.of(sub, depth)

    def of_scalar(self, kind: Any, node: dict[str, Any], depth: int) -> Json:
        if kind == "string":
            return "x" * max(1, node.get("minLength", 1))
        if kind == "integer":
            return 1
        if kind == "number":
            return 1.5
        if kind == "boolean":
            return True
        if kind == "array":
            items = node.get("items", {"type": "string"})
            return [self.of(items, depth + 1)]
        if kind == "null":
            return None
        return {"any": "json"}


_SKIP = object()


def message_types() -> list[str]:
    return [name for name, node in DEFS.items() if node.get("x-method")]


def union_types() -> list[str]:
    return [
        name
        for name, node in DEFS.items()
        if (node.get("oneOf") or node.get("anyOf"))
        and not all("const" in a or a.get("title") == "other" for a in node.get("oneOf") or node["anyOf"])
        and name not in ("RequestId", "ElicitationContentValue")
    ]


def _cases() -> list[tuple[str, int, bool]]:
    cases = []
    for name in message_types():
        for full in (False, True):
            for choice in range(6):  # SessionUpdate has the most variants reachable via choice
                cases.append((name, choice, full))
    return cases


def _dedup_instances() -> list[tuple[str, Json]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for name, choice, full in _cases() + [(n, c, f) for n in union_types() for c in range(20) for f in (False, True)]:
        instance = Examples(choice, full).of(DEFS[name])
        key = (name, json.dumps(instance, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append((name, instance))
    return out


INSTANCES = _dedup_instances()


def test_every_message_type_is_covered() -> None:
    names = {name for name, _ in INSTANCES}
    assert set(message_types()) <= names
    assert len(message_types()) > 60


def test_every_union_variant_is_covered() -> None:
    """Each alternative of each union appears in some instance (by its tag, or by type)."""
    for union in union_types():
        node = DEFS[union]
        alts = node.get("oneOf") or node["anyOf"]
        seen = [inst for name, inst in INSTANCES if name == union]
        assert len({json.dumps(s, sort_keys=True) for s in seen}) >= len(alts), union


@pytest.mark.parametrize(("name", "instance"), INSTANCES, ids=lambda v: v if isinstance(v, str) else "")
def test_golden_roundtrip(name: str, instance: Json) -> None:
    validate(name, instance)
    encoded = roundtrip(name, instance)
    assert encoded == instance
    validate(name, encoded)


# ---------------------------------------------------------------------------------------------
# Hand-written realistic messages (validated against the *stable* schema)

AGENT_MESSAGE_CHUNK = {
    "sessionId": "sess_1",
    "update": {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "Looking at main.py…", "annotations": {"audience": ["user"]}},
        "messageId": "m1",
    },
}

TOOL_CALL_WITH_DIFF = {
    "sessionId": "sess_1",
    "update": {
        "sessionUpdate": "tool_call",
        "toolCallId": "call_7",
        "title": "Edit main.py",
        "kind": "edit",
        "status": "in_progress",
        "content": [
            {"type": "diff", "path": "/abs/main.py", "oldText": "print(1)\n", "newText": "print(2)\n"},
            {"type": "content", "content": {"type": "text", "text": "done"}},
        ],
        "locations": [{"path": "/abs/main.py", "line": 3}],
        "rawInput": {"file": "/abs/main.py", "edits": [{"line": 3}]},
        "_meta": {"vendor.io/trace": "abc"},
    },
}

PERMISSION_REQUEST = {
    "sessionId": "sess_1",
    "toolCall": {"toolCallId": "call_7", "title": "Edit main.py", "kind": "edit", "status": "pending"},
    "options": [
        {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
    ],
}

NEW_SESSION = {
    "cwd": "/abs/project",
    "mcpServers": [
        {"name": "fs", "command": "/usr/bin/mcp-fs", "args": ["--root", "/"], "env": [{"name": "A", "value": "1"}]},
        {"type": "http", "name": "web", "url": "https://mcp.example", "headers": []},
    ],
}


@pytest.mark.parametrize(
    ("name", "instance"),
    [
        ("SessionNotification", AGENT_MESSAGE_CHUNK),
        ("SessionNotification", TOOL_CALL_WITH_DIFF),
        ("RequestPermissionRequest", PERMISSION_REQUEST),
        ("NewSessionRequest", NEW_SESSION),
        ("RequestPermissionResponse", {"outcome": {"outcome": "selected", "optionId": "allow"}}),
        ("PromptResponse", {"stopReason": "end_turn"}),
    ],
)
def test_realistic_roundtrip(name: str, instance: Json) -> None:
    validate(name, instance, STABLE)
    assert roundtrip(name, instance) == instance


def test_typed_values() -> None:
    chunk = decoder(schema.SessionNotification).decode(json.dumps(AGENT_MESSAGE_CHUNK).encode())
    assert isinstance(chunk.update, schema.AgentMessageChunk)
    assert isinstance(chunk.update, schema.ContentChunk)
    assert isinstance(chunk.update.content, schema.TextContent)
    call = decoder(schema.SessionNotification).decode(json.dumps(TOOL_CALL_WITH_DIFF).encode())
    assert isinstance(call.update, schema.ToolCall)
    assert call.update.content is not None and isinstance(call.update.content[0], schema.Diff)
    assert call.update.field_meta == {"vendor.io/trace": "abc"}
    new = decoder(schema.NewSessionRequest).decode(json.dumps(NEW_SESSION).encode())
    assert [type(s) for s in new.mcp_servers] == [schema.McpServerStdio, schema.McpServerHttp]


def test_construction_encodes_to_schema() -> None:
    note = schema.SessionNotification(
        session_id="s",
        update=schema.AgentMessageChunk(content=schema.TextContent(text="hi")),
    )
    wire = json.loads(encode(note))
    assert wire == {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}}
    validate("SessionNotification", wire, STABLE)
    assert json.loads(encode(schema.PromptResponse(stop_reason=schema.StopReasons.END_TURN))) == {"stopReason": "end_turn"}


# ---------------------------------------------------------------------------------------------
# Forward compatibility: unknown tags and enum values


def test_unknown_session_update_roundtrips() -> None:
    msg = {"sessionId": "s", "update": {"sessionUpdate": "hologram", "payload": {"a": [1, None]}}}
    value = decoder(schema.SessionNotification).decode(json.dumps(msg).encode())
    assert isinstance(value.update, schema.UnknownSessionUpdate)
    assert value.update.tag == "hologram" and value.update["payload"] == {"a": [1, None]}
    assert json.loads(encode(value)) == msg


def test_unknown_nested_content_block_roundtrips() -> None:
    msg = {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "video", "url": "u"}}}
    value = decoder(schema.SessionNotification).decode(json.dumps(msg).encode())
    assert isinstance(value.update, schema.AgentMessageChunk)
    assert isinstance(value.update.content, schema.UnknownContentBlock)
    assert json.loads(encode(value)) == msg


def test_unknown_variants_of_resolved_unions_roundtrip() -> None:
    msg = {"cwd": "/", "mcpServers": [{"type": "websocket", "name": "w", "url": "ws://x"}]}
    value = decoder(schema.NewSessionRequest).decode(json.dumps(msg).encode())
    assert isinstance(value.mcp_servers[0], schema.UnknownMcpServer)
    assert json.loads(encode(value)) == msg


def test_user_built_unknown_value_encodes_raw() -> None:
    update = schema.UnknownSessionUpdate({"sessionUpdate": "new_kind", "x": 1})
    note = schema.SessionNotification(session_id="s", update=update)
    assert json.loads(encode(note)) == {"sessionId": "s", "update": {"sessionUpdate": "new_kind", "x": 1}}
    # A plain msgspec encoder (what acp.rpc uses) needs no enc_hook either.
    assert msgspec.json.encode(note) == encode(note)


def test_unknown_enum_strings_are_kept() -> None:
    value = decoder(schema.PromptResponse).decode(b'{"stopReason":"took_a_nap"}')
    assert value.stop_reason == "took_a_nap"
    assert encode(value) == b'{"stopReason":"took_a_nap"}'
    call = decoder(schema.ToolCallUpdate).decode(b'{"toolCallId":"t","kind":"teleport","status":"paused"}')
    assert (call.kind, call.status) == ("teleport", "paused")


# ---------------------------------------------------------------------------------------------
# Leniency hints


def test_default_on_error_field_falls_back_to_default() -> None:
    # ToolCall.status is x-deserialize-default-on-error; 7 is not a string.
    msg = {"sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x", "status": 7}}
    value = decoder(schema.SessionNotification).decode(json.dumps(msg).encode())
    assert isinstance(value.update, schema.ToolCall) and value.update.status is None
    caps = decoder(schema.ClientCapabilities).decode(b'{"terminal":"yes","fs":{"readTextFile":true}}')
    assert caps.terminal is False and caps.fs.read_text_file is True
    init = decoder(schema.InitializeRequest).decode(b'{"protocolVersion":1,"clientCapabilities":42}')
    assert init.client_capabilities == schema.ClientCapabilities()


def test_skip_invalid_items_drops_bad_items() -> None:
    msg = {
        "sessionId": "s",
        "update": {
            "sessionUpdate": "tool_call",
            "toolCallId": "t",
            "title": "x",
            "content": [{"type": "diff", "path": "/a"}, {"type": "diff", "path": "/a", "newText": "b"}],
            "locations": [{"path": 1}, {"path": "/ok"}],
        },
    }
    value = decoder(schema.SessionNotification).decode(json.dumps(msg).encode())
    assert value.update.content == [schema.Diff(path="/a", new_text="b")]
    assert value.update.locations == [schema.ToolCallLocation(path="/ok")]
    plan = decoder(schema.Plan).decode(b'{"entries":[{"content":"a"},{"content":"b","priority":"low","status":"pending"}]}')
    assert [e.content for e in plan.entries] == ["b"]


@pytest.mark.parametrize(
    ("tp", "data", "message"),
    [
        (
            schema.SessionNotification,
            b'{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":5}}}',
            "Expected `str`, got `int` - at `$.update.content.text`",
        ),
        (
            schema.SessionNotification,
            b'{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk"}}',
            "Object missing required field `content` - at `$.update`",
        ),
        (schema.PromptRequest, b'{"sessionId":"s","prompt":[{"type":"text"}]}', "Object missing required field `text` - at `$.prompt[0]`"),
        (schema.PromptResponse, b'{"stopReason":1}', "Expected `str`, got `int` - at `$.stopReason`"),
        (schema.NewSessionRequest, b'{"mcpServers":[]}', "Object missing required field `cwd`"),
    ],
)
def test_malformed_field_without_hint_raises(tp: Any, data: bytes, message: str) -> None:
    with pytest.raises(msgspec.ValidationError) as info:
        decoder(tp).decode(data)
    assert str(info.value) == message


def test_decoder_is_cached_and_accepts_raw() -> None:
    assert decoder(schema.PromptRequest) is decoder(schema.PromptRequest)
    raw = msgspec.Raw(b'{"stopReason":"end_turn"}')
    assert decoder(schema.PromptResponse).decode(raw).stop_reason == "end_turn"
    with pytest.raises(msgspec.DecodeError):
        decoder(schema.PromptResponse).decode(b"{not json")


# ---------------------------------------------------------------------------------------------
# Property test: instances drawn from the JSON Schema round-trip unchanged


def strategy(node: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Json]:
    """A hypothesis strategy for a JSON Schema node (no nulls and no default values, which
    omit_defaults rightly drops)."""
    target = _ref(node)
    if target:
        return st.deferred(lambda: strategy(DEFS[target], depth))
    if "const" in node:
        return st.just(node["const"])
    alts = node.get("oneOf") or node.get("anyOf")
    if alts and "properties" not in node and node.get("type") != "object":
        usable = [a for a in alts if a.get("type") != "null" and "not" not in a]
        return st.one_of(*(strategy(a, depth) for a in usable))
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object" or "properties" in node:
        props = node.get("properties", {})
        # Object defaults are written back explicitly (as the Rust SDK does): always draw them.
        required = set(node.get("required", [])) | {
            p for p, s in props.items() if isinstance(s.get("default"), dict) and _ref(s)
        }
        must = {p: strategy(s, depth + 1) for p, s in props.items() if p in required}
        may = {}
        if depth < 4:
            may = {
                p: strategy(s, depth + 1)
                for p, s in props.items()
                if p not in required and "default" not in s and p != "_meta" and s.keys() - {"description", "x-deserialize-default-on-error"}
            }
        base = st.fixed_dictionaries(must, optional=may)
        extra = [strategy(part, depth) for part in node.get("allOf", [])]
        if alts:
            extra.append(st.one_of(*(strategy(a, depth) for a in alts if "not" not in a)))
        if not extra:
            return base
        return st.tuples(base, *extra).map(lambda parts: {k: v for p in parts for k, v in p.items()})
    if kind == "string":
        return st.text(max_size=5).filter(bool)
    if kind == "integer":
        return st.integers(node.get("minimum", -(2**31)), node.get("maximum", 2**31))
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(strategy(node.get("items", {"type": "string"}), depth + 1), max_size=2 if depth < 4 else 0)
    return st.just({"k": [1, "v"]})


PROPERTY_TYPES = ["SessionNotification", "RequestPermissionRequest", "PromptRequest", "ToolCallUpdate", "InitializeResponse"]


@pytest.mark.parametrize("name", PROPERTY_TYPES)
def test_property_roundtrip(name: str) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy(DEFS[name]))
    def check(instance: Json) -> None:
        validate(name, instance)
        assert roundtrip(name, instance) == instance

    check()
