"""Secrets and logs (issue 7, part 5).

* Payloads are logged only at DEBUG: a prompt carrying a secret and a file read of secret
  content run end to end while every log record at INFO and above is captured; the secrets
  appear in none of them (and, as a check that the capture works, they do appear at DEBUG).
* A spawned agent gets exactly the environment the caller passes with ``inherit_env=False``.
* An error answer never carries a traceback or the text of an unexpected exception, on either
  side: a handler raising ``ValueError("<secret>")`` is answered -32603 "Internal error" with no
  data, and the secret is not on the wire.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from acp import schema
from acp.agent import PromptContext, SyncAgent
from acp.client import ClientRequestContext, LocalFiles, SyncClient
from acp.errors import RequestError

from .conftest import helper_argv
from .helpers.fault_agent import build_agent
from .helpers.fault_support import WAIT

PROMPT_SECRET = "sk-PROMPT-7f3a9c1e-secret"
FILE_SECRET = "FILE-CONTENT-d41d8cd9-secret"
ERROR_SECRET = "ERROR-TEXT-0badc0de-secret"
ENV_SECRET = "ENV-VALUE-5eed5eed-secret"


def _texts(updates: list[schema.SessionNotification]) -> list[str]:
    out = []
    for note in updates:
        update = note.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(update.content, schema.TextContent):
            out.append(update.content.text)
    return out


def _leaks(records: list[logging.LogRecord], secrets: tuple[str, ...], min_level: int) -> list[str]:
    """Records at ``min_level`` or above whose message, arguments or traceback show a secret."""
    found = []
    formatter = logging.Formatter()
    for record in records:
        if record.levelno < min_level:
            continue
        text = record.getMessage()
        if record.exc_info:
            text += formatter.formatException(record.exc_info)
        if record.stack_info:
            text += record.stack_info
        for secret in secrets:
            if secret in text:
                found.append(f"{record.levelname} {record.name}: {text[:200]}")
    return found


def _conversation(client: SyncClient, secret_file: Path, updates: list[schema.SessionNotification]) -> None:
    client.initialize()
    sid = client.new_session(cwd=str(secret_file.parent)).session_id
    assert client.prompt(sid, f"my token is {PROMPT_SECRET}").stop_reason == "end_turn"
    assert client.prompt(sid, f"read {secret_file}").stop_reason == "end_turn"
    texts = _texts(updates)
    # The secrets really went through, both ways: otherwise the test proves nothing.
    assert f"echo: my token is {PROMPT_SECRET}" in texts
    assert FILE_SECRET in "".join(texts)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "credentials.txt"
    path.write_text(f"password = {FILE_SECRET}\n")
    return path


def test_payloads_only_at_debug_in_process(
    no_thread_leak: None, caplog: pytest.LogCaptureFixture, secret_file: Path
) -> None:
    """Agent and client in one process: every acp logger is captured."""
    caplog.set_level(logging.INFO)
    agent, _ = build_agent()
    updates: list[schema.SessionNotification] = []
    files = LocalFiles([str(secret_file.parent)])
    client = (
        SyncClient.builder()
        .transport(agent.serve_in_process())
        .session_update_handler(updates.append)
        .read_text_file_handler(files.read_text_file)
        .request_timeout(WAIT)
        .build()
    )
    try:
        _conversation(client, secret_file, updates)
    finally:
        client.close()
        agent.close()
    assert caplog.records, "nothing was captured at INFO: the capture is broken"
    assert _leaks(caplog.records, (PROMPT_SECRET, FILE_SECRET), logging.INFO) == []


def test_payloads_do_appear_at_debug(no_thread_leak: None, caplog: pytest.LogCaptureFixture, secret_file: Path) -> None:
    """The counterpart that keeps the test above honest: at DEBUG the payloads are logged, so
    a payload logged at INFO would be caught."""
    caplog.set_level(logging.DEBUG, logger="acp")
    agent, _ = build_agent()
    updates: list[schema.SessionNotification] = []
    files = LocalFiles([str(secret_file.parent)])
    client = (
        SyncClient.builder()
        .transport(agent.serve_in_process())
        .session_update_handler(updates.append)
        .read_text_file_handler(files.read_text_file)
        .request_timeout(WAIT)
        .build()
    )
    try:
        _conversation(client, secret_file, updates)
    finally:
        client.close()
        agent.close()
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert _leaks(debug, (PROMPT_SECRET,), logging.DEBUG), "payloads are not logged at DEBUG at all"


def test_payloads_only_at_debug_with_an_agent_process(
    no_thread_leak: None, caplog: pytest.LogCaptureFixture, secret_file: Path
) -> None:
    """The agent runs as a process logging at INFO to its stderr, which the client forwards
    into its own logging at INFO: still no secret."""
    caplog.set_level(logging.INFO)
    updates: list[schema.SessionNotification] = []
    files = LocalFiles([str(secret_file.parent)])
    client = (
        SyncClient.builder()
        .agent_process(*helper_argv("fault_agent", "--log-level", "INFO"))
        .session_update_handler(updates.append)
        .read_text_file_handler(files.read_text_file)
        .request_timeout(WAIT)
        .build()
    )
    try:
        _conversation(client, secret_file, updates)
    finally:
        client.close()
    forwarded = [r for r in caplog.records if r.name == "acp.transport.process"]
    assert any("initialized" in r.getMessage() for r in forwarded), "the agent's INFO log was not forwarded"
    assert _leaks(caplog.records, (PROMPT_SECRET, FILE_SECRET), logging.INFO) == []


# ---------------------------------------------------------------------------------------------
# the environment of a spawned agent


def _spawn_and_read_env(**process_options: Any) -> dict[str, str]:
    updates: list[schema.SessionNotification] = []
    client = (
        SyncClient.builder()
        .agent_process(*helper_argv("fault_agent"), **process_options)
        .session_update_handler(updates.append)
        .request_timeout(WAIT)
        .build()
    )
    with client:
        client.initialize()
        sid = client.new_session(cwd="/tmp").session_id
        client.prompt(sid, "env")
    texts = _texts(updates)
    assert len(texts) == 1
    env: dict[str, str] = json.loads(texts[0])
    return env


def test_agent_gets_exactly_the_environment_given(no_thread_leak: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_TEST_PARENT_SECRET", ENV_SECRET)
    given = {"ACP_ONLY_THIS": "yes", "LC_ALL": "C.UTF-8"}
    env = _spawn_and_read_env(inherit_env=False, env=given)
    assert env == given
    assert ENV_SECRET not in json.dumps(env)


def test_agent_inherits_the_environment_by_default(no_thread_leak: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contrast: by default the parent's variables (and the extra ones) are there."""
    monkeypatch.setenv("ACP_TEST_PARENT_SECRET", ENV_SECRET)
    env = _spawn_and_read_env(env={"ACP_EXTRA": "1"})
    assert env["ACP_TEST_PARENT_SECRET"] == ENV_SECRET
    assert env["ACP_EXTRA"] == "1"


# ---------------------------------------------------------------------------------------------
# error answers carry no exception text


class WireLog:
    """A wire tap keeping every line, by direction."""

    def __init__(self) -> None:
        self.lines: dict[str, list[bytes]] = {"in": [], "out": []}
        self._lock = threading.Lock()

    def __call__(self, direction: str, line: bytes) -> None:
        with self._lock:
            self.lines[direction].append(bytes(line))

    def answers(self, direction: str) -> list[dict[str, Any]]:
        out = []
        for line in self.lines[direction]:
            msg = json.loads(line)
            if "method" not in msg:
                out.append(msg)
        return out


def _assert_clean(error: RequestError) -> None:
    assert error.code == -32603
    assert error.message == "Internal error"
    assert error.data is None
    for text in (str(error), repr(error)):
        assert ERROR_SECRET not in text and "Traceback" not in text


def test_agent_handler_exception_text_is_not_sent(no_thread_leak: None, caplog: pytest.LogCaptureFixture) -> None:
    agent, _ = build_agent()
    wire = WireLog()
    client = SyncClient.builder().transport(agent.serve_in_process()).wire_tap(wire).request_timeout(WAIT).build()
    try:
        client.initialize()
        sid = client.new_session(cwd="/tmp").session_id
        with pytest.raises(RequestError) as info:
            client.prompt(sid, f"raise {ERROR_SECRET}")
        _assert_clean(info.value)
        assert client.prompt(sid, "after").stop_reason == "end_turn"  # the connection goes on
    finally:
        client.close()
        agent.close()
    for line in wire.lines["in"]:
        assert ERROR_SECRET.encode() not in line and b"Traceback" not in line
    # The traceback is logged locally, by the agent (that is where it belongs).
    assert any(ERROR_SECRET in logging.Formatter().formatException(r.exc_info) for r in caplog.records if r.exc_info)


def test_client_handler_exception_text_is_not_sent(no_thread_leak: None) -> None:
    """The client's fs handler raises ValueError(<secret>): the agent's ctx.read_file gets
    -32603 "Internal error" and nothing else; the secret never leaves the client."""
    seen_by_agent: list[Any] = []

    def prompt(req: schema.PromptRequest, ctx: PromptContext) -> Any:
        try:
            ctx.read_file("/tmp/anything.txt")
        except RequestError as exc:
            seen_by_agent.append((exc.code, exc.message, exc.data, str(exc), repr(exc)))
        return "end_turn"

    agent = (
        SyncAgent.builder()
        .new_session_handler(lambda req, ctx: schema.NewSessionResponse(session_id="s1"))
        .prompt_handler(prompt)
        .build()
    )

    def read(req: schema.ReadTextFileRequest, ctx: ClientRequestContext) -> str:
        raise ValueError(f"cannot read: {ERROR_SECRET}")

    wire = WireLog()
    client = (
        SyncClient.builder()
        .transport(agent.serve_in_process())
        .read_text_file_handler(read)
        .wire_tap(wire)
        .request_timeout(WAIT)
        .build()
    )
    try:
        client.initialize()
        client.new_session(cwd="/tmp")
        assert client.prompt("s1", "go").stop_reason == "end_turn"
    finally:
        client.close()
        agent.close()
    assert len(seen_by_agent) == 1
    code, message, data, text, rep = seen_by_agent[0]
    assert (code, message, data) == (-32603, "Internal error", None)
    assert ERROR_SECRET not in text + rep
    answers = wire.answers("out")
    assert {"code": -32603, "message": "Internal error"} in [a.get("error") for a in answers]
    for line in wire.lines["out"]:
        assert ERROR_SECRET.encode() not in line and b"Traceback" not in line
