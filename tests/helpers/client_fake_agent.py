"""A fake ACP agent on the raw acp.connection.Connection, for the SyncClient tests.

It speaks plain JSON (dicts), independently of the client's typed schema, answers every
client -> agent method, and records what it received. In-process: ``FakeAgent(conn, opts)``
over ``memory_pair()``. As a process: ``client_fake_agent.py '<options as JSON>'`` over stdio.

Options (all optional): ``protocol_version`` (1), ``advertise`` (list of: load, list, resume,
close, delete, logout, dirs, fork, providers, image; default all), ``sessions`` (5),
``page_size`` (2).

The first text block of a prompt is a script:
  stream N            N agent_message_chunk updates "0".."N-1", then end_turn
  read PATH           fs/read_text_file; the content comes back as a chunk
  write PATH TEXT     fs/write_text_file
  terminal CMD ARG..  terminal/create, wait_for_exit, output, release; "exit=<code> out=<output>"
  permission          a tool_call update, then session/request_permission; "outcome=<...>";
                      stop reason "cancelled" when the outcome was cancelled
  late-permission     the same, but only once session/cancel arrived
  elicit              elicitation/create (form); "elicit=<action> <content>"
  hold                "holding", then waits for session/cancel; stop reason "cancelled"
  ext                 calls _client/hello (request) and _client/ping (notification)
  crash               exits the process at once, mid-prompt (process mode only)
  anything else       one chunk "echo: <text>"; every block is recorded
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from acp.connection import Connection, InboundCall
from acp.errors import RequestError

ALL_CAPS = ["load", "list", "resume", "close", "delete", "logout", "dirs", "fork", "providers", "image"]


def chunk(session_id: str, text: str) -> dict[str, Any]:
    return {
        "sessionId": session_id,
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
    }


class FakeAgent:
    """Registers the fake agent's handlers on ``conn`` (call before ``conn.start()``)."""

    def __init__(self, conn: Connection, options: dict[str, Any] | None = None) -> None:
        opts = options or {}
        self.conn = conn
        self.protocol_version = opts.get("protocol_version", 1)
        self.advertise = set(opts.get("advertise", ALL_CAPS))
        self.total_sessions = opts.get("sessions", 5)
        self.page_size = opts.get("page_size", 2)
        self.received: list[tuple[str, Any]] = []  # (method, params) of everything handled
        self.cancelled: dict[str, threading.Event] = {}
        self.holding = threading.Event()
        self.notes: list[Any] = []
        self._lock = threading.Lock()
        self._next_session = 0
        for method in (
            "initialize", "authenticate", "logout", "session/new", "session/load", "session/list",
            "session/resume", "session/close", "session/delete", "session/set_mode",
            "session/set_config_option", "session/prompt", "session/fork", "providers/list",
            "providers/set", "providers/disable", "_agent/echo", "_agent/notes",
        ):
            conn.on_request(method, self._dispatch)
        conn.on_notification("session/cancel", self._on_cancel, immediate=True)
        for method in ("_agent/note",):
            conn.on_notification(method, lambda p, m=method: self._record(m, p))

    # -- plumbing --------------------------------------------------------------------------

    def _record(self, method: str, params: Any) -> None:
        with self._lock:
            self.received.append((method, params))
            if method == "_agent/note":
                self.notes.append(params)

    def methods(self) -> list[str]:
        with self._lock:
            return [m for m, _ in self.received]

    def params_of(self, method: str) -> list[Any]:
        with self._lock:
            return [p for m, p in self.received if m == method]

    def _cancel_event(self, session_id: str) -> threading.Event:
        with self._lock:
            return self.cancelled.setdefault(session_id, threading.Event())

    def _on_cancel(self, params: Any) -> None:
        self._record("session/cancel", params)
        self._cancel_event(params["sessionId"]).set()

    def _dispatch(self, params: Any, call: InboundCall) -> Any:
        self._record(call.method, params)
        name = "m_" + call.method.lstrip("_").replace("/", "_")
        return getattr(self, name)(params or {}, call)

    # -- methods ---------------------------------------------------------------------------

    def m_initialize(self, p: dict[str, Any], call: InboundCall) -> Any:
        adv = self.advertise
        session: dict[str, Any] = {}
        for cap, key in (("list", "list"), ("resume", "resume"), ("close", "close"), ("delete", "delete"),
                         ("dirs", "additionalDirectories"), ("fork", "fork")):
            if cap in adv:
                session[key] = {}
        caps: dict[str, Any] = {
            "loadSession": "load" in adv,
            "promptCapabilities": {"image": "image" in adv},
            "sessionCapabilities": session,
            "auth": {"logout": {}} if "logout" in adv else {},
        }
        if "providers" in adv:
            caps["providers"] = {}
        return {
            "protocolVersion": self.protocol_version,
            "agentCapabilities": caps,
            "authMethods": [{"id": "token", "name": "Token"}],
            "agentInfo": {"name": "fake-agent", "version": "0.1"},
            "_meta": {"cwd": os.getcwd(), "mark": os.environ.get("ACP_FAKE_MARK"),
                      "inherited": "PATH" in os.environ},
        }

    def m_authenticate(self, p: dict[str, Any], call: InboundCall) -> Any:
        if p["methodId"] != "token":
            raise RequestError(-32602, "unknown auth method")
        return {}

    def m_logout(self, p: dict[str, Any], call: InboundCall) -> Any:
        return {}

    def m_session_new(self, p: dict[str, Any], call: InboundCall) -> Any:
        with self._lock:
            self._next_session += 1
            session_id = f"sess-{self._next_session}"
        return {
            "sessionId": session_id,
            "modes": {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]},
        }

    def m_session_load(self, p: dict[str, Any], call: InboundCall) -> Any:
        sid = p["sessionId"]
        self.conn.notify("session/update", {"sessionId": sid, "update": {
            "sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "earlier question"}}})
        self.conn.notify("session/update", chunk(sid, "earlier answer"))
        return {"modes": {"currentModeId": "code", "availableModes": [{"id": "code", "name": "Code"}]}}

    def m_session_list(self, p: dict[str, Any], call: InboundCall) -> Any:
        start = int(p.get("cursor") or 0)
        end = min(start + self.page_size, self.total_sessions)
        sessions = [
            {"sessionId": f"old-{k}", "cwd": p.get("cwd") or "/work", "title": f"Session {k}"}
            for k in range(start, end)
        ]
        answer: dict[str, Any] = {"sessions": sessions}
        if end < self.total_sessions:
            answer["nextCursor"] = str(end)
        return answer

    def m_session_resume(self, p: dict[str, Any], call: InboundCall) -> Any:
        return {"modes": {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}]}}

    def m_session_close(self, p: dict[str, Any], call: InboundCall) -> Any:
        return {}

    def m_session_delete(self, p: dict[str, Any], call: InboundCall) -> Any:
        return {}

    def m_session_set_mode(self, p: dict[str, Any], call: InboundCall) -> Any:
        self.conn.notify("session/update", {"sessionId": p["sessionId"], "update": {
            "sessionUpdate": "current_mode_update", "currentModeId": p["modeId"]}})
        return {}

    def m_session_set_config_option(self, p: dict[str, Any], call: InboundCall) -> Any:
        value = p["value"]
        if isinstance(value, bool):
            option = {"type": "boolean", "id": p["configId"], "name": "Flag", "currentValue": value}
        else:
            option = {"type": "select", "id": p["configId"], "name": "Model", "currentValue": value,
                      "options": [{"value": value, "name": value.title()}]}
        return {"configOptions": [option]}

    def m_session_fork(self, p: dict[str, Any], call: InboundCall) -> Any:
        return {"sessionId": "fork-of-" + p["sessionId"]}

    def m_providers_list(self, p: dict[str, Any], call: InboundCall) -> Any:
        return {"providers": []}

    def m_providers_set(self, p: dict[str, Any], call: InboundCall) -> Any:
        return {}

    def m_providers_disable(self, p: dict[str, Any], call: InboundCall) -> Any:
        return {}

    def m_agent_echo(self, p: Any, call: InboundCall) -> Any:
        return {"echo": p}

    def m_agent_notes(self, p: Any, call: InboundCall) -> Any:
        with self._lock:
            return {"notes": list(self.notes)}

    # -- the prompt scripts ----------------------------------------------------------------

    def m_session_prompt(self, p: dict[str, Any], call: InboundCall) -> Any:
        sid = p["sessionId"]
        blocks = p["prompt"]
        text = blocks[0].get("text", "") if blocks else ""
        word, _, rest = text.partition(" ")
        notify = self.conn.notify
        request = self.conn.request
        stop = "end_turn"
        if word == "stream":
            for k in range(int(rest)):
                notify("session/update", chunk(sid, str(k)))
        elif word == "read":
            content = request("fs/read_text_file", {"sessionId": sid, "path": rest})["content"]
            notify("session/update", chunk(sid, "read=" + content))
        elif word == "write":
            path, _, body = rest.partition(" ")
            request("fs/write_text_file", {"sessionId": sid, "path": path, "content": body})
            notify("session/update", chunk(sid, "wrote"))
        elif word == "terminal":
            cmd, *args = rest.split(" ")
            tid = request("terminal/create", {"sessionId": sid, "command": cmd, "args": args})["terminalId"]
            exit_status = request("terminal/wait_for_exit", {"sessionId": sid, "terminalId": tid})
            output = request("terminal/output", {"sessionId": sid, "terminalId": tid})["output"]
            request("terminal/release", {"sessionId": sid, "terminalId": tid})
            notify("session/update", chunk(sid, f"exit={exit_status.get('exitCode')} out={output}"))
        elif word == "permission" or word == "late-permission":
            if word == "late-permission":  # asks only after it saw session/cancel (a race)
                self.holding.set()
                self._cancel_event(sid).wait(30)
            notify("session/update", {"sessionId": sid, "update": {
                "sessionUpdate": "tool_call", "toolCallId": "call-1", "title": "Edit main.py",
                "kind": "edit", "status": "pending"}})
            answer = request("session/request_permission", {
                "sessionId": sid,
                "toolCall": {"toolCallId": "call-1"},
                "options": [
                    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                ],
            }, timeout=30)
            outcome = answer["outcome"]
            if outcome["outcome"] == "cancelled":
                notify("session/update", chunk(sid, "outcome=cancelled"))
                stop = "cancelled"
            else:
                notify("session/update", chunk(sid, "outcome=selected:" + outcome["optionId"]))
        elif word == "elicit":
            answer = request("elicitation/create", {
                "mode": "form", "sessionId": sid, "message": "Your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
            })
            notify("session/update", chunk(sid, f"elicit={answer['action']} {json.dumps(answer.get('content'))}"))
        elif word == "hold":
            notify("session/update", chunk(sid, "holding"))
            event = self._cancel_event(sid)
            call.on_cancel(event.set)  # a $/cancel_request (prompt timeout) ends the hold too
            self.holding.set()
            if event.wait(30):
                stop = "cancelled"
        elif word == "ext":
            answer = request("_client/hello", {"x": 1})
            notify("_client/ping", {"n": 2})
            notify("session/update", chunk(sid, "ext=" + json.dumps(answer, sort_keys=True)))
        elif word == "crash":
            notify("session/update", chunk(sid, "about to crash"))
            self.conn._flush()  # the update reaches the client before we die
            os._exit(3)
        else:
            notify("session/update", chunk(sid, "echo: " + text))
        return {"stopReason": stop}


def main() -> None:
    from acp.transport import StdioTransport

    options = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    conn = Connection(StdioTransport(), name="fake-agent", request_timeout=30)
    FakeAgent(conn, options)
    conn.start()
    conn.wait_closed()
    conn.close(graceful=True)


if __name__ == "__main__":
    main()
