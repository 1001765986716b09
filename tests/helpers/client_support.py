"""Shared pieces of the SyncClient tests: an in-process fake agent pair and simple handlers."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from acp import schema
from acp.client import ClientRequestContext, SyncClient, SyncClientBuilder
from acp.connection import Connection
from acp.transport import memory_pair

from .client_fake_agent import FakeAgent

WAIT = 15.0


class AgentSide:
    """The fake agent's end of a memory pair, with every line it received."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.client_end, agent_end = memory_pair()
        self.lines_in: list[bytes] = []
        self._lock = threading.Lock()
        self.conn = Connection(agent_end, name="fake-agent", request_timeout=WAIT, wire_tap=self._tap)
        self.agent = FakeAgent(self.conn, options)
        self.conn.start()

    def _tap(self, direction: str, line: bytes) -> None:
        if direction == "in":
            with self._lock:
                self.lines_in.append(line)

    def received_lines(self) -> list[bytes]:
        with self._lock:
            return list(self.lines_in)

    def close(self) -> None:
        self.conn.close()


def make_client(
    configure: Callable[[SyncClientBuilder], Any] | None = None, **options: Any
) -> tuple[SyncClient, AgentSide]:
    """A client (configured by ``configure``) wired to a fresh in-process fake agent."""
    side = AgentSide(options)
    builder = SyncClient.builder().transport(side.client_end).request_timeout(WAIT)
    if configure is not None:
        configure(builder)
    return builder.build(), side


def texts(updates: list[schema.SessionNotification]) -> list[str]:
    """The text of every agent_message_chunk, in order."""
    out = []
    for n in updates:
        u = n.update
        if isinstance(u, schema.AgentMessageChunk) and isinstance(u.content, schema.TextContent):
            out.append(u.content.text)
    return out


class FakeTerminals:
    """The five terminal handlers; a command runs to completion at create (enough for tests)."""

    def __init__(self) -> None:
        self.results: dict[str, subprocess.CompletedProcess[str]] = {}
        self.released: list[str] = []
        self.sessions: list[str | None] = []

    def create_terminal(self, request: schema.CreateTerminalRequest, ctx: ClientRequestContext) -> schema.CreateTerminalResponse:
        self.sessions.append(ctx.session_id)
        tid = f"term-{len(self.results) + 1}"
        self.results[tid] = subprocess.run(
            [request.command, *(request.args or [])], capture_output=True, text=True, timeout=WAIT
        )
        return schema.CreateTerminalResponse(terminal_id=tid)

    def terminal_output(self, request: schema.TerminalOutputRequest, ctx: ClientRequestContext) -> schema.TerminalOutputResponse:
        done = self.results[request.terminal_id]
        return schema.TerminalOutputResponse(
            output=done.stdout, truncated=False, exit_status=schema.TerminalExitStatus(exit_code=done.returncode)
        )

    def wait_for_terminal_exit(
        self, request: schema.WaitForTerminalExitRequest, ctx: ClientRequestContext
    ) -> schema.WaitForTerminalExitResponse:
        return schema.WaitForTerminalExitResponse(exit_code=self.results[request.terminal_id].returncode)

    def kill_terminal(self, request: schema.KillTerminalRequest, ctx: ClientRequestContext) -> None:
        return None

    def release_terminal(self, request: schema.ReleaseTerminalRequest, ctx: ClientRequestContext) -> None:
        self.released.append(request.terminal_id)


class JsonWire:
    """A wire tap (``.wire_tap(...)``) keeping every line, both ways, as parsed JSON."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, direction: str, line: bytes) -> None:
        with self._lock:
            self.lines.append((direction, json.loads(line)))

    def methods(self, direction: str) -> list[str]:
        """The method of every line sent (``"out"``) or received (``"in"``); "" for answers."""
        with self._lock:
            return [m.get("method", "") for d, m in self.lines if d == direction]

    def first(self, direction: str, method: str) -> dict[str, Any]:
        """The first message of ``method`` in ``direction``."""
        with self._lock:
            return next(m for d, m in self.lines if d == direction and m.get("method") == method)

    def result_of(self, method: str) -> Any:
        """The answer to the first ``method`` request sent."""
        with self._lock:
            request = next(m for d, m in self.lines if d == "out" and m.get("method") == method)
            return next(m for d, m in self.lines if d == "in" and m.get("id") == request["id"] and "method" not in m)

    def updates(self) -> list[dict[str, Any]]:
        """Every ``session/update``'s ``update`` received, in order."""
        with self._lock:
            return [m["params"]["update"] for d, m in self.lines if d == "in" and m.get("method") == "session/update"]
