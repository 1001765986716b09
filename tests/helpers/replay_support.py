"""A client script run by SyncClient and AsyncClient against real agents (recorded through
``acp tap``) and against replays, and what it observed, for tests/test_replay.py.

The script: ``stream 3``, ``permission`` (allowed), ``write <cwd>/notes.txt hello there``,
``read <cwd>/notes.txt``, ``terminal echo hi``, and ``wait_for_cancel`` cancelled once the
agent said it waits. Both the scenario agent and the TypeScript SDK's interop agent
(tests/interop/agent.mjs) understand these prompts.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import msgspec

import acp
from acp import schema
from acp.testing import SessionRecorder

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = [sys.executable, "-m", "acp.examples.scenario_agent"]
CHANGED = [sys.executable, str(ROOT / "tests" / "helpers" / "changed_scenario_agent.py")]
TAP = [sys.executable, "-m", "acp", "tap"]
WAIT = 30.0


def prompts(cwd: str) -> list[str]:
    """The script's prompts (the last one is cancelled)."""
    notes = os.path.join(cwd, "notes.txt")
    return ["stream 3", "permission", f"write {notes} hello there", f"read {notes}", "terminal echo hi",
            "wait_for_cancel"]


@dataclass
class Observed:
    """What a client saw, with the session folder written ``<cwd>``."""

    stop_reasons: list[str] = field(default_factory=list)
    updates: list[Any] = field(default_factory=list)  # wire JSON of each session/update's update
    requests: list[Any] = field(default_factory=list)  # (method, params) of permission / fs / terminal/create

    def normalised(self, cwd: str) -> Observed:
        text = json.dumps([self.stop_reasons, self.updates, self.requests]).replace(cwd, "<cwd>")
        stops, updates, requests = json.loads(text)
        return Observed(stops, updates, requests)


class _Handlers:
    """Real client handlers (files and terminals in ``cwd``) that note what the agent asked."""

    def __init__(self, cwd: str, permission: str = "allow_once") -> None:
        self.observed = Observed()
        self.recorder = SessionRecorder()
        self.files = acp.LocalFiles([cwd])
        self.terminals = acp.LocalTerminals()
        self._permission = permission
        self._lock = threading.Lock()

    def _note(self, method: str, request: Any) -> None:
        with self._lock:
            self.observed.requests.append([method, json.loads(msgspec.json.encode(request))])

    def permission(self, request: schema.RequestPermissionRequest, ctx: Any) -> schema.RequestPermissionResponse:
        self._note("session/request_permission", request)
        option = next(o for o in request.options if o.kind == self._permission)
        return schema.RequestPermissionResponse(outcome=schema.SelectedPermissionOutcome(option_id=option.option_id))

    def read(self, request: schema.ReadTextFileRequest, ctx: Any) -> schema.ReadTextFileResponse:
        self._note("fs/read_text_file", request)
        return self.files.read_text_file(request, ctx)

    def write(self, request: schema.WriteTextFileRequest, ctx: Any) -> schema.WriteTextFileResponse:
        self._note("fs/write_text_file", request)
        return self.files.write_text_file(request, ctx)

    def create_terminal(self, request: schema.CreateTerminalRequest, ctx: Any) -> schema.CreateTerminalResponse:
        self._note("terminal/create", request)
        return self.terminals.create_terminal(request, ctx)

    def register(self, builder: Any) -> Any:
        return (
            builder.session_update_handler(self.recorder)
            .request_permission_handler(self.permission)
            .read_text_file_handler(self.read)
            .write_text_file_handler(self.write)
            .create_terminal_handler(self.create_terminal)
            .terminal_output_handler(self.terminals.terminal_output)
            .wait_for_terminal_exit_handler(self.terminals.wait_for_terminal_exit)
            .kill_terminal_handler(self.terminals.kill_terminal)
            .release_terminal_handler(self.terminals.release_terminal)
        )

    def finish(self) -> Observed:
        self.terminals.close()
        self.observed.updates = [json.loads(msgspec.json.encode(u)) for u in self.recorder.updates()]
        return self.observed


def run_sync(connect: Callable[[Any], Any], cwd: str, *, steps: list[str] | None = None,
             permission: str = "allow_once") -> Observed:
    """Run the script with a SyncClient; ``connect(builder)`` gives it its transport."""
    handlers = _Handlers(cwd, permission)
    builder = handlers.register(connect(acp.SyncClient.builder()))
    script = steps if steps is not None else prompts(cwd)
    try:
        with builder.build() as client:
            client.initialize()
            session = client.new_session(cwd=cwd).session_id
            for text in script:
                if text == "wait_for_cancel":
                    stop = _cancelled_turn(client, session, text, handlers.recorder)
                else:
                    stop = client.prompt(session, text).stop_reason
                handlers.observed.stop_reasons.append(stop)
    finally:
        observed = handlers.finish()
    return observed


def _cancelled_turn(client: Any, session: str, text: str, recorder: SessionRecorder) -> str:
    """A prompt that waits, cancelled once the agent said it waits; its stop reason."""
    before = len(recorder.messages_text())
    result: dict[str, Any] = {}

    def turn() -> None:
        try:
            result["stop"] = client.prompt(session, text).stop_reason
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            result["error"] = exc

    thread = threading.Thread(target=turn)
    thread.start()
    assert recorder.wait_for(lambda r: "waiting" in r.messages_text()[before:] or "error" in result, WAIT)
    client.cancel(session)
    thread.join(WAIT)
    if "error" in result:
        raise result["error"]
    return str(result["stop"])


async def run_async(transport: Callable[[Any], Any], cwd: str) -> Observed:
    """The same script with an AsyncClient; ``await transport(builder)`` gives it its transport."""
    handlers = _Handlers(cwd)
    builder = handlers.register(await transport(acp.AsyncClient.builder()))
    try:
        async with builder.build() as client:
            await client.initialize()
            session = (await client.new_session(cwd=cwd)).session_id
            for text in prompts(cwd):
                if text != "wait_for_cancel":
                    handlers.observed.stop_reasons.append((await client.prompt(session, text)).stop_reason)
                    continue
                turn = asyncio.ensure_future(client.prompt(session, text))
                assert await asyncio.to_thread(_waits, handlers.recorder, len(handlers.recorder.messages_text()))
                await client.cancel(session)
                handlers.observed.stop_reasons.append((await asyncio.wait_for(turn, WAIT)).stop_reason)
    finally:
        observed = handlers.finish()
    return observed


def _waits(recorder: SessionRecorder, before: int) -> bool:
    return recorder.wait_for(lambda r: "waiting" in r.messages_text()[before:], WAIT)


def record(agent: list[str], out: Path, cwd: str, **options: Any) -> Observed:
    """Run the script with a SyncClient against ``agent`` through ``acp tap --out out``."""
    tap = [*TAP, "--out", str(out), "--", *agent]
    return run_sync(lambda b: b.agent_process(*tap, cwd=str(ROOT)), cwd, **options)
