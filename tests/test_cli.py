"""The command line: `acp demo` and `acp chat`, run as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acp import cli

from .conftest import helper_argv
from .helpers.pty_chat import PtyChat

WAIT = 60.0
ROOT = Path(__file__).resolve().parent.parent


def run_acp(*args: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp", *args],
        input=stdin, capture_output=True, text=True, timeout=WAIT, cwd=cwd or ROOT,
    )


def test_demo_runs_one_full_turn() -> None:
    done = run_acp("demo")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for part in (
        "agent:   acp-scenario-agent",
        "agent> Hello! Running every scenario.",                 # streamed message
        "agent> chunk 3/3",
        "[plan]",                                                 # plan
        "[plan] 7/8 done, now: Ask a question",
        "[tool] Edit hello.py (edit, pending)",                   # tool call with a diff
        '+print("hello, world")',
        "[permission] 'Apply the edit to hello.py' (edit): the policy chose 'allow'",
        "[client] fs/write_text_file",                            # file write, then read
        "[client] fs/read_text_file",
        "[tool] Run ls (execute, pending)",                       # terminal
        "    | notes.txt",
        "agent> terminal: exit code 0",
        "[elicitation]",
        "turn ended: end_turn",
    ):
        assert part in out, f"{part!r} missing from:\n{out}"
    assert "Traceback" not in done.stderr


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "acp"
    if not script.exists():
        pytest.skip("the console script is not installed in this environment")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 0 and done.stdout.startswith("acp ")


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_check_needs_an_agent_command() -> None:
    done = run_acp("check")
    assert done.returncode == 2 and "needs the agent's command" in done.stderr


@pytest.mark.parametrize("sub", ["chat", "check"])
def test_sub_command_help_shows_the_agent_command_and_defaults(sub: str) -> None:
    done = run_acp(sub, "--help")
    assert done.returncode == 0
    assert f"usage: acp {sub} [options] [--url URL | -- AGENT COMMAND...]" in done.stdout
    assert "(default: " in done.stdout
    if sub == "check":
        assert "(default: hello)" in done.stdout and "(default: 10.0)" in done.stdout
        assert "--auth-method ID" in done.stdout and "--json FILE" in done.stdout
        assert "1 not conforming, 2 usage error, 3 not checked" in " ".join(done.stdout.split())


def test_check_json_to_an_unwritable_place_is_exit_2(tmp_path: Path) -> None:
    done = run_acp("check", "--json", str(tmp_path / "no" / "such" / "dir" / "r.json"), "--",
                   sys.executable, "-m", "acp.examples.echo_agent")
    assert done.returncode == 2 and "cannot write" in done.stdout


def test_chat_with_the_echo_agent_and_record(tmp_path: Path) -> None:
    record = tmp_path / "wire.jsonl"
    done = run_acp("chat", "--record", str(record), stdin="Hello there, agent\n/help\n/quit\n", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "connected to acp-echo-agent" in done.stdout
    assert "agent> Hello there, agent" in done.stdout
    assert "(end_turn)" in done.stdout and "/mode [ID]" in done.stdout and "/auth [ID]" in done.stdout
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    methods = [(e["dir"], e["msg"].get("method")) for e in entries]
    assert ("out", "initialize") in methods and ("out", "session/prompt") in methods
    assert ("in", "session/update") in methods
    update = next(e["msg"] for e in entries if e["msg"].get("method") == "session/update")
    assert update["params"]["update"]["content"]["text"] == "Hello there, agent"


def test_chat_ends_at_end_of_input(tmp_path: Path) -> None:
    done = run_acp("chat", stdin="one\ntwo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "agent> one" in done.stdout and "agent> two" in done.stdout


def test_chat_asks_permission_and_serves_files(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("file contents\n")
    folder = tmp_path.resolve()
    script = "\n".join([
        "permission", "2",                      # asked: choose Reject
        f"read {folder / 'in.txt'}",
        f"write {folder / 'out.txt'} written by chat",
        "terminal echo from-terminal",
        "/mode auto", "permission",
        "/new", "/quit",
    ]) + "\n"
    done = run_acp("chat", "--cwd", str(folder), "--", sys.executable, "-m", "acp.examples.scenario_agent",
                   stdin=script)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "[permission] the agent asks: Apply the edit to hello.py" in out
    assert "1. Allow (allow_once)" in out and "agent> permission: rejected" in out
    assert "agent> file contents" in out
    assert (folder / "out.txt").read_text() == "written by chat"
    assert "agent> from-terminal" in out
    assert "mode: auto" in out and "allowed (by mode 'auto'" in out
    assert "new session scenario-2" in out


def test_chat_reports_a_missing_agent(tmp_path: Path) -> None:
    done = run_acp("chat", "--", str(tmp_path / "no-such-agent"), cwd=tmp_path)
    assert done.returncode == 127 and "cannot start agent process" in done.stdout


SCENARIO = [sys.executable, "-m", "acp.examples.scenario_agent"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pty")
def test_chat_ctrl_c_cancels_the_turn_in_a_terminal(tmp_path: Path) -> None:
    chat = PtyChat(tmp_path, ["--", *SCENARIO])
    try:
        chat.expect(b"> ")
        chat.write(b"wait_for_cancel\n")
        chat.expect(b"waiting for session/cancel")
        chat.write(b"\x03")  # Ctrl-C: the terminal sends SIGINT to the foreground group
        chat.expect(b"(cancelled)")
        chat.write(b"echo still alive\n")
        chat.expect(b"agent> still alive")
        chat.write(b"/quit\n")
        assert chat.exit_code() == 0
    finally:
        chat.close()


def test_chat_reports_an_agent_that_exits_at_once(tmp_path: Path) -> None:
    done = run_acp("chat", "--", "sh", "-c", "exit 3", stdin="hello\n", cwd=tmp_path)
    assert done.returncode == 1
    assert "the agent failed to start a session: initialize: the agent process exited with code 3" in done.stdout
    assert "status 3" not in done.stdout  # said once, not twice


def test_chat_renders_notices_and_compaction(tmp_path: Path) -> None:
    record = tmp_path / "wire.jsonl"
    script = "notice\ncompact\ncompact fail\n/quit\n"
    done = run_acp("chat", "--record", str(record), "--cwd", str(tmp_path), "--",
                   sys.executable, "-m", "acp.examples.scenario_agent", stdin=script)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    lines = out.splitlines()
    for line in (
        "[info] Index ready: The workspace index was rebuilt.",
        "[warning] Rate limit near: 80% of this hour's requests used.",
        "[error] Linter crashed",
        "[compaction] completed: The user asked for scenarios; the agent ran them.",
        "[compaction] failed: the summariser gave up",
    ):
        assert any(line in seen for seen in lines), f"{line!r} missing from:\n{out}"
    assert sum("[compaction] in progress" in seen for seen in lines) == 2
    assert "does not show" not in out  # chat advertised both capabilities
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    init = next(e["msg"] for e in entries if e["msg"].get("method") == "initialize")
    assert init["params"]["clientCapabilities"]["session"] == {"compaction": {}, "notices": {}}


def test_turn_printer_renders_subagents_and_patched_compactions() -> None:
    import io

    from acp import schema
    from acp.schema import unstable as U

    out = io.StringIO()
    printer = cli.TurnPrinter(out)

    def show(update: object) -> None:
        printer(schema.SessionNotification(session_id="s", update=update))  # type: ignore[arg-type]

    show(U.SubagentUpdate(session_id="child", title="tester", description="runs tests"))
    show(U.SubagentUpdate(session_id="child", title="tester", state=U.RunningStateUpdate()))
    show(U.SubagentUpdate(session_id="child", state=U.StateUpdateIdle(
        stop_reason="error", error=schema.Error(code=-32603, message="crashed"))))
    show(schema.CompactionSummaryChunk(compaction_id="c", content=schema.TextContent(text="streamed")))
    show(schema.CompactionUpdate(compaction_id="c", status="completed",
                                 summary=[schema.TextContent(text="replaced")]))
    show(schema.CompactionUpdate(compaction_id="d", status="cancelled"))
    assert out.getvalue().splitlines() == [
        "[subagent] tester (runs tests)",
        "[subagent] tester: running",
        "[subagent] child: idle, error: crashed",
        "[compaction] in progress",
        "[compaction] completed: replaced",
        "[compaction] cancelled",
    ]


def test_chat_shows_a_crashing_agents_last_stderr_lines(tmp_path: Path) -> None:
    # No logging configured: the agent's traceback still reaches the user, in the error line.
    done = run_acp("chat", "--", *helper_argv("exiting_agent", "crash"), stdin="hello\n", cwd=tmp_path)
    assert done.returncode == 1
    assert (
        "error: session/prompt: the agent process exited with code 3; the last lines of its stderr:\n"
        "    starting the turn\n"
        "    Traceback (most recent call last):\n"
    ) in done.stdout
    assert "\n    RuntimeError: model backend unreachable: connection refused\n" in done.stdout


HELPERS = ROOT / "tests" / "helpers"


def test_chat_shows_the_auth_methods_and_authenticates_with_auth(tmp_path: Path) -> None:
    script = "echo too early\n/new\n/auth\n/auth api-key\n/auth scenario-login\necho signed in\n/quit\n"
    done = run_acp("chat", "--", *SCENARIO, "--require-auth", stdin=script, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # session/new answered auth_required: the error's data, then every method and how to use it.
    assert ('the agent failed to start a session: Authentication required (code -32000): '
            'sign in first') in out
    assert "scenario-login  Scenario login: The agent's own sign-in (always succeeds)" in out
    assert "api-key  API key (env_var)" in out
    assert "set SCENARIO_API_KEY (Scenario API key, secret) in the agent's environment" in out
    assert "/auth ID here, or start the chat with acp chat --auth-method ID" in out
    assert "no session: authenticate first" in out
    assert "error: session/new failed: Authentication required (code -32000)" in out  # /new: a line
    assert "'api-key' reads SCENARIO_API_KEY from the agent's environment" in out
    assert "authenticated with 'scenario-login'\nnew session scenario-1" in out
    assert "agent> signed in" in out and "Traceback" not in done.stderr


def test_chat_auth_method_option(tmp_path: Path) -> None:
    missing = run_acp("chat", "--auth-method", "api-key", "--", *SCENARIO, "--require-auth", cwd=tmp_path)
    assert missing.returncode == 1 and "reads SCENARIO_API_KEY" in missing.stdout
    unknown = run_acp("chat", "--auth-method", "nope", "--", *SCENARIO, "--require-auth", cwd=tmp_path)
    assert unknown.returncode == 1
    assert "offers no authentication method 'nope' (offered: scenario-login, api-key)" in unknown.stdout
    env = {**os.environ, "SCENARIO_API_KEY": "k"}
    ok = subprocess.run([sys.executable, "-m", "acp", "chat", "--auth-method", "api-key", "--", *SCENARIO,
                         "--require-auth"], input="echo with a key\n", capture_output=True, text=True,
                        timeout=WAIT, cwd=tmp_path, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "authenticated with 'api-key'" in ok.stdout and "agent> with a key" in ok.stdout


def test_chat_error_lines_carry_the_agents_data_and_modes_are_listed(tmp_path: Path) -> None:
    done = run_acp("chat", "--", *SCENARIO, stdin="error -32001\n/mode\n/mode nope\n/quit\n", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert 'error: Scenario error -32001 (code -32001): {"scenario":"error"}' in out
    assert "  * ask  Ask: Ask before doing anything risky" in out and "    auto  Auto:" in out
    assert "error: Unknown mode 'nope' (code -32602): {\"modeId\":\"nope\"}" in out


def test_chat_shows_how_the_agent_died_and_its_last_stderr_lines(tmp_path: Path) -> None:
    done = run_acp("chat", "--", sys.executable, str(HELPERS / "dying_agent.py"), stdin="hello\n", cwd=tmp_path)
    assert done.returncode == 1
    assert "the agent process was killed by SIGTERM; the last lines of its stderr:" in done.stdout
    assert "    loading the model\n    fatal: the model crashed" in done.stdout
    assert "code -15" not in done.stdout.replace("(code -15)", "") and "Traceback" not in done.stderr
    assert "fatal" not in done.stderr  # captured for the report, not printed twice
    at_once = run_acp("chat", "--", "sh", "-c", "echo no config file >&2; exit 3", cwd=tmp_path)
    assert "the agent process exited with code 3; the last lines of its stderr:\n    no config file" in at_once.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pty")
def test_chat_late_update_never_prints_over_the_prompt(tmp_path: Path) -> None:
    chat = PtyChat(tmp_path, ["--", *SCENARIO])
    try:
        chat.expect(b"> ")
        chat.write(b"late after the turn\n")
        chat.expect(b"(end_turn)")
        chat.expect(b"late: after the turn")
        chat.expect(b"late: after the turn\r\n> ")  # the prompt, drawn again below the update
        # The prompt's line was erased first: the update starts a line of its own.
        assert b"> \r\x1b[Kagent> late: after the turn" in chat.seen
        chat.write(b"/quit\n")
        assert chat.exit_code() == 0
    finally:
        chat.close()
