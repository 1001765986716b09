"""The agent's transport chosen from settings (issue 8, item 3): ``acp.AgentSettings``,
``SyncClientBuilder.agent_from_settings`` and the ``acp chat`` / ``acp check`` command line.

Parsing is pure (nothing spawned or opened), so most tests are plain unit tests; then one turn
end to end over a spawned ``ACP_AGENT_COMMAND``, one over ``ACP_AGENT_URL`` (WebSocket, with a
token and a header checked by the server), and the command line as real subprocesses.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import acp
from acp import schema
from acp.client import settings as keys
from acp.client.settings import (
    ACP_AGENT_COMMAND,
    ACP_AGENT_CWD,
    ACP_AGENT_HEADERS,
    ACP_AGENT_TOKEN,
    ACP_AGENT_URL,
    AgentSettings,
    AgentSettingsError,
)

WAIT = 60.0
ROOT = Path(__file__).resolve().parent.parent
ECHO = shlex.join([sys.executable, "-m", "acp.examples.echo_agent"])


def parse(**values: str) -> AgentSettings:
    return AgentSettings.from_mapping(values)


def error(**values: str) -> AgentSettingsError:
    with pytest.raises(AgentSettingsError) as caught:
        AgentSettings.from_mapping(values)
    assert isinstance(caught.value, ValueError)
    return caught.value


# ---------------------------------------------------------------------------------- parsing


def test_keys_are_constants_named_like_their_values() -> None:
    for name in ("ACP_AGENT_COMMAND", "ACP_AGENT_CWD", "ACP_AGENT_URL", "ACP_AGENT_HEADERS", "ACP_AGENT_TOKEN"):
        assert getattr(keys, name) == name
        assert name in keys.SETTINGS_KEYS
    assert acp.AgentSettings is AgentSettings and acp.AgentSettingsError is AgentSettingsError


def test_a_command_is_split_like_a_posix_shell() -> None:
    chosen = parse(ACP_AGENT_COMMAND="""my-agent --name 'two words' "a \\"q\\"" back\\ slash""")
    assert chosen.kind == "process"
    assert chosen.command == ("my-agent", "--name", "two words", 'a "q"', "back slash")
    assert chosen.url is None and chosen.cwd is None and dict(chosen.headers) == {}


def test_a_command_with_its_working_directory() -> None:
    chosen = parse(ACP_AGENT_COMMAND="agent --stdio", ACP_AGENT_CWD="  /srv/agent \n")
    assert chosen.command == ("agent", "--stdio") and chosen.cwd == "/srv/agent"
    assert chosen.describe() == "agent --stdio (in /srv/agent)"


@pytest.mark.parametrize("url", ["ws://127.0.0.1:8765/acp", "wss://agents.example/acp", "http://h:80/acp", "HTTPS://h"])
def test_a_url_of_each_scheme(url: str) -> None:
    chosen = parse(ACP_AGENT_URL=f"  {url}\n")
    assert chosen.kind == "remote" and chosen.url == url and chosen.command is None
    assert dict(chosen.headers) == {}


def test_both_set_is_an_error_naming_both_keys() -> None:
    exc = error(ACP_AGENT_COMMAND="agent", ACP_AGENT_URL="ws://h/acp")
    assert exc.keys == (ACP_AGENT_COMMAND, ACP_AGENT_URL)
    assert "ACP_AGENT_COMMAND" in str(exc) and "ACP_AGENT_URL" in str(exc) and "exactly one" in str(exc)


@pytest.mark.parametrize("values", [{}, {"PATH": "/bin", "ACP_AGENT_CWD": ""}, {"ACP_AGENT_COMMAND": " \t\n"}])
def test_none_set_is_an_error_naming_the_keys_to_set(values: dict[str, str]) -> None:
    exc = error(**values)
    assert exc.keys == (ACP_AGENT_COMMAND, ACP_AGENT_URL)
    assert str(exc).startswith("no agent: set ACP_AGENT_COMMAND") and "ACP_AGENT_URL" in str(exc)


def test_a_misspelt_key_is_pointed_out() -> None:
    exc = error(ACP_AGENT_COMAND="agent")
    assert "ACP_AGENT_COMAND: not a recognised key" in str(exc)


def test_whitespace_only_counts_as_unset() -> None:
    chosen = parse(ACP_AGENT_COMMAND="   ", ACP_AGENT_URL="ws://h/acp", ACP_AGENT_CWD="\n", ACP_AGENT_TOKEN=" ")
    assert chosen.url == "ws://h/acp" and dict(chosen.headers) == {}
    chosen = parse(ACP_AGENT_COMMAND="agent", ACP_AGENT_URL="", ACP_AGENT_HEADERS=" \n ")
    assert chosen.command == ("agent",)


def test_other_keys_are_ignored() -> None:
    assert parse(ACP_AGENT_COMMAND="agent", HOME="/root", PATH="/bin").command == ("agent",)


def test_none_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in keys.SETTINGS_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv(ACP_AGENT_URL, "wss://env.example/acp")
    monkeypatch.setenv(ACP_AGENT_TOKEN, "from-env")
    chosen = AgentSettings.from_mapping()
    assert chosen.url == "wss://env.example/acp"
    assert dict(chosen.headers) == {"Authorization": "Bearer from-env"}


def test_headers_as_name_value_lines() -> None:
    chosen = parse(ACP_AGENT_URL="ws://h", ACP_AGENT_HEADERS="X-Team: core\n\n  X-Trace-Id :  a:b:c  \r\nX-Empty:")
    assert dict(chosen.headers) == {"X-Team": "core", "X-Trace-Id": "a:b:c", "X-Empty": ""}


def test_headers_as_a_json_object() -> None:
    chosen = parse(ACP_AGENT_URL="ws://h", ACP_AGENT_HEADERS=' {"X-Team": "core", "X-List": "a, b"} ')
    assert dict(chosen.headers) == {"X-Team": "core", "X-List": "a, b"}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ("X-Team core", "line 1 is not 'Name: value'"),
        ("X-A: 1\nno colon here", "line 2 is not 'Name: value'"),
        ("Bad Name: 1", "'Bad Name' is not a valid header name (line 1)"),
        (": value", "'' is not a valid header name"),
        ("X-A: 1\nx-a: 2", "line 2: x-a is given twice"),
        ('{"X-A": 1}', "the value must be a string, not int"),
        ('{"X-A": "1\\n2"}', "the value of X-A contains control characters"),
        ('["X-A: 1"]', "'[\"X-A' is not a valid header name"),  # JSON only when it starts with {
        ('{"X-A": ', "not a valid JSON object"),
    ],
)
def test_bad_headers_name_the_key(headers: str, expected: str) -> None:
    exc = error(ACP_AGENT_URL="ws://h", ACP_AGENT_HEADERS=headers)
    assert exc.keys == (ACP_AGENT_HEADERS,)
    assert str(exc).startswith("invalid agent settings: ACP_AGENT_HEADERS: ") and expected in str(exc)


def test_a_header_value_is_never_repeated_in_an_error() -> None:
    exc = error(ACP_AGENT_URL="ws://h", ACP_AGENT_HEADERS="X-Secret: hunter2\nX-Secret: hunter3")
    assert "hunter" not in str(exc)


def test_the_token_becomes_a_bearer_authorization() -> None:
    chosen = parse(ACP_AGENT_URL="wss://h/acp", ACP_AGENT_TOKEN=" s3cret\n", ACP_AGENT_HEADERS="X-Team: core")
    assert dict(chosen.headers) == {"X-Team": "core", "Authorization": "Bearer s3cret"}


def test_a_token_and_an_authorization_header_conflict() -> None:
    exc = error(ACP_AGENT_URL="ws://h", ACP_AGENT_TOKEN="s3cret", ACP_AGENT_HEADERS="authorization: Basic eA==")
    assert exc.keys == (ACP_AGENT_TOKEN, ACP_AGENT_HEADERS)
    assert "s3cret" not in str(exc) and "eA==" not in str(exc)


def test_a_token_with_whitespace_is_refused_without_repeating_it() -> None:
    exc = error(ACP_AGENT_URL="ws://h", ACP_AGENT_TOKEN="Bearer s3cret")
    assert exc.keys == (ACP_AGENT_TOKEN,) and "s3cret" not in str(exc)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ftp://h/acp", "unsupported scheme 'ftp': use ws://, wss://, http://, https://"),
        ("localhost:8765", "unsupported scheme 'localhost'"),
        ("/just/a/path", "not a URL"),
        ("ws:///acp", "the URL has no host"),
        ("ws://h:port/acp", "not a valid URL"),
    ],
)
def test_a_bad_url_names_the_key(url: str, expected: str) -> None:
    exc = error(ACP_AGENT_URL=url)
    assert exc.keys == (ACP_AGENT_URL,)
    assert str(exc).startswith("invalid agent settings: ACP_AGENT_URL: ") and expected in str(exc)


@pytest.mark.parametrize(
    ("command", "expected"),
    [("agent 'unclosed", "no closing quotation"), ("''", "the program name is empty"), ("'' --stdio", "empty")],
)
def test_a_bad_command_names_the_key(command: str, expected: str) -> None:
    exc = error(ACP_AGENT_COMMAND=command)
    assert exc.keys == (ACP_AGENT_COMMAND,) and expected in str(exc)


def test_url_keys_with_a_command_are_errors_naming_them() -> None:
    exc = error(ACP_AGENT_COMMAND="agent", ACP_AGENT_HEADERS="X-A: 1", ACP_AGENT_TOKEN="t")
    assert exc.keys == (ACP_AGENT_HEADERS, ACP_AGENT_TOKEN)
    assert "ACP_AGENT_HEADERS: only applies to ACP_AGENT_URL, but ACP_AGENT_COMMAND is set" in str(exc)
    assert "ACP_AGENT_TOKEN: only applies to ACP_AGENT_URL" in str(exc)


def test_the_cwd_with_a_url_is_an_error_naming_it() -> None:
    exc = error(ACP_AGENT_URL="ws://h", ACP_AGENT_CWD="/srv")
    assert exc.keys == (ACP_AGENT_CWD,)
    assert "ACP_AGENT_CWD: only applies to ACP_AGENT_COMMAND, but ACP_AGENT_URL is set" in str(exc)


def test_every_problem_is_reported_at_once() -> None:
    exc = error(ACP_AGENT_URL="ftp://h", ACP_AGENT_CWD="/srv", ACP_AGENT_HEADERS="oops")
    assert exc.keys == (ACP_AGENT_CWD, ACP_AGENT_URL, ACP_AGENT_HEADERS)
    assert str(exc).count(";") == 2


def test_repr_hides_header_values_and_url_passwords() -> None:
    chosen = parse(ACP_AGENT_URL="wss://ada:pa55@h/acp", ACP_AGENT_TOKEN="s3cret", ACP_AGENT_HEADERS="X-Key: k3y")
    text = repr(chosen)
    assert "s3cret" not in text and "k3y" not in text and "pa55" not in text
    assert "'Authorization': '***'" in text and "ada:***@h" in text
    assert chosen.describe() == "wss://ada:***@h/acp"


def test_direct_construction_is_checked() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        AgentSettings()
    with pytest.raises(ValueError, match="exactly one"):
        AgentSettings(command=("a",), url="ws://h")
    with pytest.raises(ValueError, match="headers go with a url"):
        AgentSettings(command=("a",), headers={"X": "1"})
    with pytest.raises(ValueError, match="cwd goes with a command"):
        AgentSettings(url="ws://h", cwd="/")
    assert AgentSettings(command=("a", "b")).kind == "process"


# ---------------------------------------------------------------------------------- builder


def test_the_builder_method_registers_one_transport_and_spawns_nothing() -> None:
    builder = acp.SyncClient.builder().agent_from_settings({ACP_AGENT_COMMAND: "no-such-agent-xyz"})
    builder.agent_process("another")
    with pytest.raises(ValueError, match="exactly one transport.*got 2"):
        builder.build()


def test_the_builder_method_raises_for_bad_settings() -> None:
    with pytest.raises(AgentSettingsError, match="ACP_AGENT_COMMAND and ACP_AGENT_URL"):
        acp.SyncClient.builder().agent_from_settings({ACP_AGENT_COMMAND: "a", ACP_AGENT_URL: "ws://h"})


def _texts(updates: list[schema.SessionNotification]) -> str:
    return "".join(
        u.update.content.text
        for u in updates
        if isinstance(u.update, schema.AgentMessageChunk) and isinstance(u.update.content, schema.TextContent)
    )


def test_a_turn_with_the_agent_spawned_from_acp_agent_command(tmp_path: Path, no_thread_leak: None) -> None:
    updates: list[schema.SessionNotification] = []
    settings = {ACP_AGENT_COMMAND: ECHO, ACP_AGENT_CWD: str(tmp_path), "UNRELATED": "x"}
    with (acp.SyncClient.builder()
            .agent_from_settings(settings)
            .session_update_handler(updates.append)
            .request_timeout(WAIT)
            .build()) as client:
        assert client.initialize().agent_info.name == "acp-echo-agent"
        process = client.process
        assert process is not None and process.argv == (sys.executable, "-m", "acp.examples.echo_agent")
        if os.path.exists(f"/proc/{process.pid}/cwd"):
            assert os.path.realpath(f"/proc/{process.pid}/cwd") == os.path.realpath(tmp_path)
        session = client.new_session(cwd=str(tmp_path))
        assert client.prompt(session.session_id, "from the settings").stop_reason == "end_turn"
    assert _texts(updates) == "from the settings"


@pytest.fixture
def echo_server(no_thread_leak: None) -> Iterator[tuple[str, list[Mapping[str, str]]]]:
    """The echo agent over WebSocket; it accepts only ``Bearer s3cret`` and records the
    upgrade requests' headers."""
    pytest.importorskip("websockets")
    from acp.examples.echo_agent import build_agent

    seen: list[Mapping[str, str]] = []

    def authenticate(headers: Mapping[str, str]) -> int | None:
        seen.append({"Authorization": headers.get("Authorization", ""), "X-Team": headers.get("X-Team", "")})
        return None if headers.get("Authorization") == "Bearer s3cret" else 401

    agent = build_agent()
    server = agent.serve_websocket(port=0, authenticate=authenticate)
    try:
        yield server.url, seen
    finally:
        server.close()
        agent.close()


def test_a_turn_with_the_agent_at_acp_agent_url(echo_server: tuple[str, list[Mapping[str, str]]]) -> None:
    url, seen = echo_server
    updates: list[schema.SessionNotification] = []
    settings = {ACP_AGENT_URL: url, ACP_AGENT_TOKEN: "s3cret", ACP_AGENT_HEADERS: "X-Team: core"}
    with (acp.SyncClient.builder()
            .agent_from_settings(settings)
            .session_update_handler(updates.append)
            .request_timeout(WAIT)
            .build()) as client:
        client.initialize()
        assert client.process is None
        session = client.new_session(cwd="/")
        assert client.prompt(session.session_id, "over the socket").stop_reason == "end_turn"
    assert _texts(updates) == "over the socket"
    assert seen == [{"Authorization": "Bearer s3cret", "X-Team": "core"}]


def test_an_agent_settings_object_can_be_given_to_the_builder(
    echo_server: tuple[str, list[Mapping[str, str]]],
) -> None:
    url, _ = echo_server
    chosen = AgentSettings(url=url, headers={"Authorization": "Bearer s3cret"})
    with acp.SyncClient.builder().agent_from_settings(chosen).build() as client:
        assert client.initialize().agent_info.name == "acp-echo-agent"


def test_a_turn_with_the_agent_at_an_http_url(no_thread_leak: None) -> None:
    pytest.importorskip("acp.transport.http_client")
    pytest.importorskip("acp.transport.http_server")
    from acp.examples.echo_agent import build_agent

    agent = build_agent()
    server = agent.serve_http(port=0, authenticate=lambda h: None if h.get("Authorization") == "Bearer s3cret" else 401)
    try:
        assert server.url.startswith("http://")
        updates: list[schema.SessionNotification] = []
        settings = {ACP_AGENT_URL: server.url, ACP_AGENT_TOKEN: "s3cret"}
        with (acp.SyncClient.builder()
                .agent_from_settings(settings)
                .session_update_handler(updates.append)
                .request_timeout(WAIT)
                .build()) as client:
            client.initialize()
            session = client.new_session(cwd="/")
            assert client.prompt(session.session_id, "over http").stop_reason == "end_turn"
        assert _texts(updates) == "over http"
    finally:
        server.close()
        agent.close()


def test_the_conformance_check_reports_an_unreachable_url() -> None:
    from acp.conformance import run_checks

    pytest.importorskip("websockets")
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = run_checks(AgentSettings(url=f"ws://127.0.0.1:{port}/acp"), timeout=5)
    assert not report.conforming and report.agent == f"ws://127.0.0.1:{port}/acp"
    assert [(r.name, r.status) for r in report.results] == [("connect", "FAIL")]


# ---------------------------------------------------------------------------------- command line


def run_acp(*args: str, env: Mapping[str, str] | None = None, stdin: str = "", cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ACP_AGENT_")}
    return subprocess.run(
        [sys.executable, "-m", "acp", *args],
        input=stdin, capture_output=True, text=True, timeout=WAIT * 2, cwd=cwd, env={**base, **(env or {})},
    )


def test_check_takes_the_agent_from_acp_agent_command() -> None:
    done = run_acp("check", env={ACP_AGENT_COMMAND: ECHO})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"acp check: {ECHO}\n")
    assert "PASS         robust.stdin_closed" in done.stdout and "verdict: CONFORMING" in done.stdout


def test_check_over_url(echo_server: tuple[str, list[Mapping[str, str]]]) -> None:
    url, seen = echo_server
    # The token comes from the environment; an ACP_AGENT_COMMAND there is overridden by --url.
    done = run_acp("check", "--url", url, env={ACP_AGENT_TOKEN: "s3cret", ACP_AGENT_COMMAND: "ignored"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"acp check: {url}\n")
    assert "PASS         prompt.basic" in done.stdout and "PASS         robust.garbage_line" in done.stdout
    assert "SKIP         robust.stdin_closed" in done.stdout and "verdict: CONFORMING" in done.stdout
    assert len(seen) == 3  # one WebSocket per run of checks


def test_check_over_url_reports_a_refusal(echo_server: tuple[str, list[Mapping[str, str]]]) -> None:
    url, _ = echo_server
    done = run_acp("check", "--url", url)
    assert done.returncode == 3  # not checked: the agent could not be reached
    assert "FAIL         connect" in done.stdout and "HTTP 401" in done.stdout


def test_chat_over_url_from_the_environment(echo_server: tuple[str, list[Mapping[str, str]]], tmp_path: Path) -> None:
    url, _ = echo_server
    done = run_acp("chat", env={ACP_AGENT_URL: url, ACP_AGENT_TOKEN: "s3cret"}, stdin="hello socket\n", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "connected to acp-echo-agent" in done.stdout and "agent> hello socket" in done.stdout


def test_chat_with_url_option(echo_server: tuple[str, list[Mapping[str, str]]], tmp_path: Path) -> None:
    url, _ = echo_server
    done = run_acp("chat", "--url", url, env={ACP_AGENT_TOKEN: "s3cret"}, stdin="hi\n", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agent> hi" in done.stdout
    refused = run_acp("chat", "--url", url, stdin="hi\n", cwd=tmp_path)
    assert refused.returncode == 1 and "HTTP 401" in refused.stdout


def test_chat_takes_the_agent_from_acp_agent_command(tmp_path: Path) -> None:
    scenario = shlex.join([sys.executable, "-m", "acp.examples.scenario_agent"])
    done = run_acp("chat", env={ACP_AGENT_COMMAND: scenario}, stdin="stream 2\n", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "connected to acp-scenario-agent" in done.stdout and "chunk 2/2" in done.stdout


def test_an_explicit_command_ignores_the_environment(tmp_path: Path) -> None:
    env = {ACP_AGENT_COMMAND: "no-such-agent", ACP_AGENT_URL: "ws://h"}  # invalid: both set
    done = run_acp("chat", "--", *shlex.split(ECHO), env=env, stdin="still echo\n", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agent> still echo" in done.stdout


@pytest.mark.parametrize("sub", ["chat", "check"])
def test_bad_settings_in_the_environment_are_a_usage_error(sub: str) -> None:
    done = run_acp(sub, env={ACP_AGENT_COMMAND: "agent", ACP_AGENT_URL: "ws://h/acp"})
    assert done.returncode == 2
    assert f"{sub}: both ACP_AGENT_COMMAND and ACP_AGENT_URL are set" in done.stderr
    done = run_acp(sub, env={ACP_AGENT_TOKEN: "s3cret"})
    assert done.returncode == 2 and "no agent: set ACP_AGENT_COMMAND" in done.stderr
    assert "s3cret" not in done.stderr


@pytest.mark.parametrize("sub", ["chat", "check"])
def test_url_and_a_command_are_mutually_exclusive(sub: str) -> None:
    done = run_acp(sub, "--url", "ws://h/acp", "--", "agent")
    assert done.returncode == 2 and "give --url or an agent command after --, not both" in done.stderr


def test_url_option_is_checked_like_the_setting() -> None:
    done = run_acp("check", "--url", "ftp://h/acp")
    assert done.returncode == 2 and "argument --url: unsupported scheme 'ftp'" in done.stderr


def test_check_without_any_agent_says_how_to_give_one() -> None:
    done = run_acp("check")
    assert done.returncode == 2
    assert "needs the agent's command" in done.stderr and "ACP_AGENT_URL" in done.stderr
