"""`acp exec`: one non-interactive turn, run as a real subprocess against real agent processes.

The agents are the scenario agent (the prompt's first word picks the turn) and the helpers that
fail the way real agents do; the json output is parsed line by line, as a CI script would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp.exec_cli import EXIT_CODES

from .conftest import helper_argv

pytestmark = pytest.mark.timeout(120)

WAIT = 60.0
SCENARIO = (sys.executable, "-m", "acp.examples.scenario_agent")


def run_exec(*args: str, agent: tuple[str, ...] = SCENARIO, stdin: str | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp", "exec", *args, "--", *agent],
        input=stdin, capture_output=True, text=True, timeout=WAIT, cwd=cwd,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def json_lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """Every stdout line is one JSON object; the last one is the result or the error."""
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines and lines[-1]["type"] in ("result", "error"), done.stdout
    assert all(line["type"] in ("update", "permission") for line in lines[:-1])
    return lines


def texts(lines: list[dict[str, Any]]) -> str:
    return "".join(
        line["update"]["content"]["text"] for line in lines
        if line["type"] == "update" and line["update"]["sessionUpdate"] == "agent_message_chunk"
    )


def test_a_streamed_turn_prints_the_agents_text_on_stdout_and_exits_0() -> None:
    done = run_exec("-p", "stream 3")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "chunk 1/3\nchunk 2/3\nchunk 3/3\n"
    assert "end_turn" in done.stderr and "Traceback" not in done.stderr


def test_json_output_has_one_line_per_update_and_a_final_result() -> None:
    done = run_exec("--format", "json", "-p", "stream 3")
    assert done.returncode == 0, done.stderr
    lines = json_lines(done)
    chunks = [line for line in lines if line["type"] == "update"
              and line["update"]["sessionUpdate"] == "agent_message_chunk"]
    assert len(chunks) == 3 and texts(lines) == "chunk 1/3\nchunk 2/3\nchunk 3/3\n"
    result = lines[-1]
    assert result["stopReason"] == "end_turn" and result["exitCode"] == 0
    assert result["sessionId"] == chunks[0]["sessionId"] and isinstance(result["durationMs"], int)


def test_the_prompt_comes_from_stdin_or_a_file(tmp_path: Path) -> None:
    assert run_exec(stdin="echo piped in\n").stdout == "piped in\n"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("echo from a file", encoding="utf-8")
    assert run_exec("--prompt-file", str(prompt)).stdout == "from a file\n"
    empty = run_exec(stdin="  \n")
    assert empty.returncode == 2 and "the prompt is empty" in empty.stderr


@pytest.mark.parametrize(
    ("flags", "decision", "text"),
    [
        ((), "denied", "permission: rejected"),
        (("--deny-all",), "denied", "permission: rejected"),
        (("--approve-all",), "approved", "permission: allowed"),
        (("--allow", "edit"), "approved", "permission: allowed"),
        (("--allow", "read"), "denied", "permission: rejected"),
    ],
)
def test_permission_requests_follow_the_flags(flags: tuple[str, ...], decision: str, text: str) -> None:
    done = run_exec("--format", "json", *flags, "-p", "permission")
    assert done.returncode == 0, done.stderr
    lines = json_lines(done)
    (permission,) = [line for line in lines if line["type"] == "permission"]
    assert permission["decision"] == decision
    assert permission["request"]["toolCall"]["kind"] == "edit"
    assert text in texts(lines)
    # A denial by default (no flag, or a kind that --allow did not name) says how to approve;
    # an explicit --deny-all does not nag.
    assert ("--allow edit approves it" in done.stderr) == (decision == "denied" and "--deny-all" not in flags)


def test_the_text_format_reports_the_permission_decision_on_stderr() -> None:
    done = run_exec("-p", "permission")
    assert done.stdout == "permission: rejected\n"
    assert "[permission] Apply the edit to hello.py (edit): denied" in done.stderr


def test_timeout_cancels_the_turn_and_exits_124() -> None:
    done = run_exec("--format", "json", "--timeout", "1", "-p", "wait_for_cancel")
    assert done.returncode == 124, done.stderr
    result = json_lines(done)[-1]
    # The turn was cancelled the ACP way: the agent answered `cancelled`.
    assert result["type"] == "result" and result["stopReason"] == "cancelled"
    assert result["cancelledBy"] == "timeout" and result["exitCode"] == 124
    assert "timed out after 1 s" in done.stderr


def test_ctrl_c_cancels_the_turn_and_exits_130_without_a_traceback() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "acp", "exec", "--format", "json", "-p", "wait_for_cancel", "--", *SCENARIO],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())  # the turn has started: an update arrived
    assert first["type"] == "update"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 130, err
    last = json.loads(out.splitlines()[-1])
    assert last["stopReason"] == "cancelled" and last["cancelledBy"] == "interrupt"
    assert "Traceback" not in err


def test_an_error_answer_exits_1_with_the_code_in_the_json() -> None:
    done = run_exec("--format", "json", "-p", "error -32603")
    assert done.returncode == 1
    error = json_lines(done)[-1]
    assert error["type"] == "error" and error["stage"] == "session/prompt"
    assert error["code"] == -32603 and error["data"] == {"scenario": "error"}
    assert "session/prompt failed: Scenario error -32603" in done.stderr


def test_an_agent_that_dies_mid_turn_exits_1_and_shows_its_stderr() -> None:
    done = run_exec("--format", "json", "-p", "hello", agent=tuple(helper_argv("exiting_agent", "crash")))
    assert done.returncode == 1
    error = json_lines(done)[-1]
    assert error["type"] == "error" and error["stage"] == "session/prompt"
    assert "model backend unreachable" in error["stderr"]
    assert "model backend unreachable" in done.stderr and "Traceback (most recent call last)" in done.stderr


def test_a_login_refusal_exits_6_and_names_the_methods() -> None:
    refused = run_exec("--format", "json", "-p", "echo hi", agent=(*SCENARIO, "--require-auth"))
    assert refused.returncode == 6
    error = json_lines(refused)[-1]
    assert error["stage"] == "session/new" and error["code"] == -32000
    assert [m["id"] for m in error["authMethods"]] == ["scenario-login", "api-key"]
    assert "--auth-method" in refused.stderr
    signed_in = run_exec("--auth-method", "scenario-login", "-p", "echo hi", agent=(*SCENARIO, "--require-auth"))
    assert signed_in.returncode == 0 and signed_in.stdout == "hi\n"


def test_an_agent_that_cannot_be_started_exits_127() -> None:
    done = run_exec("-p", "hi", agent=("acp-no-such-agent-command",))
    assert done.returncode == 127
    assert "cannot start the agent" in done.stderr and "Traceback" not in done.stderr


def test_file_access_is_offered_only_when_asked_and_only_under_cwd(tmp_path: Path) -> None:
    inside = tmp_path / "notes.txt"
    inside.write_text("inside the folder\n", encoding="utf-8")
    offered = run_exec("--allow-read", "--cwd", str(tmp_path), "-p", f"read {inside}")
    assert offered.returncode == 0, offered.stderr
    assert "inside the folder" in offered.stdout
    not_offered = run_exec("--cwd", str(tmp_path), "-p", f"read {inside}")
    assert "inside the folder" not in not_offered.stdout
    outside = run_exec("--allow-read", "--cwd", str(tmp_path / "nowhere"), "-p", "echo x")
    assert outside.returncode == 2 and "not a folder" in outside.stderr


def test_each_stop_reason_has_its_own_exit_status() -> None:
    # The table the docs print: distinct, and 0 only for end_turn.
    assert EXIT_CODES["end_turn"] == 0
    assert len(set(EXIT_CODES.values())) == len(EXIT_CODES)
    assert {"refusal", "max_tokens", "max_turn_requests"} <= set(EXIT_CODES)


def test_usage_errors_exit_2() -> None:
    no_agent = subprocess.run(
        [sys.executable, "-m", "acp", "exec", "-p", "hi"], capture_output=True, text=True, timeout=WAIT,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert no_agent.returncode == 2 and "exec needs the agent's command" in no_agent.stderr
    quiet_json = run_exec("--quiet", "--format", "json", "-p", "hi")
    assert quiet_json.returncode == 2 and "--quiet is for the text format" in quiet_json.stderr
