"""A fake ACP client for the agent tests: a raw ``acp.connection.Connection`` with fs,
terminal, permission and elicitation handlers, recording everything the agent sends.

Nothing here sleeps: tests wait on :meth:`FakeClient.wait_for` (a condition notified on every
recorded event) or on the events the handlers set.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from acp.connection import Connection, InboundCall
from acp.errors import RequestError
from acp.transport.base import Transport

WAIT = 10.0

FULL_CAPS: dict[str, Any] = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
    "elicitation": {"form": {}, "url": {}},
}


class FakeTerminal:
    """A terminal the fake client "runs": it exits when told to, or when killed/released."""

    def __init__(self, terminal_id: str, params: Any, exit_code: int | None, output: str, block: bool) -> None:
        self.id = terminal_id
        self.params = params
        self.exit_code = exit_code
        self.signal: str | None = None
        self.output = output
        self.exited = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[threading.Event] = []
        if not block:
            self.exited.set()

    def finish(self) -> None:
        """The command ends: wake every wait_for_exit."""
        with self._lock:
            self.exited.set()
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.set()

    def wait(self, call: InboundCall) -> bool:
        """Block until the command ends (True) or the agent abandons the wait (False)."""
        wake = threading.Event()
        with self._lock:
            if self.exited.is_set():
                return True
            self._waiters.append(wake)
        call.on_cancel(wake.set)
        wake.wait(WAIT)
        return self.exited.is_set()


class FakeClient:
    """The client side of one connection to the agent under test."""

    def __init__(
        self,
        transport: Transport,
        caps: dict[str, Any] | None = None,
        *,
        name: str = "client",
        wire_tap: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.caps = FULL_CAPS if caps is None else caps
        self.conn = Connection(transport, name=name, request_timeout=WAIT, wire_tap=wire_tap)
        self._cond = threading.Condition()
        self.updates: list[dict[str, Any]] = []
        self.calls: list[tuple[str, Any]] = []  # every agent -> client request, in order
        self.files: dict[str, str] = {}
        self.terminals: dict[str, FakeTerminal] = {}
        self.released: Counter[str] = Counter()
        self.killed: Counter[str] = Counter()
        self.cancelled_calls: list[str] = []  # methods whose request the agent abandoned
        self.terminal_exit_code: int | None = 0
        self.terminal_output = "ok\n"
        self.block_terminals = False
        self.permission: Callable[[Any, InboundCall], Any] = _first_option
        self.elicitation: Callable[[Any, InboundCall], Any] = lambda p, call: {"action": "accept", "content": {"name": "Ada"}}
        self._ids = itertools.count(1)
        conn = self.conn
        conn.on_notification("session/update", self._on_update)
        conn.on_request("fs/read_text_file", self._read)
        conn.on_request("fs/write_text_file", self._write)
        conn.on_request("terminal/create", self._create)
        conn.on_request("terminal/wait_for_exit", self._wait_exit)
        conn.on_request("terminal/output", self._output)
        conn.on_request("terminal/kill", self._kill)
        conn.on_request("terminal/release", self._release)
        conn.on_request("session/request_permission", self._permission)
        conn.on_request("elicitation/create", self._elicit)
        conn.on_request("_demo/ping", lambda p, call: self._record("_demo/ping", p) or {"pong": p})
        conn.on_notification("_demo/note", lambda p: self._record("_demo/note", p))
        conn.start()

    # ------------------------------------------------------------ recording

    def _record(self, method: str, params: Any) -> None:
        with self._cond:
            self.calls.append((method, params))
            self._cond.notify_all()

    def _on_update(self, params: Any) -> None:
        with self._cond:
            self.updates.append(params)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        """Block until ``predicate()`` holds (re-checked on every recorded event)."""
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise AssertionError("condition not reached in time")

    def methods(self) -> list[str]:
        with self._cond:
            return [m for m, _ in self.calls]

    def kinds(self, session_id: str | None = None) -> list[str]:
        """The ``sessionUpdate`` tags received (for one session, if given)."""
        with self._cond:
            return [
                u["update"]["sessionUpdate"]
                for u in self.updates
                if session_id is None or u["sessionId"] == session_id
            ]

    def texts(self, session_id: str | None = None) -> list[str]:
        with self._cond:
            return [
                u["update"]["content"]["text"]
                for u in self.updates
                if u["update"]["sessionUpdate"] == "agent_message_chunk"
                and (session_id is None or u["sessionId"] == session_id)
            ]

    # ------------------------------------------------------------ handlers

    def _read(self, params: Any, call: InboundCall) -> Any:
        self._record("fs/read_text_file", params)
        path = params["path"]
        if path not in self.files:
            raise RequestError.resource_not_found(path)
        return {"content": self.files[path]}

    def _write(self, params: Any, call: InboundCall) -> Any:
        self._record("fs/write_text_file", params)
        self.files[params["path"]] = params["content"]
        return None

    def _create(self, params: Any, call: InboundCall) -> Any:
        terminal_id = f"term-{next(self._ids)}"
        self.terminals[terminal_id] = FakeTerminal(
            terminal_id, params, self.terminal_exit_code, self.terminal_output, self.block_terminals
        )
        self._record("terminal/create", params)
        return {"terminalId": terminal_id}

    def _wait_exit(self, params: Any, call: InboundCall) -> Any:
        self._record("terminal/wait_for_exit", params)
        terminal = self.terminals[params["terminalId"]]
        # Ends when the command exits, is killed or released, or the agent abandons the wait.
        exited = terminal.wait(call)
        if call.is_cancelled:  # $/cancel_request arrived (before any kill/release that followed)
            self._record("cancelled:terminal/wait_for_exit", params)
        if not exited:
            raise RequestError(-32800, "cancelled")
        return {"exitCode": terminal.exit_code, "signal": terminal.signal}

    def _output(self, params: Any, call: InboundCall) -> Any:
        self._record("terminal/output", params)
        terminal = self.terminals[params["terminalId"]]
        status = {"exitCode": terminal.exit_code} if terminal.exited.is_set() else None
        result: dict[str, Any] = {"output": terminal.output, "truncated": False}
        if status is not None:
            result["exitStatus"] = status
        return result

    def _kill(self, params: Any, call: InboundCall) -> Any:
        self._record("terminal/kill", params)
        terminal = self.terminals[params["terminalId"]]
        self.killed[terminal.id] += 1
        terminal.exit_code, terminal.signal = None, "SIGKILL"
        terminal.finish()
        return None

    def _release(self, params: Any, call: InboundCall) -> Any:
        terminal = self.terminals[params["terminalId"]]
        with self._cond:
            self.released[terminal.id] += 1
        terminal.finish()
        self._record("terminal/release", params)
        return None

    def _permission(self, params: Any, call: InboundCall) -> Any:
        self._record("session/request_permission", params)
        return self.permission(params, call)

    def _elicit(self, params: Any, call: InboundCall) -> Any:
        self._record("elicitation/create", params)
        return self.elicitation(params, call)

    # ------------------------------------------------------------ driving the agent

    def initialize(self, caps: dict[str, Any] | None = None, version: int = 1) -> Any:
        return self.conn.request(
            "initialize",
            {
                "protocolVersion": version,
                "clientCapabilities": self.caps if caps is None else caps,
                "clientInfo": {"name": "fake", "version": "0"},
            },
        )

    def new_session(self, cwd: str = "/work") -> str:
        result = self.conn.request("session/new", {"cwd": cwd, "mcpServers": []})
        session_id: str = result["sessionId"]
        return session_id

    def prompt(self, session_id: str, text: str, timeout: float = WAIT) -> Any:
        return self.conn.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
            timeout=timeout,
        )

    def prompt_future(self, session_id: str, text: str) -> Any:
        return self.conn.request_future(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        )

    def cancel(self, session_id: str) -> None:
        self.conn.notify("session/cancel", {"sessionId": session_id})

    def close(self) -> None:
        self.conn.close()


def _first_option(params: Any, call: InboundCall) -> Any:
    return {"outcome": {"outcome": "selected", "optionId": params["options"][0]["optionId"]}}


class AbandonLog(list[str]):
    """What :func:`block_until_cancelled` saw, with an event set once it has seen it."""

    def __init__(self) -> None:
        super().__init__()
        self.done = threading.Event()


def block_until_cancelled(log: AbandonLog, asked: threading.Event) -> Callable[[Any, InboundCall], Any]:
    """A permission policy that waits until the agent abandons the request."""

    def policy(params: Any, call: InboundCall) -> Any:
        asked.set()
        if call.cancelled.wait(WAIT):
            log.append("abandoned")
        log.done.set()
        return {"outcome": {"outcome": "cancelled"}}

    return policy
