"""A peer on the official Python SDK (PyPI ``agent-client-protocol``) over its remote transports.

Runs in benchmarks/.venv-official (its import name is also ``acp``), as a subprocess of
tests/test_interop_remote.py. Two modes:

``client --transport ws|http --url URL --config JSON|-`` (``-``: the JSON on stdin), or
``client --transport stdio --config ...`` to spawn the agent ``config["agent"]`` (an argv)
    Drives an agent with the official SDK's client (``acp.ws.create_websocket_stream`` or
    ``acp.http.create_http_stream``) through the steps of ``--config`` and prints one JSON summary
    line on stdout. Every step has its own timeout; a failed step is recorded, never hangs.

``serve``
    Serves an agent written with the official SDK through its ASGI adapter
    (``acp.http.asgi.create_asgi_app``: Streamable HTTP POST/GET/DELETE and WebSocket upgrades, on
    any path) under uvicorn on 127.0.0.1, port chosen by the OS. Prints ``PORT <n>`` once
    listening, then serves until its stdin ends. Every request line and header is logged on stderr
    as ``WIRE {...}`` (JSON) for the tests to inspect.

The agent's prompt script (both the served agent and the one the tests expect from us):
``read PATH`` reads the file through the client and sends its content; ``permission`` asks
permission and sends ``allowed:<optionId>`` or ``cancelled``; ``wait`` sends ``waiting`` and ends
the turn ``cancelled`` once ``session/cancel`` arrives; anything else sends each word upper-cased.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import traceback
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    connect_to_agent,
    text_block,
    update_agent_message_text,
)
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallUpdate,
)

STEP_TIMEOUT = 15.0


# ------------------------------------------------------------------------------------ agent


class PeerAgent:
    """One per connection (the ASGI adapter calls the factory for each)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.cancelled: dict[str, asyncio.Event] = {}
        self.count = 0

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=False),
            agent_info=Implementation(name="official-peer", version="0.12.1"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self.count += 1
        session_id = f"official-{self.count}"
        self.cancelled[session_id] = asyncio.Event()
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        text = " ".join(getattr(block, "text", "") for block in prompt)
        words = text.split()
        say = self.conn.session_update
        if words[:1] == ["read"] and len(words) == 2:
            answer = await self.conn.read_text_file(session_id=session_id, path=words[1])
            await say(session_id, update_agent_message_text(answer.content))
        elif words == ["permission"]:
            options = [
                PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                PermissionOption(option_id="no", name="Reject", kind="reject_once"),
            ]
            tool_call = ToolCallUpdate(tool_call_id="call-1", title="touch a file", status="pending")
            decision = await self.conn.request_permission(session_id=session_id, tool_call=tool_call, options=options)
            outcome = decision.outcome
            said = f"allowed:{outcome.option_id}" if outcome.outcome == "selected" else "cancelled"
            await say(session_id, update_agent_message_text(said))
        elif words == ["wait"]:
            event = self.cancelled.setdefault(session_id, asyncio.Event())
            event.clear()
            await say(session_id, update_agent_message_text("waiting"))
            await event.wait()
            return PromptResponse(stop_reason="cancelled")
        else:
            for word in words:
                await say(session_id, update_agent_message_text(word.upper()))
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()


async def serve() -> None:
    import uvicorn
    from acp.http.asgi import create_asgi_app

    inner = create_asgi_app(lambda conn: PeerAgent(conn))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            record = {
                "type": scope["type"],
                "method": scope.get("method", "GET"),
                "path": scope.get("path"),
                "http_version": scope.get("http_version"),
                "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            }
            print("WIRE " + json.dumps(record), file=sys.stderr, flush=True)
        await inner(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", ws="websockets-sansio", lifespan="off")
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            return
        await asyncio.sleep(0.01)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the test closes our stdin
    server.should_exit = True
    await asyncio.wait_for(task, 10)


# ----------------------------------------------------------------------------------- client


class PeerClient:
    def __init__(self, files: dict[str, str], permission: str | None) -> None:
        self.files = files
        self.permission = permission
        self.updates: list[dict[str, Any]] = []
        self.reads: list[str] = []
        self.permission_requests: list[dict[str, Any]] = []
        self.on_update: Any = None

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        wire = update.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.updates.append({"sessionId": session_id, **wire})
        if self.on_update is not None:
            self.on_update(session_id, wire)

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        self.reads.append(path)
        return ReadTextFileResponse(content=self.files[path])

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permission_requests.append({"sessionId": session_id, "options": [o.option_id for o in options]})
        if self.permission is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.permission))


def _texts(updates: list[dict[str, Any]], session_id: str, start: int) -> list[str]:
    return [
        u["content"]["text"]
        for u in updates[start:]
        if u.get("sessionUpdate") == "agent_message_chunk"
        and u.get("sessionId") == session_id
        and u.get("content", {}).get("type") == "text"
    ]


async def run_stdio_client(config: dict[str, Any]) -> dict[str, Any]:
    """The same client over stdio: it spawns ``config["agent"]`` (an argv) with the SDK's
    ``spawn_stdio_transport``."""
    from acp.transports import spawn_stdio_transport

    client = PeerClient(config.get("files", {}), config.get("permission"))
    async with spawn_stdio_transport(*config["agent"], shutdown_timeout=STEP_TIMEOUT) as (reader, writer, process):
        summary = await run_client("stdio", "", config, (client, connect_to_agent(client, writer, reader)))
    # Leaving the block closed the agent's stdin and waited for it (killing it only if it lingered).
    summary["agent_exit"] = process.returncode
    return summary


async def run_client(
    transport_kind: str, url: str, config: dict[str, Any], made: tuple[PeerClient, Any] | None = None
) -> dict[str, Any]:
    summary: dict[str, Any] = {"steps": []}
    if made is not None:
        client, conn = made
    else:
        client = PeerClient(config.get("files", {}), config.get("permission"))
        if transport_kind == "ws":
            from acp.ws import create_websocket_stream

            transport = await asyncio.wait_for(create_websocket_stream(url), STEP_TIMEOUT)
        else:
            from acp.http import create_http_stream

            transport = create_http_stream(url)
        conn = connect_to_agent(client, transport)
    session_id: str | None = None
    step_timeout = float(config.get("step_timeout", STEP_TIMEOUT))

    async def step(name: str, coro: Any) -> Any:
        record: dict[str, Any] = {"step": name}
        summary["steps"].append(record)
        try:
            result = await asyncio.wait_for(coro, step_timeout)
        except BaseException as exc:  # noqa: BLE001 - recorded for the test to assert on
            record["error"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = traceback.format_exc(limit=8)
            return None
        record["ok"] = True
        return result

    try:
        init = await step(
            "initialize",
            conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True)),
                client_info=Implementation(name="official-client", version="0.12.1"),
            ),
        )
        if init is None:
            return summary
        summary["agent_name"] = init.agent_info.name if init.agent_info else None
        summary["protocol_version"] = init.protocol_version
        new = await step("new_session", conn.new_session(cwd=config.get("cwd", "/"), mcp_servers=[]))
        if new is None:
            return summary
        session_id = new.session_id
        summary["session_id"] = session_id
        prompts: list[dict[str, Any]] = []
        summary["prompts"] = prompts
        for text in config.get("prompts", []):
            start = len(client.updates)
            record: dict[str, Any] = {"text": text}
            prompts.append(record)
            if text == "wait":
                waiting = asyncio.Event()
                client.on_update = lambda sid, wire, event=waiting: event.set() if _is_text(wire, "waiting") else None
                turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block(text)]))
                if await step("wait_for_waiting", waiting.wait()) is None and not waiting.is_set():
                    turn.cancel()
                    record["error"] = "no 'waiting' update"
                    continue
                await step("cancel", conn.cancel(session_id=session_id))
                response = await step("prompt wait", turn)
                client.on_update = None
            else:
                response = await step(f"prompt {text}", conn.prompt(session_id=session_id, prompt=[text_block(text)]))
            record["stop_reason"] = response.stop_reason if response is not None else None
            record["texts"] = _texts(client.updates, session_id, start)
        expected = int(config.get("expect_texts", 0))
        if expected:
            # An update may be handed to us after its prompt's answer (over HTTP they travel on
            # different streams): wait for it, bounded, before the summary is taken.
            arrived = asyncio.Event()

            def count(sid: str, wire: dict[str, Any]) -> None:
                if len(_texts(client.updates, session_id or "", 0)) >= expected:
                    arrived.set()

            client.on_update = count
            count(session_id, {})
            await step("expected texts", arrived.wait())
            client.on_update = None
        summary["reads"] = client.reads
        summary["permission_requests"] = client.permission_requests
    finally:
        closing: dict[str, Any] = {"step": "close"}
        summary["steps"].append(closing)
        try:
            await asyncio.wait_for(conn.close(), STEP_TIMEOUT)
            closing["ok"] = True
        except BaseException as exc:  # noqa: BLE001
            closing["error"] = f"{type(exc).__name__}: {exc}"
        # Everything that arrived by the end, whether or not before its prompt's answer.
        summary["all_texts"] = _texts(client.updates, session_id, 0) if session_id else []
    return summary


def _is_text(wire: dict[str, Any], text: str) -> bool:
    return wire.get("sessionUpdate") == "agent_message_chunk" and wire.get("content", {}).get("text") == text


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    client = sub.add_parser("client")
    client.add_argument("--transport", choices=["ws", "http", "stdio"], required=True)
    client.add_argument("--url", default="", help="ws/http only (stdio: config's \"agent\" argv)")
    client.add_argument("--config", default="{}", help="JSON, or - to read it from stdin")
    sub.add_parser("serve")
    args = parser.parse_args()
    if args.mode == "serve":
        asyncio.run(serve())
        return
    try:
        config = json.loads(sys.stdin.read() if args.config == "-" else args.config)
        if args.transport == "stdio":
            summary = asyncio.run(run_stdio_client(config))
        else:
            summary = asyncio.run(run_client(args.transport, args.url, config))
    except BaseException as exc:  # noqa: BLE001 - the summary is the test's only window
        summary = {"fatal": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
