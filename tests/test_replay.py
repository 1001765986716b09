"""Recorded sessions as tests: ReplayAgent and ReplayClient over real processes and real bytes.

Sessions of the scenario agent and of the TypeScript SDK's agent (tests/interop/agent.mjs) are
recorded through ``acp tap`` while our SyncClient runs a script (permission, file write and
read, a terminal, a cancel); then SyncClient and AsyncClient replay that script against
ReplayAgent in another folder and must see exactly what they saw against the real agent, and
ReplayClient drives the live agents without a divergence. Changed agents and changed clients
make the replays fail with a message that names the message and shows the difference.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import acp
from acp.replay import ReplayAgent, ReplayClient, ReplayDivergence
from tests.helpers.interop_node import INTEROP_DIR, require_node
from tests.helpers.replay_support import (
    CHANGED,
    ROOT,
    SCENARIO,
    TAP,
    WAIT,
    Observed,
    record,
    run_async,
    run_sync,
)
from tests.helpers.schema_files import require_schema

ACP = [sys.executable, "-m", "acp"]
TS_AGENT = ["node", str(INTEROP_DIR / "agent.mjs")]


def folder(tmp: pytest.TempPathFactory, name: str) -> str:
    return os.path.realpath(tmp.mktemp(name))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Observed, str]:
    """A recording of the script against the scenario agent, what the client saw, its folder."""
    cwd = folder(tmp_path_factory, "scenario-cwd")
    out = Path(folder(tmp_path_factory, "recordings")) / "scenario.jsonl"
    observed = record(SCENARIO, out, cwd)
    assert observed.stop_reasons == ["end_turn"] * 5 + ["cancelled"]
    return out, observed.normalised(cwd), cwd


@pytest.fixture(scope="module")
def ts_agent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Observed, str]:
    """The same against the TypeScript SDK's agent."""
    node = require_node()
    cwd = folder(tmp_path_factory, "ts-cwd")
    out = Path(folder(tmp_path_factory, "ts-recordings")) / "ts.jsonl"
    observed = record([node, str(INTEROP_DIR / "agent.mjs")], out, cwd)
    assert observed.stop_reasons == ["end_turn"] * 5 + ["cancelled"]
    return out, observed.normalised(cwd), cwd


RECORDINGS = ["scenario", "ts_agent"]


@pytest.mark.parametrize("which", RECORDINGS)
def test_sync_client_sees_the_same_against_the_replay(which: str, request: pytest.FixtureRequest,
                                                      tmp_path: Path) -> None:
    path, expected, recorded_cwd = request.getfixturevalue(which)
    cwd = os.path.realpath(tmp_path)  # another folder: paths under it must follow
    with ReplayAgent.from_recording(path, speed=None, timeout=WAIT) as replay:
        observed = run_sync(lambda b: b.transport(replay.transport()), cwd)
        replay.verify()
    assert observed.normalised(cwd) == expected
    assert recorded_cwd not in json.dumps(observed.updates)  # nothing of the old folder is left
    assert (tmp_path / "notes.txt").read_text() == "hello there"  # the client really wrote it


@pytest.mark.parametrize("which", RECORDINGS)
def test_async_client_sees_the_same_against_the_replay(which: str, request: pytest.FixtureRequest,
                                                       tmp_path: Path) -> None:
    path, expected, _ = request.getfixturevalue(which)
    cwd = os.path.realpath(tmp_path)
    with ReplayAgent.from_recording(path, speed=None, timeout=WAIT) as replay:

        async def transport(builder: Any) -> Any:
            return builder.transport(await replay.async_transport())

        observed = asyncio.run(run_async(transport, cwd))
        replay.verify()
    assert observed.normalised(cwd) == expected


def test_any_client_can_spawn_the_replay_as_an_agent_process(scenario: tuple[Path, Observed, str],
                                                             tmp_path: Path) -> None:
    path, expected, _ = scenario
    cwd = os.path.realpath(tmp_path)
    with ReplayAgent.from_recording(path, speed=None, timeout=WAIT) as replay:  # leaves no report folder
        observed = run_sync(lambda b: b.agent_process(*replay.command()), cwd)
        replay.verify()
        assert observed.normalised(cwd) == expected

        async def transport(builder: Any) -> Any:
            return builder.agent_process(*replay.command())

        assert asyncio.run(run_async(transport, os.path.realpath(tmp_path))).normalised(cwd) == expected
        replay.verify()
        report_dir = replay._report_dir
        assert report_dir is not None and len(os.listdir(report_dir)) == 2  # one report per process
    assert not os.path.exists(report_dir)


@pytest.mark.parametrize("which", RECORDINGS)
def test_replay_client_drives_the_live_agent_without_a_divergence(which: str, request: pytest.FixtureRequest,
                                                                  tmp_path: Path) -> None:
    path, _, _ = request.getfixturevalue(which)
    agent = SCENARIO if which == "scenario" else [require_node(), str(INTEROP_DIR / "agent.mjs")]
    report = ReplayClient.from_recording(path, cwd=tmp_path, speed=None, timeout=WAIT).run(*agent, agent_cwd=ROOT)
    assert report.ok and report.divergences == []
    recording = [json.loads(line) for line in path.read_text().splitlines()]
    assert report.sent == sum(1 for e in recording if e["dir"] == "out")
    assert report.received == sum(1 for e in recording if e["dir"] == "in")


def test_acp_replay_client_command_line(scenario: tuple[Path, Observed, str], tmp_path: Path) -> None:
    path, _, _ = scenario
    done = subprocess.run([*ACP, "replay", "--client", str(path), "--fast", "--cwd", str(tmp_path), "--", *SCENARIO],
                          capture_output=True, text=True, timeout=WAIT * 2, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("0 divergences")
    changed = subprocess.run([*ACP, "replay", "--client", str(path), "--fast", "--cwd", str(tmp_path), "--",
                              *CHANGED, "stop"], capture_output=True, text=True, timeout=WAIT * 2, cwd=ROOT)
    assert changed.returncode == 1
    assert '~ result.stopReason: "end_turn" → "max_tokens"' in changed.stdout


# ---------------------------------------------------------------------------------- divergences


@pytest.mark.parametrize(
    ("change", "names", "shows"),
    [
        ("text", "changed: session/update agent_message_chunk from the agent",
         '~ params.update.content.text: "chunk 2/3\\n" → "chunk two\\n"'),
        ("tool", "unexpected session/update tool_call from the agent: not in the recording",
         '"title":"Look around first"'),
        ("stop", "changed: the answer to session/prompt from the agent",
         '~ result.stopReason: "end_turn" → "max_tokens"'),
    ],
)
def test_a_changed_agent_fails_the_replay_client(scenario: tuple[Path, Observed, str], tmp_path: Path,
                                                 change: str, names: str, shows: str) -> None:
    path, _, _ = scenario
    replay = ReplayClient.from_recording(path, cwd=tmp_path, speed=None, timeout=WAIT)
    with pytest.raises(ReplayDivergence) as failed:
        replay.run(*CHANGED, change)
    text = str(failed.value)
    assert names in text and shows in text, text
    assert "(recording line " in text
    first = failed.value.divergences[0]
    assert not isinstance(first, str)
    named = first.recorded or first.expected_next  # for an extra message: what was due instead
    assert named is not None
    line = path.read_text().splitlines()[named.line - 1]  # the line named is that message
    if change == "tool":
        assert "the recording has next: session/update tool_call from the agent" in text
        assert "Apply the edit to hello.py" in line
    else:
        assert ("chunk 2/3" in line) if change == "text" else ('"stopReason":"end_turn"' in line)
    lenient = ReplayClient.from_recording(path, cwd=tmp_path, speed=None, timeout=5, strict=False).run(*CHANGED, change)
    # Logged, and the replay went on to the end: the extra tool call is two messages (the call, its update).
    assert [d.kind for d in lenient.divergences] == (["unexpected"] * 2 if change == "tool" else ["changed"])


def test_a_changed_client_fails_against_the_replay_agent(scenario: tuple[Path, Observed, str],
                                                         tmp_path: Path) -> None:
    path, _, _ = scenario
    cwd = os.path.realpath(tmp_path)
    # Another prompt text: the client's prompt fails at once with the difference.
    replay = ReplayAgent.from_recording(path, speed=None, timeout=WAIT)
    with pytest.raises(acp.RequestError) as failed:
        run_sync(lambda b: b.transport(replay.transport()), cwd, steps=["stream 4"])
    text = str(failed.value)
    assert "changed: session/prompt request from the client (recording line 5)" in text
    assert '~ params.prompt[0].text: "stream 3" → "stream 4"' in text
    with pytest.raises(ReplayDivergence, match="stream 4"):
        replay.verify()
    replay.close()
    # Another permission answer: the turn fails, the difference names the option.
    replay = ReplayAgent.from_recording(path, speed=None, timeout=WAIT)
    with pytest.raises(acp.RequestError) as failed:
        run_sync(lambda b: b.transport(replay.transport()), cwd, permission="reject_once")
    assert "the answer to session/request_permission from the client" in str(failed.value)
    assert '~ result.outcome.optionId: "allow" → "reject"' in str(failed.value)
    replay.close()
    # A client that stops early: what never came is missing.
    replay = ReplayAgent.from_recording(path, speed=None, timeout=WAIT)
    run_sync(lambda b: b.transport(replay.transport()), cwd, steps=["stream 3"])
    replay.close()
    with pytest.raises(ReplayDivergence, match=r"missing: session/prompt request from the client \(recording line"):
        replay.verify()


def test_the_typescript_client_against_acp_replay(tmp_path_factory: pytest.TempPathFactory) -> None:
    node = require_node()
    from tests.helpers.interop_node import run_ts_client

    def config(cwd: str) -> dict[str, Any]:
        notes = os.path.join(cwd, "notes.txt")
        return {"cwd": cwd, "files": {}, "steps": [
            {"prompt": "stream 3"}, {"prompt": "permission", "permission": "allow"},
            {"prompt": f"write {notes} hello there"}, {"prompt": f"read {notes}"},
            {"prompt": "terminal echo hi"}, {"prompt": "wait_for_cancel", "cancelAfterUpdates": 1},
        ]}

    def view(summary: dict[str, Any], cwd: str) -> Any:
        assert "error" not in summary, summary.get("error")
        kept = {k: summary[k] for k in ("turns", "permissionRequests", "fsReads", "fsWrites", "inbound", "files")}
        kept["terminals"] = summary["terminals"]["created"]
        for turn in kept["turns"]:
            turn.pop("cancelSent", None)
        return json.loads(json.dumps(kept).replace(cwd, "<cwd>"))

    recorded_cwd = folder(tmp_path_factory, "ts-client-cwd")
    path = Path(folder(tmp_path_factory, "ts-client")) / "ts-client.jsonl"
    real, _ = run_ts_client(node, [*TAP, "--out", str(path), "--", *SCENARIO], config(recorded_cwd))
    cwd = folder(tmp_path_factory, "ts-client-replay-cwd")
    report = path.parent / "report.jsonl"
    replayed, proc = run_ts_client(node, [*ACP, "replay", str(path), "--fast", "--report", str(report)], config(cwd))
    assert view(replayed, cwd) == view(real, recorded_cwd)
    assert [t["stopReason"] for t in replayed["turns"]] == ["end_turn"] * 5 + ["cancelled"]
    assert replayed["agentExit"] == {"code": 0, "signal": None}, proc.stderr  # 0: nothing diverged
    assert report.read_text() == ""


def test_recorded_timing_is_kept_unless_fast(tmp_path: Path) -> None:
    gap = 0.4
    lines = [
        {"t": 0.0, "dir": "out", "msg": {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}},
        {"t": 0.01, "dir": "in", "msg": {"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 1}}},
        {"t": 0.02, "dir": "out", "msg": {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/r", "mcpServers": []}}},
        {"t": 0.03, "dir": "in", "msg": {"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s"}}},
        {"t": 0.04, "dir": "out", "msg": {"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                                          "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}}},
        *[{"t": 0.05 + gap * n, "dir": "in", "msg": {"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": str(n)}}}}}
          for n in range(2)],
        {"t": 0.06 + gap, "dir": "in", "msg": {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}},
    ]
    path = tmp_path / "slow.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    for speed, at_least, at_most in ((1.0, gap, None), (None, 0.0, gap)):
        seen: list[float] = []
        replay = ReplayAgent.from_recording(path, speed=speed)
        builder = acp.SyncClient.builder().transport(replay.transport()).session_update_handler(
            lambda n, seen=seen: seen.append(time.monotonic()))
        with builder.build() as client:
            client.initialize()
            client.prompt(client.new_session(cwd=str(tmp_path)).session_id, "hi")
        replay.close()
        replay.verify()
        assert len(seen) == 2 and seen[1] - seen[0] >= at_least * 0.95
        if at_most is not None:
            assert seen[1] - seen[0] < at_most  # as fast as possible: not the recorded 0.4 s


# ---------------------------------------------------------------------------------- other SDKs


def foreign(path: Path, out: Path, *, plain: bool = False) -> Path:
    """The recording as another SDK might have written it: ids as strings, every object's
    members in reverse order, unknown fields; ``plain``: bare JSON-RPC lines, no time or direction."""

    def reverse(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: reverse(v) for k, v in reversed(list(value.items()))}
        if isinstance(value, list):
            return [reverse(v) for v in value]
        return value

    lines = []
    for entry in (json.loads(line) for line in path.read_text().splitlines()):
        msg = entry["msg"]
        if "id" in msg:
            msg["id"] = f"req-{msg['id']}"
        for key in ("params", "result"):
            if isinstance(msg.get(key), dict):
                msg[key]["x-vendor-extension"] = {"unknown": True}
        msg["x-trace"] = "abc"
        entry["msg"] = reverse(msg)
        lines.append(json.dumps(entry["msg"] if plain else reverse(entry)))
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize("plain", [False, True], ids=["tap", "plain-ndjson"])
def test_a_recording_from_another_sdk_replays(scenario: tuple[Path, Observed, str], tmp_path: Path,
                                              plain: bool) -> None:
    path, expected, _ = scenario
    other = foreign(path, tmp_path / "foreign.jsonl", plain=plain)
    cwd = os.path.realpath(tmp_path)
    with ReplayAgent.from_recording(other, speed=None, timeout=WAIT) as replay:
        observed = run_sync(lambda b: b.transport(replay.transport()), cwd)
        replay.verify()
    # The replay passes the other SDK's unknown fields on, as that agent sent them.
    text = json.dumps(observed.normalised(cwd).requests)
    assert text.count('"x-vendor-extension": {"unknown": true}') == len(observed.requests)
    observed.requests = [[method, {k: v for k, v in params.items() if k != "x-vendor-extension"}]
                         for method, params in observed.requests]
    assert observed.normalised(cwd) == expected
    report = ReplayClient.from_recording(other, cwd=tmp_path, speed=None, timeout=WAIT).run(*SCENARIO, agent_cwd=ROOT)
    assert report.ok


# ---------------------------------------------------------------------------------- trace --diff


def test_trace_diff_prints_only_the_change(tmp_path_factory: pytest.TempPathFactory) -> None:
    recordings = Path(folder(tmp_path_factory, "diff"))
    a, b, c = recordings / "a.jsonl", recordings / "b.jsonl", recordings / "c.jsonl"
    record(SCENARIO, a, folder(tmp_path_factory, "diff-a"))
    record(CHANGED + ["text"], b, folder(tmp_path_factory, "diff-b"))  # another folder, other terminal ids
    record(SCENARIO, c, folder(tmp_path_factory, "diff-c"))
    done = subprocess.run([*ACP, "trace", "--diff", str(a), str(b)], capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("--- A ") and lines[1].startswith("+++ B ")
    assert lines[2:] == [
        'turn 1 "stream 3":',
        lines[3],
        '      ~ params.update.content.text: "chunk 2/3\\n" → "chunk two\\n"',
        "1 change",
    ]
    assert lines[3].startswith("  ~ A line 8 / B line 8: session/update agent_message_chunk from the agent")
    same = subprocess.run([*ACP, "trace", "--diff", str(a), str(c)], capture_output=True, text=True, timeout=WAIT)
    assert same.returncode == 0 and same.stdout.splitlines()[-1] == "no differences", same.stdout
    tool = recordings / "tool.jsonl"
    record(CHANGED + ["tool"], tool, folder(tmp_path_factory, "diff-tool"))
    extra = subprocess.run([*ACP, "trace", "--diff", str(a), str(tool)], capture_output=True, text=True, timeout=WAIT)
    changes = [line for line in extra.stdout.splitlines() if line.startswith("  ")]
    assert [line.split(":")[0] for line in changes] == ["  + B line 12", "  + B line 13"], extra.stdout
    assert "tool_call from the agent" in changes[0] and "Look around first" in changes[0]


def test_trace_diff_ignores_the_typescript_agents_ids(ts_agent: tuple[Path, Observed, str],
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    path, _, _ = ts_agent
    again = Path(folder(tmp_path_factory, "ts-again")) / "again.jsonl"
    record([require_node(), str(INTEROP_DIR / "agent.mjs")], again, folder(tmp_path_factory, "ts-again-cwd"))
    ids = [json.loads(line).get("msg", {}).get("params", {}).get("update", {}).get("toolCallId")
           for text in (path.read_text(), again.read_text()) for line in text.splitlines() if "ts-call-" in line]
    assert len(set(filter(None, ids))) == 2  # the agent's tool call ids (Date.now()) differ between the runs
    done = subprocess.run([*ACP, "trace", "--diff", str(path), str(again)], capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "no differences", done.stdout


# ---------------------------------------------------------------------------------- fixtures


def test_the_pytest_fixtures_start_and_stop_cleanly(scenario: tuple[Path, Observed, str], tmp_path: Path) -> None:
    path = tmp_path / "short.jsonl"  # initialize and session/new only
    path.write_text("".join(line + "\n" for line in scenario[0].read_text().splitlines()[:4]))
    test = tmp_path / "test_uses_fixtures.py"
    test.write_text(f"""
import acp, threading, sys

RECORDING = {str(path)!r}

def test_agent(replay_agent, tmp_path):
    replay = replay_agent(RECORDING, speed=None)
    with acp.SyncClient.builder().transport(replay.transport()).build() as client:
        client.initialize()
        client.new_session(cwd=str(tmp_path))

def test_agent_that_diverges(replay_agent, tmp_path):
    replay = replay_agent(RECORDING, speed=None)
    with acp.SyncClient.builder().transport(replay.transport()).build() as client:
        client.initialize()
    # stops before session/new: the fixture's verify fails the test at teardown

def test_client(replay_client, tmp_path):
    report = replay_client(RECORDING, speed=None, cwd=tmp_path).run(sys.executable, "-m", "acp.examples.scenario_agent")
    assert report.ok

def test_no_thread_left():
    assert [t.name for t in threading.enumerate() if t.name.startswith("acp")] == []
""")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                          capture_output=True, text=True, timeout=WAIT * 4, cwd=tmp_path)
    assert "4 passed, 1 error" in done.stdout, done.stdout[-3000:]  # the error: at teardown
    assert "ERROR at teardown of test_agent_that_diverges" in done.stdout
    assert "missing: session/new request from the client (recording line 3) never came" in done.stdout


# ---------------------------------------------------------------------------------- a third-party agent


CODEX = ROOT / "tests" / "fixtures" / "codex-acp-0.16.0-auth-required.jsonl"


def test_a_recorded_third_party_agent_traces_validates_and_replays(tmp_path: Path) -> None:
    """npm @zed-industries/codex-acp 0.16.0 recorded through acp tap, offline: it answers
    initialize (its members in its own order, env_var auth methods) and refuses session/new."""
    trace = subprocess.run([*ACP, "trace", str(CODEX)], capture_output=True, text=True, timeout=WAIT)
    assert "authMethods chatgpt, codex-api-key, openai-api-key" in trace.stdout
    assert "error -32000 Authentication required" in trace.stdout
    schema_dir = require_schema()
    valid = subprocess.run([*ACP, "trace", "--validate", "--schema", str(schema_dir), str(CODEX)],
                           capture_output=True, text=True, timeout=WAIT)
    assert valid.returncode == 0 and valid.stdout.endswith(": 0 violations\n"), valid.stdout
    with ReplayAgent.from_recording(CODEX, speed=None, timeout=WAIT) as replay:
        with acp.SyncClient.builder().transport(replay.transport()).build() as client:
            answer = client.initialize()
            assert answer.agent_info is not None and answer.agent_info.name == "codex-acp"
            with pytest.raises(acp.RequestError) as refused:
                client.new_session(cwd=str(tmp_path))
            assert refused.value.code == -32000
        replay.verify()
