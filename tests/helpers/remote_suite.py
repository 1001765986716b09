"""The end-to-end checks every remote profile (WebSocket, Streamable HTTP) runs."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from acp import schema
from acp.client import LocalFiles, LocalTerminals, PermissionPolicy, SyncClientBuilder

from .agent_full import DemoAgent
from .client_support import texts

WAIT = 20.0


class Updates:
    """Collects session/update notifications; wakes waiters on each one."""

    def __init__(self) -> None:
        self.items: list[schema.SessionNotification] = []
        self.cond = threading.Condition()

    def __call__(self, note: schema.SessionNotification) -> None:
        with self.cond:
            self.items.append(note)
            self.cond.notify_all()

    def wait_for(self, predicate: Any, timeout: float = WAIT) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.items), timeout), "timed out"



def exercise_every_method(builder: SyncClientBuilder, demo: DemoAgent, tmp_path: Path) -> None:
    """Every client->agent method and every agent->client call, end to end, over ``builder``'s
    remote connection (the demo agent of agent_full.py on the other side)."""
    (tmp_path / "in.txt").write_text("from the client's disk\n")
    files = LocalFiles([str(tmp_path)])
    updates = Updates()
    asked: list[str] = []

    def ask(request: schema.RequestPermissionRequest, ctx: Any) -> str | None:
        asked.append(request.tool_call.title or "")
        return next(o.option_id for o in request.options if o.kind == "allow_once")

    with LocalTerminals() as terminals, (
        builder
        .request_timeout(WAIT)
        .session_update_handler(updates)
        .read_text_file_handler(files.read_text_file)
        .write_text_file_handler(files.write_text_file)
        .terminal_handlers(terminals)
        .request_permission_handler(PermissionPolicy(ask=ask))
        .ext_request_handler("_demo/ping", lambda params, ctx: {"pong": params["n"]})
        .build()
    ) as client:
        init = client.initialize()
        assert init.agent_info is not None and init.agent_info.name == "demo-agent"
        assert client.capabilities.supports_load_session()
        client.authenticate("token")
        assert demo.authenticated == ["token"]

        sid = client.new_session(cwd=str(tmp_path)).session_id
        assert client.prompt(sid, "stream 300").stop_reason == "end_turn"
        assert texts(updates.items) == [f"chunk {i}" for i in range(300)]

        client.prompt(sid, "permission")
        assert asked == ["Rewrite main.py"] and texts(updates.items)[-1] == "allowed"

        client.prompt(sid, f"read {tmp_path}/in.txt")
        assert texts(updates.items)[-1] == "from the client's disk\n"
        client.prompt(sid, f"write {tmp_path}/out.txt written remotely")
        assert (tmp_path / "out.txt").read_text() == "written remotely"

        client.prompt(sid, "run echo from-a-terminal")
        assert texts(updates.items)[-1] == "exit=0 signal=None success=True out=from-a-terminal\n"
        assert terminals.terminal_ids() == []

        client.prompt(sid, "ext")
        assert texts(updates.items)[-1] == "ext={'pong': 1}"
        assert client.ext_request("_demo/echo", {"x": 1}) == {"echo": {"x": 1}}

        # Cancel: the turn waits for it, then answers "cancelled".
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(client.prompt, sid, "wait")
            updates.wait_for(lambda items: texts(items)[-1:] == ["waiting"])
            client.cancel(sid)
            assert future.result(WAIT).stop_reason == "cancelled"

        client.set_session_mode(sid, "code")
        updates.wait_for(lambda items: isinstance(items[-1].update, schema.CurrentModeUpdate))
        assert [s.session_id for s in client.list_sessions().sessions] == [sid]
        count = len(updates.items)
        client.load_session(sid, cwd=str(tmp_path))
        assert len(updates.items) > count  # history replayed over the socket
        client.resume_session(sid, cwd=str(tmp_path))
        client.close_session(sid)
        assert client.list_sessions().sessions == []
        client.logout()
