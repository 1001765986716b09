"""`acp check`: the example agents conform, deliberately broken ones do not."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from acp.conformance import Report, run_checks

from .conftest import helper_argv
from .helpers.exiting_agent import CREDENTIALS

WAIT = 120.0
ROOT = Path(__file__).resolve().parent.parent


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp", "check", "--timeout", "10", *args],
        capture_output=True, text=True, timeout=WAIT, cwd=ROOT,
    )


def statuses(output: str) -> dict[str, str]:
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("PASS", "FAIL", "WARN", "SKIP"):
            found[parts[1]] = parts[0]
    return found


def test_scenario_agent_conforms_with_cancel_checks() -> None:
    done = check("--cancel-prompt", "wait_for_cancel", "--", sys.executable, "-m", "acp.examples.scenario_agent")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: CONFORMING" in done.stdout
    found = statuses(done.stdout)
    assert set(found.values()) == {"PASS"}, found
    for name in ("handshake.initialize", "handshake.unsupported_version", "jsonrpc.ids_echoed",
                 "jsonrpc.notifications_unanswered", "jsonrpc.unknown_method", "session.unknown_session_prompt",
                 "prompt.cancel", "prompt.no_updates_after_cancel", "prompt.large", "prompt.pipelined",
                 "robust.garbage_line", "robust.batch", "robust.stdin_closed", "capabilities.honest",
                 "capabilities.updates_honest", "schema.valid"):
        assert found.get(name) == "PASS", name


def test_echo_agent_conforms_and_skips_cancel_checks() -> None:
    done = check("--", sys.executable, "-m", "acp.examples.echo_agent")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: CONFORMING" in done.stdout
    found = statuses(done.stdout)
    assert found["prompt.cancel"] == "SKIP" and found["prompt.no_updates_after_cancel"] == "SKIP"
    assert "FAIL" not in found.values()


def test_broken_agent_fails() -> None:
    done = check("--timeout", "2", "--", *helper_argv("broken_agent"))
    assert done.returncode == 1
    assert "verdict: NOT CONFORMING" in done.stdout
    found = statuses(done.stdout)
    for name in ("handshake.unsupported_version", "jsonrpc.notifications_unanswered", "jsonrpc.unknown_method",
                 "session.unknown_session_prompt", "robust.garbage_line", "jsonrpc.envelopes"):
        assert found[name] == "FAIL", name
    assert "(echoed: the agent must answer a version it supports)" in done.stdout


def test_a_failing_checks_line_shows_the_reason_in_the_errors_data() -> None:
    # The agent answers session/new as the official SDKs do: -32603 with data {"details": ...}.
    done = check("--timeout", "5", "--", *helper_argv("exiting_agent", "error-data"))
    assert done.returncode == 1
    line = next(line for line in done.stdout.splitlines() if line.split()[1:2] == ["session.new"])
    assert line.split(None, 2)[2] == f"session/new -> error -32603 'Internal error': {CREDENTIALS}"


def test_capability_and_schema_violations_are_caught() -> None:
    report = run_checks(helper_argv("broken_agent", "--fs", "--bad-update"), timeout=2)
    by_name = {r.name: r for r in report.results}
    assert by_name["capabilities.honest"].status == "FAIL"
    assert "fs/read_text_file" in by_name["capabilities.honest"].detail
    assert by_name["schema.valid"].status == "FAIL"
    assert "missing required field `content`" in by_name["schema.valid"].detail
    assert not report.conforming


def test_updates_the_client_cannot_show_are_caught() -> None:
    report = run_checks(helper_argv("broken_agent", "--notice"), timeout=2)
    by_name = {r.name: r for r in report.results}
    assert by_name["capabilities.updates_honest"].status == "FAIL"
    assert "sent notice" in by_name["capabilities.updates_honest"].detail
    assert by_name["schema.valid"].status == "PASS"  # a valid notice, just not allowed here


def test_lenient_only_messages_are_warnings() -> None:
    report = run_checks(helper_argv("broken_agent", "--unknown-update"), timeout=2)
    schema_check = next(r for r in report.results if r.name == "schema.valid")
    assert schema_check.status == "WARN" and "from_the_future" in schema_check.detail


def test_run_checks_prints_as_it_goes_and_reports() -> None:
    out = io.StringIO()
    report = run_checks([sys.executable, "-m", "acp.examples.echo_agent"], timeout=10, out=out)
    assert isinstance(report, Report) and report.conforming
    assert out.getvalue().count("\n") == len(report.results)
    assert report.render().splitlines()[-1] == report.verdict()
    assert report.count("SKIP") == 2


def test_missing_agent_fails() -> None:
    report = run_checks(["/no/such/agent-binary"], timeout=2)
    assert not report.conforming
    assert report.results[0].name == "spawn" and "cannot start agent process" in report.results[0].detail
