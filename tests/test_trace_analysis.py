"""`acp trace` analyses: plain JSON-RPC input, turns in wire order, collapsed runs (terminal and
page), latency, control characters, schema validation, and the one-way imports of the trace
modules."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp.recording import read_recording
from acp.trace import analyse, load_trace, method_latencies
from tests.helpers.schema_files import require_schema
from tests.test_trace import browser, load_in_browser, page_problems  # noqa: F401 - browser is a fixture

ROOT = Path(__file__).resolve().parent.parent
WAIT = 60.0


def acp_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acp", *args], capture_output=True, text=True, timeout=WAIT, cwd=ROOT)


def rpc(**fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", **fields}


def update(which: str, /, **fields: Any) -> dict[str, Any]:
    return rpc(method="session/update", params={"sessionId": "s1", "update": {"sessionUpdate": which, **fields}})


def text(kind: str, value: str) -> dict[str, Any]:
    return update(kind, content={"type": "text", "text": value})


def tap_lines(messages: list[tuple[str, dict[str, Any]]], step: float = 0.01) -> list[str]:
    return [json.dumps({"t": round(n * step, 6), "dir": d, "msg": m}) for n, (d, m) in enumerate(messages)]


# A turn with everything in it, as the agent sent it (both sides number their requests from 0).
TURN: list[tuple[str, dict[str, Any]]] = [
    ("out", rpc(id=0, method="initialize", params={"protocolVersion": 1, "clientCapabilities": {}})),
    ("in", rpc(id=0, result={"protocolVersion": 1, "agentCapabilities": {}})),
    ("out", rpc(id=1, method="session/new", params={"cwd": "/w", "mcpServers": []})),
    ("in", rpc(id=1, result={"sessionId": "s1"})),
    ("out", rpc(id=2, method="session/prompt", params={"sessionId": "s1", "prompt": [{"type": "text", "text": "go"}]})),
    ("in", text("agent_thought_chunk", "thinking")),
    ("in", update("plan", entries=[{"content": "look", "priority": "high", "status": "in_progress"}])),
    ("in", text("agent_message_chunk", "I will ")),
    ("in", text("agent_message_chunk", "edit.")),
    ("in", update("tool_call", toolCallId="c1", title="Edit a.py", kind="edit", status="pending")),
    ("in", rpc(id=0, method="session/request_permission", params={
        "sessionId": "s1", "toolCall": {"toolCallId": "c1"},
        "options": [{"optionId": "ok", "name": "OK", "kind": "allow_once"}]})),
    ("out", rpc(id=0, result={"outcome": {"outcome": "selected", "optionId": "ok"}})),
    ("in", update("tool_call_update", toolCallId="c1", status="completed")),
    ("in", text("agent_message_chunk", "Done.")),
    ("out", rpc(method="session/cancel", params={"sessionId": "s1"})),
    ("in", rpc(id=2, result={"stopReason": "cancelled"})),
]


def test_a_turn_reads_in_wire_order() -> None:
    trace = analyse(tap_lines(TURN))
    (turn,) = trace.turns
    assert [(e.kind, e.text, e.count) for e in turn.events] == [
        ("thought", "thinking", 1),
        ("plan", "[in_progress] look", 1),
        ("text", "I will edit.", 2),  # two chunks, one event
        ("tool_call", "Edit a.py (edit)", 1),
        ("request", "", 1),
        ("answer", "ok", 1),
        ("tool_update", "Edit a.py", 1),
        ("text", "Done.", 1),
        ("cancel", "session/cancel", 1),
    ]
    assert [e.status for e in turn.events if e.kind.startswith("tool")] == ["pending", "completed"]
    assert turn.first_update == pytest.approx(0.01) and turn.stop_reason == "cancelled"
    # Both sides used id 0: the permission answer pairs with the agent's request, not initialize.
    assert trace.messages[11].pair == 10 and trace.messages[1].pair == 0


def test_plain_json_rpc_ndjson_reads_as_a_recording() -> None:
    plain = [json.dumps(m) for _, m in TURN]  # no time, no direction
    trace = analyse(plain)
    tapped = analyse(tap_lines(TURN))
    assert [m.sender for m in trace.messages] == [m.sender for m in tapped.messages]
    assert [(m.kind, m.method, m.pair) for m in trace.messages] == [(m.kind, m.method, m.pair) for m in tapped.messages]
    assert not trace.timed and [e.kind for e in trace.turns[0].events] == [e.kind for e in tapped.turns[0].events]
    done = subprocess.run([sys.executable, "-m", "acp", "trace", "-"], input="", capture_output=True, text=True,
                          timeout=WAIT)  # "-" is just a missing file
    assert done.returncode == 1
    # An extension notification and an error with id null (acpx writes such lines) read too.
    extra = analyse(plain + [json.dumps(rpc(method="acpx/prompt_result", params={})),
                             json.dumps(rpc(id=None, error={"code": -32700, "message": "Parse error"}))])
    assert [(m.sender, m.kind) for m in extra.messages[-2:]] == [("agent", "notification"), ("agent", "error")]


def test_long_runs_of_chunks_are_one_row(tmp_path: Path, browser: str) -> None:  # noqa: F811
    n = 20_000
    messages = TURN[:5] + [("in", text("agent_message_chunk", f"w{i} ")) for i in range(n)] + [
        ("in", rpc(id=2, result={"stopReason": "end_turn"}))]
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(tap_lines(messages, step=0.0001)) + "\n")
    trace = load_trace(path)
    (event,) = trace.turns[0].events
    assert event.count == n and event.text.startswith("w0 w1 ") and event.text.endswith(f"w{n - 1} ")
    done = acp_cli("trace", str(path))
    lines = done.stdout.splitlines()
    assert len(lines) < 40, lines[:50]  # not 20,000
    assert any(f"agent_message_chunk ×{n} (collapsed" in line for line in lines)
    assert any(line.startswith(f"  text ×{n}: ") for line in lines)
    assert len(acp_cli("trace", "--expand", str(path)).stdout.splitlines()) > n
    page = tmp_path / "long.html"
    assert acp_cli("trace", str(path), "--html", str(page)).returncode == 0
    dom, console = load_in_browser(browser, page, tmp_path / "profile")
    assert page_problems(dom, console, len(trace.messages)) == []
    assert len(dom.rows) == 7  # 5 messages, one row for the 20,000 chunks, the answer
    group = next(row for row in dom.rows if row.get("data-first"))
    assert (group["data-first"], group["data-last"]) == ("5", str(4 + n))
    assert dom.turn_events == [[("text", n)]]


def test_latency_per_method() -> None:
    lines = tap_lines(TURN)
    trace = analyse(lines)
    stats = {(s.method, s.asker): s for s in method_latencies(trace)}
    prompt = stats[("session/prompt", "client")]
    assert (prompt.count, prompt.p50, prompt.max) == (1, pytest.approx(0.11), pytest.approx(0.11))
    assert stats[("session/request_permission", "agent")].p90 == pytest.approx(0.01)
    many = [json.dumps({"t": t, "dir": d, "msg": m}) for t, d, m in (
        *[(i, "out", rpc(id=i, method="session/new", params={"cwd": "/"})) for i in range(10)],
        *[(i + 0.001 * (i + 1), "in", rpc(id=i, result={"sessionId": f"s{i}"})) for i in range(10)],
    )]
    (new,) = method_latencies(analyse(many))
    assert new.count == 10 and new.p50 == pytest.approx(0.005) and new.p90 == pytest.approx(0.009)
    assert new.max == pytest.approx(0.010)


def test_control_characters_never_reach_the_terminal(tmp_path: Path) -> None:
    nasty = "\x1b[?1049h\x1b]0;pwned\x07\x9b2J\x00\x08\u202egnp.exe\r"
    messages = TURN[:5] + [
        ("in", text("agent_message_chunk", f"sign in: {nasty}")),
        ("in", rpc(id=2, error={"code": -32000, "message": f"auth {nasty}", "data": {"why": nasty}})),
    ]
    path = tmp_path / "nasty.jsonl"
    path.write_text("\n".join(tap_lines(messages)) + f'\n{{"t":1,"dir":"in","raw":"{json.dumps(nasty)[1:-1]}"}}\n')
    for args in ((str(path),), ("--color", "always", str(path)), ("--validate", "--schema", str(tmp_path), str(path))):
        out = acp_cli("trace", *args).stdout
        for char in "\x00\x07\x08\r\x9b\u202e":
            assert char not in out, (args, repr(char))
        stray = out.replace("\x1b[31;1m", "").replace("\x1b[33m", "").replace("\x1b[0m", "")
        assert "\x1b" not in stray, args
    out = acp_cli("trace", str(path)).stdout
    assert "\\x1b[?1049h" in out and "\\x9b" in out and "\\u202e" in out  # shown, escaped


def test_validate_reports_each_violation_with_its_line(tmp_path: Path) -> None:
    schema_dir = require_schema()
    bad = TURN[:5] + [
        ("in", update("tool_call", title="no id")),  # toolCallId is required
        ("in", rpc(id=2, result={"stopReason": 7})),  # not a StopReason
        ("in", rpc(method="no/such/method", params={})),
        ("in", rpc(method="_vendor/anything", params={"x": 1})),  # extensions are not checked
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(tap_lines(bad)) + "\n")
    done = acp_cli("trace", "--validate", "--schema", str(schema_dir), str(path))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith("line 6: session/update from the agent: SessionNotification")
    assert "toolCallId" in lines[0]
    assert lines[1].startswith("line 7: answer to session/prompt from the agent: PromptResponse at stopReason")
    assert lines[2] == "line 8: no/such/method from the agent: unknown method 'no/such/method'"
    assert lines[-1] == "9 messages checked against protocol version 1: 3 violations"
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(tap_lines(TURN)) + "\n")
    ok = acp_cli("trace", "--validate", "--schema", str(schema_dir), str(good))
    assert ok.returncode == 0 and ok.stdout.endswith(": 0 violations\n"), ok.stdout
    missing = subprocess.run([sys.executable, "-m", "acp", "trace", "--validate", str(good)], capture_output=True,
                             text=True, timeout=WAIT, env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode == 1 and "--schema DIR or set ACP_SCHEMA_DIR" in missing.stdout


def test_recording_reader_problems_are_reported_with_their_line() -> None:
    recording = read_recording(['{"t": 0, "dir": "sideways", "msg": {}}', "[1, 2]", "not json", ""])
    assert recording.problems == [
        "line 1: unknown direction 'sideways'",
        "line 2: not a recording entry: [1, 2]",
        "line 3: not a recording entry: not json",
    ]


def _imports(path: Path) -> set[str]:
    """Every acp module ``path`` imports, anywhere in the file (also under TYPE_CHECKING)."""
    package = "acp." + ".".join(path.relative_to(ROOT / "acp").with_suffix("").parts)
    package = package.removesuffix(".__init__")
    base = package if path.name == "__init__.py" else package.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                module = f"{parent}.{node.module}" if node.module else parent
            else:
                module = node.module or ""
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {m for m in found if m == "acp" or m.startswith("acp.")}


def test_the_trace_and_replay_modules_import_one_way() -> None:
    ours = ["recording", "wirediff", "replay_engine", "replay", "replay_cli", "trace", "trace_text", "trace_html",
            "trace_cli", "trace_diff", "trace_validate", "pytest_plugin"]
    modules = {name: _imports(ROOT / "acp" / f"{name}.py") for name in ours}
    graph = {name: {m.removeprefix("acp.") for m in found} & set(ours) for name, found in modules.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph[start])

    cycles = [name for name in ours if reaches(name, name, set())]
    assert cycles == [], graph
    assert "trace_html" not in graph["trace"] and "trace" in graph["trace_html"]
