"""`acp check`: the example agents conform, deliberately broken ones fail exactly the check they
break, in its tier; the report (text, --json), --auth-method and the exit codes."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from acp.conformance import CHECKS, Report, bounded, run_checks

from .conftest import helper_argv
from .helpers.exiting_agent import CREDENTIALS
from .test_docs import parse_blocks

WAIT = 120.0
ROOT = Path(__file__).resolve().parent.parent
STATUS_WORDS = ("PASS", "FAIL", "WARN", "INFO", "SKIP", "N/A", "NOT CHECKED")


def check(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp", "check", "--timeout", "10", *args],
        capture_output=True, text=True, timeout=WAIT, cwd=cwd,
    )


def _result_line(line: str) -> tuple[str, str, str] | None:
    """(status, check id, tier) of one result line of the text report, or None."""
    status = next((s for s in STATUS_WORDS if line.startswith(s + " ")), None)
    parts = line[len(status):].split() if status else []
    if status is None or len(parts) < 2 or not parts[1].startswith("["):
        return None
    return status, parts[0], parts[1].strip("[]")


def statuses(output: str) -> dict[str, str]:
    return {r[1]: r[0] for line in output.splitlines() if (r := _result_line(line))}


def tiers(output: str) -> dict[str, str]:
    return {r[1]: r[2] for line in output.splitlines() if (r := _result_line(line))}


def failed(report: Report) -> dict[str, str]:
    return {r.name: r.tier for r in report.results if r.status == "FAIL"}


# ------------------------------------------------------------------ agents that conform


EXAMPLES = {
    "echo": ([sys.executable, "-m", "acp.examples.echo_agent"], None),
    "scenario": ([sys.executable, "-m", "acp.examples.scenario_agent"], "wait_for_cancel"),
}


@pytest.mark.parametrize("name", ["echo", "scenario"])
def test_example_agents_conform(name: str) -> None:
    argv, cancel = EXAMPLES[name]
    extra = ["--cancel-prompt", cancel] if cancel else []
    done = check(*extra, "--", *argv)
    assert "verdict: CONFORMING" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0


def test_scenario_agent_runs_its_capability_checks() -> None:
    # Every capability the scenario agent advertises is exercised, and passes.
    done = check("--cancel-prompt", "wait_for_cancel", "--", *EXAMPLES["scenario"][0])
    found, tier = statuses(done.stdout), tiers(done.stdout)
    for name in ("load.replay", "resume.no_replay", "list.sessions", "delete.removes", "close.idle",
                 "close.cancels_turn", "modes.valid", "config.set"):
        assert found[name] == "PASS", (name, done.stdout)
        assert tier[name].startswith("capability:"), name
    assert found["modes.set"] == "PASS" and tier["modes.set"] == "informational"  # MAY: never decides
    assert found["list.paging"] == "SKIP"  # one page: nothing to page through
    for name in ("prompt.image", "prompt.audio", "session.additional_directories", "auth.logout"):
        assert found[name] == "N/A", name
    for name in ("handshake.initialize", "handshake.unsupported_version", "jsonrpc.ids_echoed",
                 "prompt.cancel", "prompt.no_updates_after_cancel", "prompt.pipelined",
                 "session.unique_ids", "capabilities.honest", "capabilities.updates_honest", "schema.valid"):
        assert found[name] == "PASS" and tier[name] == "mandatory", name
    assert "capabilities checked: close, configOptions, delete, list, loadSession, modes, resume" in done.stdout


def test_session_service_conforms_over_websocket(tmp_path: Path) -> None:
    pytest.importorskip("websockets")
    service = subprocess.Popen(
        [sys.executable, "-m", "acp.examples.session_service", "--port", "0", "--name", "b1",
         "--sessions-dir", str(tmp_path / "sessions")],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert service.stdout is not None
        line = service.stdout.readline()
        assert line.startswith("listening "), line
        done = check("--cancel-prompt", "wait", "--url", line.split()[1])
    finally:
        service.terminate()
        service.wait(10)
    assert done.returncode == 0, done.stdout + done.stderr
    found = statuses(done.stdout)
    assert found["load.replay"] == found["resume.no_replay"] == found["list.sessions"] == "PASS"
    assert found["close.idle"] == "N/A" and found["robust.stdin_closed"] == "SKIP"


def quickstart_agent(tmp_path: Path) -> Path:
    block = next(b for b in parse_blocks(ROOT / "docs" / "quickstart.md") if b.file == "my_agent.py")
    path = tmp_path / "my_agent.py"
    path.write_text(block.code, encoding="utf-8")
    return path


def test_quickstart_agent_conforms(tmp_path: Path) -> None:
    done = check("--", sys.executable, str(quickstart_agent(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    found = statuses(done.stdout)
    assert found["session.unique_ids"] == found["session.unknown_session_prompt"] == "PASS"


def test_full_capability_agent_passes_every_check() -> None:
    report = run_checks(helper_argv("check_agent"), cancel_prompt="wait", auth_method="token", timeout=10)
    assert {r.status for r in report.results} == {"PASS"}, report.render()
    assert {r.name for r in report.results} == set(CHECKS)
    assert report.exit_code == 0


def test_hand_written_agent_conforms() -> None:
    report = run_checks(helper_argv("check_raw_agent"), cancel_prompt="wait", timeout=10)
    assert report.conforming, report.render()
    assert {r.name: r.status for r in report.results}["close.cancels_turn"] == "PASS"


# ------------------------------------------------------------------ broken agents


@pytest.mark.parametrize(("agent", "expected"), [
    (("check_agent", "--dup-ids"), {"session.unique_ids": "mandatory"}),
    (("check_agent", "--list-loops"), {"list.paging": "capability:list"}),
    (("check_agent", "--load-no-replay"), {"load.replay": "capability:loadSession"}),
    (("check_agent", "--resume-replays"), {"resume.no_replay": "capability:resume"}),
    (("check_raw_agent", "--close-keeps-turn"), {"close.cancels_turn": "capability:close"}),
    (("check_raw_agent", "--dup-ids"), {"session.unique_ids": "mandatory"}),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_broken_agent_fails_exactly_its_check(agent: tuple[str, ...], expected: dict[str, str]) -> None:
    report = run_checks(helper_argv(*agent), cancel_prompt="wait", auth_method="token" if agent[0] == "check_agent" else None, timeout=5)
    assert failed(report) == expected, report.render()
    assert not report.conforming and report.exit_code == 1
    bad = next(r for r in report.results if r.status == "FAIL")
    assert bad.transcript and {line.direction for line in bad.transcript} == {"in", "out"}


def test_duplicate_ids_and_close_that_does_not_cancel(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = check("--cancel-prompt", "wait", "--json", str(out), "--",
                 *helper_argv("check_raw_agent", "--dup-ids", "--close-keeps-turn"))
    assert done.returncode == 1, done.stdout + done.stderr
    found = statuses(done.stdout)
    assert found["session.unique_ids"] == found["close.cancels_turn"] == "FAIL"
    assert "failed: close.cancels_turn [capability:close], session.unique_ids [mandatory]" in done.stdout
    report = json.loads(out.read_text())
    assert report["verdict"] == "NOT CONFORMING" and report["exitCode"] == 1 and not report["conforming"]
    by_id = {c["id"]: c for c in report["checks"]}
    close = by_id["close.cancels_turn"]
    assert close["tier"] == "capability:close" and close["status"] == "FAIL"
    sent = [line["msg"]["method"] for line in close["transcript"] if line["dir"] == "out" and "method" in line.get("msg", {})]
    assert "session/prompt" in sent and "session/close" in sent, close["transcript"]
    assert all(line["peer"] == "main" for line in close["transcript"])
    assert by_id["session.new"]["status"] == "PASS" and by_id["session.new"]["transcript"] == []
    assert report["tiers"]["mandatory"]["FAIL"] == 1 and report["tiers"]["capability:close"]["FAIL"] == 1


def test_old_broken_agent_fails_required_checks_and_warns_on_robustness() -> None:
    done = check("--timeout", "2", "--", *helper_argv("broken_agent"))
    assert done.returncode == 1
    assert "verdict: NOT CONFORMING" in done.stdout
    found = statuses(done.stdout)
    for name in ("handshake.unsupported_version", "jsonrpc.notifications_unanswered", "jsonrpc.envelopes",
                 "session.unique_ids"):
        assert found[name] == "FAIL", name
    # SHOULDs and robustness are advisory: reported as warnings, never failures
    assert found["robust.garbage_line"] == found["jsonrpc.unknown_method"] == "WARN"
    # the spec lets an agent take a prompt on a session it does not know (MAY): reported, not judged
    assert found["session.unknown_session_prompt"] == "INFO"
    assert "session.unknown_session_prompt" not in done.stdout.splitlines()[-1]
    assert "(echoed: the agent must answer a version it supports)" in done.stdout


def test_advisory_findings_alone_do_not_decide() -> None:
    # Refusing to delete an unknown session and ignoring an invalid list cursor break two
    # SHOULDs: warnings in the advisory tier, and the agent still conforms.
    report = run_checks(helper_argv("check_agent", "--skip-shoulds"), auth_method="token", timeout=10)
    by_name = {r.name: r for r in report.results}
    assert by_name["session.delete_unknown"].status == "WARN" and by_name["session.delete_unknown"].tier == "advisory"
    assert by_name["list.invalid_cursor"].status == "WARN" and by_name["list.invalid_cursor"].transcript
    assert by_name["close.cancels_turn"].status == "SKIP"  # no --cancel-prompt
    assert {r.status for r in report.results} == {"PASS", "WARN", "SKIP"}
    assert report.conforming and report.exit_code == 0


def test_capability_and_schema_violations_are_caught() -> None:
    report = run_checks(helper_argv("broken_agent", "--fs", "--bad-update"), timeout=2)
    by_name = {r.name: r for r in report.results}
    assert by_name["capabilities.honest"].status == "FAIL"
    assert "fs/read_text_file" in by_name["capabilities.honest"].detail
    assert any("fs/read_text_file" in line.text for line in by_name["capabilities.honest"].transcript)
    assert by_name["schema.valid"].status == "FAIL"
    assert "missing required field `content`" in by_name["schema.valid"].detail
    assert not report.conforming


def test_updates_the_client_cannot_show_are_caught() -> None:
    report = run_checks(helper_argv("broken_agent", "--notice"), timeout=2)
    by_name = {r.name: r for r in report.results}
    assert by_name["capabilities.updates_honest"].status == "FAIL"
    assert by_name["capabilities.updates_honest"].tier == "mandatory"
    assert "sent notice" in by_name["capabilities.updates_honest"].detail
    assert any('"notice"' in line.text for line in by_name["capabilities.updates_honest"].transcript)
    assert by_name["schema.valid"].status == "PASS"  # a valid notice, just not allowed here
    assert not report.conforming


def test_a_refusal_for_lack_of_credentials_is_not_checked_with_its_reason() -> None:
    # The agent answers session/new as the official SDKs do when a key is missing: -32603 with
    # data {"details": "Missing credentials..."}. What needs a session is NOT CHECKED, with the
    # reason (once, in full), never FAIL; the agent's stderr tail is in the report.
    done = check("--timeout", "5", "--", *helper_argv("exiting_agent", "error-data"))
    found = statuses(done.stdout)
    for name in ("session.new", "prompt.basic", "session.unique_ids", "jsonrpc.usable_after_error"):
        assert found[name] == "NOT CHECKED", (name, done.stdout)
    assert done.stdout.count("refused for lack of credentials or network: error -32603") == 1  # once, in full
    assert CREDENTIALS[:40] in done.stdout
    # this helper also leaves the checker's sync request unanswered: a real failure, still reported
    assert found["jsonrpc.notifications_unanswered"] == "FAIL" and done.returncode == 1


def test_lenient_only_messages_are_warnings() -> None:
    report = run_checks(helper_argv("broken_agent", "--unknown-update"), timeout=2)
    schema_check = next(r for r in report.results if r.name == "schema.valid")
    assert schema_check.status == "WARN" and "from_the_future" in schema_check.detail


# ------------------------------------------------------------------ options, report, exit codes


def test_auth_method_is_sent_after_initialize() -> None:
    without = run_checks(helper_argv("check_agent", "--require-auth"), timeout=5)
    by_name = {r.name: r for r in without.results}
    assert by_name["auth.authenticate"].status == "SKIP" and "--auth-method" in by_name["auth.authenticate"].detail
    assert by_name["session.new"].status == "NOT CHECKED"
    assert without.blocked is not None and "give --auth-method, one of token" in without.blocked
    assert not without.checked and without.exit_code == 3 and "verdict: NOT CHECKED" in without.verdict()
    done = check("--timeout", "5", "--", *helper_argv("check_agent", "--require-auth"))
    assert done.returncode == 3 and "give --auth-method, one of token" in done.stdout.splitlines()[-1]
    done = check("--auth-method", "token", "--cancel-prompt", "wait", "--", *helper_argv("check_agent", "--require-auth"))
    assert done.returncode == 0, done.stdout
    assert statuses(done.stdout)["auth.authenticate"] == "PASS"
    wrong = run_checks(helper_argv("check_agent"), auth_method="nope", timeout=5)
    assert failed(wrong) == {"auth.authenticate": "capability:auth"}
    assert "not among the advertised authMethods ['token']" in next(r for r in wrong.results if r.status == "FAIL").detail


def test_nothing_to_look_at_is_never_a_pass() -> None:
    # The old broken agent sends no session/update at all: that check had nothing to inspect.
    report = run_checks(helper_argv("broken_agent"), timeout=2)
    by_name = {r.name: r.status for r in report.results}
    assert by_name["session.updates_known_sessions"] == "SKIP"
    echo = run_checks([sys.executable, "-m", "acp.examples.echo_agent"], timeout=10)
    statuses_ = {r.name: r.status for r in echo.results}
    assert statuses_["load.replay"] == statuses_["close.cancels_turn"] == "N/A"
    assert statuses_["prompt.cancel"] == "SKIP"


def test_details_are_cut_at_a_word_boundary() -> None:
    text = "word " * 100
    cut = bounded(text, 50)
    assert len(cut) <= 50 and cut.endswith("…") and cut[:-1].split()[-1] == "word"
    assert bounded("short") == "short"
    report = run_checks([sys.executable, "-m", "acp.examples.scenario_agent"], timeout=10)
    for r in report.results:
        assert len(r.detail) <= 300
        if "result {" in r.detail and not r.detail.endswith("}"):
            assert r.detail.endswith("…"), r.detail


def test_run_checks_prints_as_it_goes_and_reports() -> None:
    out = io.StringIO()
    report = run_checks([sys.executable, "-m", "acp.examples.echo_agent"], timeout=10, out=out)
    assert isinstance(report, Report) and report.conforming
    assert out.getvalue().count("\n") == len(report.results)
    assert report.render().splitlines()[-1] == report.verdict()
    assert report.count("SKIP") == 2
    assert report.count("N/A", "capability") == 15
    assert all(r.tier == CHECKS[r.name].tier for r in report.results)


def test_missing_agent_is_not_checked() -> None:
    report = run_checks(["/no/such/agent-binary"], timeout=2)
    assert not report.conforming and report.exit_code == 3 and report.error
    assert report.results[0].name == "spawn" and "cannot start agent process" in report.results[0].detail
    done = check("--", "/no/such/agent-binary")
    assert done.returncode == 3 and "verdict: NOT CHECKED" in done.stdout


def test_every_check_is_documented() -> None:
    text = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    for name, check in CHECKS.items():
        assert f"| `{name}` | {check.tier} |" in text, name


def test_the_version_probe_is_the_largest_the_schema_allows() -> None:
    # ProtocolVersion is a uint16: 65535 is unsupported yet valid; an agent that echoes it fails.
    report = run_checks(helper_argv("broken_agent"), timeout=2, only=["handshake.*"])
    by_name = {r.name: r for r in report.results}
    assert by_name["handshake.unsupported_version"].status == "FAIL"
    assert by_name["handshake.unsupported_version"].detail.startswith("protocolVersion 65535 -> 65535 (echoed")
    assert set(by_name) == {"handshake.initialize", "handshake.unsupported_version"}


def test_an_answer_in_another_protocol_version_is_not_judged_by_the_v1_schema() -> None:
    # @agentclientprotocol/codex-acp 2.6.0, asked for version 65535, answers version 2 in the v2
    # draft's shape ({"protocolVersion":2,"info":{...},"capabilities":{...}}): a correct answer
    # (its latest version), which a v1 checker cannot judge; it was reported as "result of
    # initialize: accepted only leniently: Object contains unknown field `info`".
    report = run_checks(helper_argv("check_raw_agent", "--speaks-v2"), timeout=10, only=["handshake.*", "schema.valid"])
    by_name = {r.name: r for r in report.results}
    assert by_name["handshake.unsupported_version"].status == "PASS"
    assert by_name["handshake.unsupported_version"].detail.startswith("protocolVersion 65535 -> 2")
    assert by_name["schema.valid"].status == "PASS", by_name["schema.valid"].detail
    assert report.conforming


def test_an_unknown_field_is_a_warning_that_says_what_it_may_be() -> None:
    # codex-acp 2.6 advertises sessionCapabilities.subagents, newer than the schema we know.
    report = run_checks(helper_argv("check_raw_agent", "--future-field"), timeout=10, only=["handshake.*", "schema.valid"])
    schema_check = next(r for r in report.results if r.name == "schema.valid")
    assert schema_check.status == "WARN"
    assert "unknown field `subagents`" in schema_check.detail
    assert "a newer revision's field, or the agent's own" in schema_check.detail
    assert report.conforming  # a warning does not decide


def test_an_error_answer_without_an_id_breaks_the_envelope_rule() -> None:
    report = run_checks(helper_argv("broken_agent", "--no-id-errors"), timeout=2, skip=["robust.*", "prompt.large"])
    envelopes = next(r for r in report.results if r.name == "jsonrpc.envelopes")
    assert envelopes.status == "FAIL" and "without an id member" in envelopes.detail, report.render()
    assert any('"error"' in line.text and line.direction == "in" for line in envelopes.transcript)
    assert not any(r.name.startswith("robust.") for r in report.results)


def test_only_and_skip_choose_the_checks_and_json_goes_to_stdout() -> None:
    done = check("--skip", "robust.*", "--skip", "prompt.large", "--json", "-", "--",
                 sys.executable, "-m", "acp.examples.echo_agent")
    report = json.loads(done.stdout)
    ids = {c["id"] for c in report["checks"]}
    assert "prompt.basic" in ids and not {i for i in ids if i.startswith("robust.") or i == "prompt.large"}
    assert report["verdict"] == "CONFORMING" and done.returncode == 0
    basic = next(c for c in report["checks"] if c["id"] == "prompt.basic")
    assert basic["tck"] == ["ACP-PROMPT-001"] and "MUST respond" in basic["spec"]
    assert "verdict: CONFORMING" in done.stderr  # the text report went to stderr


def test_every_check_cites_a_spec_sentence_with_the_word_of_its_tier() -> None:
    words = {"mandatory": "MUST", "advisory": "SHOULD", "informational": "MAY"}
    for name, c in CHECKS.items():
        assert c.spec and c.what, name
        word = words.get(c.tier)
        if word is not None and "(no spec sentence" not in c.spec and "(robustness" not in c.spec:
            assert word in c.spec or word.lower() in c.spec or c.spec.startswith("jsonrpc:"), (name, c.spec)
        assert all(t.startswith("ACP-") for t in c.tck), name


def test_ctrl_c_stops_a_check_without_a_traceback() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "acp", "check", "--cancel-prompt", "wait_for_cancel", "--",
         sys.executable, "-m", "acp.examples.scenario_agent"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("acp check:")
    assert proc.stdout.readline().split()[:1] in (["PASS"], ["FAIL"])  # a check ran: we are mid-run
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "interrupted" in err


def test_the_report_carries_the_agents_stderr_when_something_failed() -> None:
    # The agent dies in its first turn (the unknown-session prompt) with a traceback on stderr:
    # what it could not reach says the agent exited, the report shows the end of its stderr (the
    # cause) after the counts; a conforming run shows none.
    done = check("--timeout", "5", "--skip", "robust.*", "--", *helper_argv("exiting_agent", "crash"))
    assert done.returncode == 1 and statuses(done.stdout)["prompt.basic"] == "SKIP"
    basic = next(line for line in done.stdout.splitlines() if " prompt.basic " in line)
    assert "exited with code 3" in basic
    tail = done.stdout.split("the agent's stderr (last lines):\n", 1)[1]
    assert "RuntimeError: model backend unreachable: connection refused" in tail
    assert tail.splitlines()[-1].startswith("verdict: NOT CONFORMING")
    report = run_checks(helper_argv("exiting_agent", "crash"), timeout=5, skip=["robust.*"])
    assert "model backend unreachable" in report.stderr and "model backend unreachable" in report.render()
    assert "stderr" not in check("--only", "handshake.*", "--", sys.executable, "-m", "acp.examples.echo_agent").stdout
