"""SyncClient against a real agent process (tests/helpers/client_fake_agent.py) over pipes."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from acp import schema
from acp.client import ClientRequestContext, SyncClient, SyncClientBuilder
from acp.errors import ConnectionClosedError

from .conftest import helper_argv
from .helpers.client_support import WAIT, FakeTerminals, texts
from .helpers.fault_support import in_thread

Spawn = Callable[..., SyncClient]


@pytest.fixture
def spawn(no_thread_leak: None) -> Iterator[Spawn]:
    """Start the fake agent process with a client configured by ``configure``."""
    made: list[SyncClient] = []

    def factory(configure: Callable[[SyncClientBuilder], Any] | None = None, **options: Any) -> SyncClient:
        builder = (SyncClient.builder()
                   .agent_process(*helper_argv("client_fake_agent", json.dumps(options)))
                   .request_timeout(WAIT))
        if configure is not None:
            configure(builder)
        client = builder.build()
        made.append(client)
        return client

    yield factory
    for client in made:
        client.close()


def test_a_whole_conversation_with_a_spawned_agent(spawn: Spawn, tmp_path: Path) -> None:
    updates: list[schema.SessionNotification] = []
    terminals = FakeTerminals()
    (tmp_path / "in.txt").write_text("on disk")

    def allow(request: schema.RequestPermissionRequest, ctx: ClientRequestContext) -> schema.RequestPermissionResponse:
        return schema.RequestPermissionResponse(outcome=schema.SelectedPermissionOutcome(option_id="allow"))

    def write(request: schema.WriteTextFileRequest, ctx: ClientRequestContext) -> schema.WriteTextFileResponse:
        Path(request.path).write_text(request.content)
        return schema.WriteTextFileResponse()

    client = spawn(lambda b: b.session_update_handler(updates.append)
                   .read_text_file_handler(lambda r, c: schema.ReadTextFileResponse(content=Path(r.path).read_text()))
                   .write_text_file_handler(write)
                   .terminal_handlers(terminals)
                   .request_permission_handler(allow)
                   .create_elicitation_handler(lambda r, c: schema.CreateElicitationResponseDecline())
                   .ext_request_handler("_client/hello", lambda p, c: {"hi": p["x"]}))
    process = client.process
    assert process is not None and process.pid > 0 and process.returncode is None
    init = client.initialize()
    assert init.agent_info is not None and init.agent_info.name == "fake-agent"
    sid = client.new_session(str(tmp_path)).session_id

    assert client.prompt(sid, "stream 500").stop_reason == "end_turn"
    assert texts(updates) == [str(k) for k in range(500)]
    updates.clear()
    client.prompt(sid, f"read {tmp_path / 'in.txt'}")
    client.prompt(sid, f"write {tmp_path / 'out.txt'} written")
    client.prompt(sid, "terminal echo from-terminal")
    client.prompt(sid, "permission")
    client.prompt(sid, "elicit")
    client.prompt(sid, "ext")
    assert texts(updates) == [
        "read=on disk", "wrote", "exit=0 out=from-terminal\n", "outcome=selected:allow",
        "elicit=decline null", 'ext={"hi": 1}',
    ]
    assert (tmp_path / "out.txt").read_text() == "written"
    assert [s.session_id for s in client.iter_sessions()] == [f"old-{k}" for k in range(5)]
    assert client.ext_request("_agent/echo", {"q": 1}) == {"echo": {"q": 1}}

    client.close()
    assert process.returncode == 0  # it saw EOF on stdin and exited by itself


def test_cancel_over_a_process(spawn: Spawn) -> None:
    holding = threading.Event()

    def on_update(notification: schema.SessionNotification) -> None:
        if texts([notification]) == ["holding"]:
            holding.set()

    client = spawn(lambda b: b.session_update_handler(on_update))
    client.initialize()
    sid = client.new_session("/work").session_id
    future, thread = in_thread(lambda: client.prompt(sid, "hold"), "test-prompt")
    assert holding.wait(WAIT)
    client.cancel(sid)
    assert future.result(WAIT).stop_reason == "cancelled"
    thread.join(WAIT)


def test_permission_cancel_rule_over_a_process(spawn: Spawn) -> None:
    updates: list[schema.SessionNotification] = []
    entered = threading.Event()
    returned = threading.Event()
    late: list[bool] = []

    def ask_user(request: schema.RequestPermissionRequest, ctx: ClientRequestContext) -> schema.RequestPermissionResponse:
        entered.set()
        late.append(ctx.cancelled.wait(WAIT))
        returned.set()
        return schema.RequestPermissionResponse(outcome=schema.SelectedPermissionOutcome(option_id="allow"))

    client = spawn(lambda b: b.session_update_handler(updates.append).request_permission_handler(ask_user))
    client.initialize()
    sid = client.new_session("/work").session_id
    future, thread = in_thread(lambda: client.prompt(sid, "permission"), "test-prompt")
    assert entered.wait(WAIT)
    client.cancel(sid)
    assert future.result(WAIT).stop_reason == "cancelled"
    thread.join(WAIT)
    assert texts(updates) == ["outcome=cancelled"]
    # The SDK answered for the handler, so the turn may end before the handler itself returns.
    assert returned.wait(WAIT)
    assert late == [True]
    # The next turn is not affected by the earlier cancellation.
    entered.clear()
    future, thread = in_thread(lambda: client.prompt(sid, "stream 2"), "test-prompt")
    assert future.result(WAIT).stop_reason == "end_turn"
    thread.join(WAIT)


def test_agent_crash_mid_prompt_raises_connection_closed(spawn: Spawn) -> None:
    updates: list[schema.SessionNotification] = []
    client = spawn(lambda b: b.session_update_handler(updates.append))
    client.initialize()
    sid = client.new_session("/work").session_id
    future, thread = in_thread(lambda: client.prompt(sid, "crash"), "test-prompt")
    with pytest.raises(ConnectionClosedError):
        future.result(WAIT)
    thread.join(WAIT)
    assert not thread.is_alive()
    assert texts(updates) == ["about to crash"]
    assert client.is_closed
    with pytest.raises(ConnectionClosedError):
        client.prompt(sid, "again")
    process = client.process
    assert process is not None
    client.close()
    assert process.returncode == 3


@pytest.mark.parametrize("inherit", [True, False])
def test_cwd_and_env_reach_the_agent(no_thread_leak: None, tmp_path: Path, inherit: bool) -> None:
    client = (SyncClient.builder()
              .agent_process(*helper_argv("client_fake_agent"), cwd=tmp_path,
                             env={"ACP_FAKE_MARK": "yes"}, inherit_env=inherit)
              .build())
    try:
        meta = client.initialize().field_meta
        assert meta is not None
        assert meta["cwd"] == str(tmp_path.resolve())
        assert meta["mark"] == "yes"
        assert meta["inherited"] == inherit  # PATH is there only when the environment is inherited
    finally:
        client.close()


def test_the_ready_made_handlers_plug_into_the_builder(spawn: Spawn, tmp_path: Path) -> None:
    from acp.client import LocalFiles, LocalTerminals, PermissionPolicy

    updates: list[schema.SessionNotification] = []
    (tmp_path / "in.txt").write_text("confined")
    files = LocalFiles([tmp_path])
    with LocalTerminals(allowed_cwd_roots=[tmp_path]) as terminals:
        client = spawn(lambda b: b.session_update_handler(updates.append)
                       .read_text_file_handler(files.read_text_file)
                       .write_text_file_handler(files.write_text_file)
                       .terminal_handlers(terminals)
                       .request_permission_handler(PermissionPolicy(default="reject")))
        client.initialize()
        assert client.capabilities.supports_terminal() and client.capabilities.supports_write_text_file()
        sid = client.new_session(str(tmp_path)).session_id
        client.prompt(sid, f"read {tmp_path / 'in.txt'}")
        client.prompt(sid, f"write {tmp_path / 'out.txt'} via-local-files")
        client.prompt(sid, "terminal echo local")
        client.prompt(sid, "permission")
        client.close()
    assert texts(updates) == ["read=confined", "wrote", "exit=0 out=local\n", "outcome=selected:reject"]
    assert (tmp_path / "out.txt").read_text() == "via-local-files"


def test_a_call_after_the_agent_exited_says_so(no_thread_leak: None) -> None:
    import sys

    import acp
    from acp.errors import ConnectionClosedError

    client = acp.SyncClient.builder().agent_process(sys.executable, "-c", "import sys; sys.exit(7)").build()
    try:
        assert client.process is not None
        assert client.process.wait(10) == 7
        with pytest.raises(ConnectionClosedError) as info:
            client.initialize()
        assert "the agent process exited with code 7" in str(info.value)
    finally:
        client.close()


def test_a_spawned_agents_client_builds_its_first_turn_decoders_while_the_agent_starts() -> None:
    # In a fresh interpreter (this one has built them all): none exists before build(); once the
    # connection's clock ran what build() queued, the first turn's decoders are there, before
    # initialize was even answered. (With one CPU there is no idle one to build them on.)
    import subprocess
    import sys

    from acp.polling import SEVERAL_CPUS

    if not SEVERAL_CPUS:
        pytest.skip("one CPU: the decoders are built when first used")

    script = """
import sys, threading
import acp
from acp import schema
from acp.rpc import handlers
assert schema.SessionNotification not in handlers._DECODERS
client = (acp.SyncClient.builder().agent_process(sys.executable, "-c", "import time; time.sleep(30)")
          .session_update_handler(lambda n: None).read_text_file_handler(lambda r, c: None).build())
ran = threading.Event()
client._conn.call_later(0.0, ran.set)  # after the warm-up queued before it
assert ran.wait(30)
built = {getattr(t, "__name__", str(t)) for t in handlers._DECODERS}
client.close(timeout=0.1)
print(sorted(built))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT * 2)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sorted([
        "InitializeResponse", "NewSessionResponse", "PromptResponse", "SessionNotification", "ReadTextFileRequest",
    ]))
