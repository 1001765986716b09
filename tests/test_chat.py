"""`acp chat` against agents that need a sign-in, ask questions and offer session commands: each
in a real terminal (a pty: Ctrl-C, readline's Tab) or with piped input, over real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acp import schema
from acp.terminal_forms import answer_elicitation

from .conftest import helper_argv
from .helpers.pty_chat import PtyChat

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pty"),
]

SCENARIO = [sys.executable, "-m", "acp.examples.scenario_agent"]
SIGN_IN = helper_argv("sign_in_agent")


def chat_piped(*args: str, stdin: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp", "chat", *args], input=stdin, capture_output=True, text=True,
        timeout=60, cwd=cwd, env={**os.environ, **(env or {})},
    )


def test_a_browser_sign_in_is_a_visible_wait_that_ctrl_c_gives_up(tmp_path: Path) -> None:
    # The agent prints its sign-in URL outside JSON (with a colour escape) and never answers.
    chat = PtyChat(tmp_path, ["--", *SIGN_IN], env={"SIGN_IN_STATE": str(tmp_path / "state")})
    try:
        chat.expect(b"without a session until you authenticate")
        chat.expect(b"> ")
        chat.write(b"/auth browser\n")
        chat.expect(b"waiting for sign-in with 'browser' (up to 300 s; Ctrl-C gives up)...")
        # The URL reaches the user, escaped: the colour escape is shown, not obeyed.
        chat.expect(b"[agent stdout] \\x1b[1mPlease visit https://login.example.test/device?code=WXYZ to sign in")
        chat.expect(b"[agent stderr] waiting for the browser sign-in")
        assert b"invalid message" not in chat.seen  # shown as the agent's output, not as an engine warning
        chat.write(b"\x03")
        chat.expect(b"gave up waiting for sign-in with 'browser' (the request was cancelled)")
        # The agent was told: $/cancel_request reached it (it says so on stderr).
        chat.expect(b"[agent stderr] sign-in cancelled by the client")
        chat.write(b"/quit\n")
        assert chat.exit_code() == 1  # no session was ever started
        assert b"Traceback" not in chat.seen
    finally:
        chat.close()


def test_a_sign_in_that_takes_too_long_times_out(tmp_path: Path) -> None:
    done = chat_piped("--sign-in-timeout", "0.5", "--", *SIGN_IN, stdin="/auth browser\n/quit\n", cwd=tmp_path,
                      env={"SIGN_IN_STATE": str(tmp_path / "state")})
    assert "gave up waiting for sign-in with 'browser' after 0.5 s (--sign-in-timeout S waits longer)" in done.stdout
    assert done.returncode == 1 and "Traceback" not in done.stderr


def test_a_sign_in_answered_behind_terminal_escapes_completes(tmp_path: Path) -> None:
    # gemini-cli answers authenticate on the line where it leaves its alternate screen.
    done = chat_piped("--", *SIGN_IN, stdin="/auth browser\nhello\n/quit\n", cwd=tmp_path,
                      env={"SIGN_IN_STATE": str(tmp_path / "state"), "SIGN_IN_AUTO": "1"})
    assert "authenticated with 'browser'" in done.stdout, done.stdout
    assert "new session signed-1" in done.stdout and "agent> signed in and ready" in done.stdout
    assert "[agent stdout] \\x1b[1mPlease visit" in done.stdout  # the URL line is still shown
    assert "1049l" not in done.stdout  # the message behind the escape was read, not shown
    assert done.returncode == 0


def test_a_terminal_sign_in_runs_the_agents_command_in_the_terminal(tmp_path: Path) -> None:
    chat = PtyChat(tmp_path, ["--", *SIGN_IN], env={"SIGN_IN_STATE": str(tmp_path / "state")})
    try:
        chat.expect(b"> ")
        chat.write(b"/auth cli-login\n")
        chat.expect(b"--login in this terminal to sign in...")
        # The agent's own sign-in ran here, with the method's environment.
        chat.expect(b"Signed in at the terminal (mode terminal).")
        chat.expect(b"sign-in finished")
        chat.expect(b"new session signed-1")
        chat.write(b"hello\n")
        chat.expect(b"agent> signed in and ready")
        chat.write(b"/quit\n")
        assert chat.exit_code() == 0
    finally:
        chat.close()


def test_a_form_elicitation_is_answered_in_the_terminal(tmp_path: Path) -> None:
    chat = PtyChat(tmp_path, ["--", *SCENARIO])
    try:
        chat.expect(b"> ")
        chat.write(b"elicit\n")
        chat.expect(b"[elicitation] Tell me about yourself")
        chat.expect(b"name> ")
        chat.write(b"\n")  # required: asked again
        chat.expect(b"this field is required")
        chat.write(b"Ada\n")
        chat.expect(b"3. blue")
        chat.expect(b"colour> ")
        chat.write(b"purple\n")  # not a choice: asked again
        chat.expect(b"please pick one of the numbered choices")
        chat.write(b"3\n")
        chat.expect(b"agent> elicit: accepted {'name': 'Ada', 'colour': 'blue'}")
        chat.expect(b"(end_turn)")
        chat.write(b"elicit\n")
        chat.expect(b"[elicitation]", timeout=30)
        chat.write(b"/decline\n")
        chat.expect(b"agent> elicit: declined")
        chat.write(b"/quit\n")
        assert chat.exit_code() == 0
    finally:
        chat.close()


def test_config_and_model_commands_with_tab_completion(tmp_path: Path) -> None:
    chat = PtyChat(tmp_path, ["--", *SCENARIO])
    try:
        chat.expect(b"> ")
        chat.write(b"/conf\t")  # Tab completes the command...
        chat.expect(b"/config ")
        chat.write(b"mo\t")  # ...the option's id...
        chat.expect(b"/config model ")
        chat.write(b"la\t")  # ...and its value
        chat.expect(b"/config model large")
        chat.write(b"\n")
        chat.expect(b"model: large")
        chat.write(b"/config\n")
        chat.expect(b"* 2. large")
        chat.write(b"/model 1\n")
        chat.expect(b"model: small")
        chat.write(b"/config model huge\n")
        chat.expect(b"error: model takes one of: small, large")
        chat.write(b"/quit\n")
        assert chat.exit_code() == 0
    finally:
        chat.close()


def test_session_commands_list_load_resume_and_close(tmp_path: Path) -> None:
    script = "echo first\n/sessions\n/close\necho lost\n/load scenario-1\n/new\n/resume scenario-1\necho back\n/quit\n"
    done = chat_piped("--", *SCENARIO, stdin=script, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "* scenario-1  echo first" in out
    assert "closed session scenario-1 (/new starts another)" in out
    assert "no session: /new starts one (or /load ID, /resume ID)" in out
    load = out.split("/load scenario-1", 1)[1]
    assert load.index("you> echo first") < load.index("agent> first") < load.index("loaded session scenario-1")
    assert "resumed session scenario-1" in out and "agent> back" in out


def test_commands_the_agent_does_not_offer_say_so(tmp_path: Path) -> None:
    done = chat_piped("--", sys.executable, "-m", "acp.examples.echo_agent",
                      stdin="/config\n/model\n/sessions\n/quit\n", cwd=tmp_path)
    out = done.stdout
    assert "the agent offers no configuration options for this session" in out
    assert "the agent offers no model choice" in out
    assert "error:" in out.split("/sessions", 1)[1] and "session/list" in out.split("/sessions", 1)[1]


def test_a_form_is_checked_field_by_field() -> None:
    # The form logic alone, through its two terminal ends.
    form = schema.CreateElicitationRequestForm(
        session_id="s", message="Settings",
        requested_schema=schema.ElicitationSchema(
            properties={
                "age": schema.IntegerPropertySchema(minimum=0, maximum=150),
                "ratio": schema.NumberPropertySchema(),
                "ok": schema.BooleanPropertySchema(),
                "nick": schema.StringPropertySchema(min_length=2, default="x\x1bx"),
                "tags": schema.MultiSelectPropertySchema(items=schema.StringMultiSelectItems(enum=["a", "b", "c"])),
            },
            required=["age", "ok"],
        ),
    )
    typed = iter(["old", "200", "42", "", "maybe", "y", "", "1, c"])
    shown: list[str] = []
    answer = answer_elicitation(form, lambda prompt: next(typed), shown.append)
    assert isinstance(answer, schema.CreateElicitationResponseAccept)
    assert answer.content == {"age": 42, "ok": True, "nick": "x\x1bx", "tags": ["a", "c"]}
    text = "".join(shown)
    assert "please type a whole number" in text and "at most 150" in text and "please answer yes or no" in text
    assert "empty: x\\x1bx" in text  # what the agent wrote is escaped when shown
    cancelled = answer_elicitation(form, lambda prompt: None, shown.append)
    assert isinstance(cancelled, schema.CreateElicitationResponseCancel)
    url = schema.CreateElicitationRequestUrl(session_id="s", message="Connect", elicitation_id="e1",
                                             url="https://example.test/connect")
    assert isinstance(answer_elicitation(url, lambda prompt: "", shown.append), schema.CreateElicitationResponseAccept)
    assert isinstance(answer_elicitation(url, lambda prompt: "/decline", shown.append),
                      schema.CreateElicitationResponseDecline)
