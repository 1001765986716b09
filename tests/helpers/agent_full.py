"""A complete agent built with the SDK, for the agent tests (in process and as a subprocess).

The first word of the prompt text picks what the turn does:
  stream N | tools | plan | permission | choice A B.. | read PATH | tryread PATH
  write PATH TEXT | run ARGV.. | elicit | wait | fail | crash | exit | interrupt | ext | caps
Extension requests: ``_demo/echo`` answers ``{"echo": params}``; ``_demo/block`` sends the
notification ``_demo/note`` {"blocked": true}, waits until the request is cancelled and answers
``{"cancelled": true}`` (false after 60 s).
Run as a script, it serves stdio (``--grace S`` sets the cancel grace period).
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
from typing import Any

import acp.schema as S
from acp.agent import AgentRequestContext, PromptContext, SyncAgent
from acp.errors import AcpError, RequestError


class DemoAgent:
    """Sessions in memory and a scripted prompt handler."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.sessions: dict[str, str] = {}  # id -> cwd
        self.history: dict[str, list[str]] = {}
        self.lock = threading.Lock()
        self.modes: dict[str, str] = {}
        self.authenticated: list[str] = []
        self.cancels: list[str] = []

    def new_session(self, req: S.NewSessionRequest, ctx: AgentRequestContext) -> S.NewSessionResponse:
        with self.lock:
            session_id = f"sess-{next(self.ids)}"
            self.sessions[session_id] = req.cwd
            self.history[session_id] = []
        return S.NewSessionResponse(session_id=session_id)

    def load_session(self, req: S.LoadSessionRequest, ctx: AgentRequestContext) -> None:
        if req.session_id not in self.sessions:
            raise RequestError.resource_not_found(req.session_id)
        updater = ctx.session(req.session_id)
        for text in self.history[req.session_id]:
            updater.send_user_message(text)
            updater.send_message(f"re: {text}")

    def list_sessions(self, req: S.ListSessionsRequest, ctx: AgentRequestContext) -> S.ListSessionsResponse:
        return S.ListSessionsResponse(
            sessions=[S.SessionInfo(session_id=s, cwd=c) for s, c in sorted(self.sessions.items())]
        )

    def resume_session(self, req: S.ResumeSessionRequest, ctx: AgentRequestContext) -> None:
        if req.session_id not in self.sessions:
            raise RequestError.resource_not_found(req.session_id)

    def close_session(self, req: S.CloseSessionRequest, ctx: AgentRequestContext) -> None:
        self.sessions.pop(req.session_id, None)

    def delete_session(self, req: S.DeleteSessionRequest, ctx: AgentRequestContext) -> S.DeleteSessionResponse:
        self.sessions.pop(req.session_id, None)
        return S.DeleteSessionResponse()

    def set_mode(self, req: S.SetSessionModeRequest, ctx: AgentRequestContext) -> None:
        self.modes[req.session_id] = req.mode_id
        ctx.session(req.session_id).send_update(S.CurrentModeUpdate(current_mode_id=req.mode_id))

    def set_config(
        self, req: S.SetSessionConfigOptionRequest, ctx: AgentRequestContext
    ) -> S.SetSessionConfigOptionResponse:
        return S.SetSessionConfigOptionResponse(config_options=[])

    def authenticate(self, req: S.AuthenticateRequest, ctx: AgentRequestContext) -> None:
        self.authenticated.append(req.method_id)

    def logout(self, req: S.LogoutRequest, ctx: AgentRequestContext) -> None:
        self.authenticated.clear()

    def on_cancel(self, note: S.CancelNotification) -> None:
        self.cancels.append(note.session_id)

    def prompt(self, req: S.PromptRequest, ctx: PromptContext) -> Any:
        text = ctx.prompt_text
        with self.lock:
            self.history.setdefault(req.session_id, []).append(text)
        word, _, rest = text.partition(" ")
        args = rest.split()
        if word == "stream":
            for i in range(int(args[0])):
                ctx.send_message(f"chunk {i}")
            return S.StopReasons.END_TURN
        if word == "tools":
            call_id = ctx.start_tool_call("Reading", kind=S.ToolKinds.READ)
            ctx.update_tool_call(call_id, status=S.ToolCallStatuses.IN_PROGRESS)
            ctx.update_tool_call(call_id, status=S.ToolCallStatuses.COMPLETED, content="done")
            return None
        if word == "plan":
            ctx.send_thought("planning")
            ctx.send_plan([("step one", "high", "pending"), ("step two", "low", "pending")])
            return None
        if word == "permission":
            allowed = ctx.ask_permission("Rewrite main.py", kind=S.ToolKinds.EDIT)
            ctx.send_message("allowed" if allowed else "denied")
            return S.StopReasons.CANCELLED if ctx.is_cancelled else S.StopReasons.END_TURN
        if word == "choice":
            ctx.send_message(f"choice={ctx.ask_choice('Pick one', *args)}")
            return None
        if word == "read":
            ctx.send_message(ctx.read_file(args[0]))
            return None
        if word == "tryread":
            ctx.send_message(repr(ctx.try_read_file(args[0])))
            return None
        if word == "write":
            ctx.write_file(args[0], " ".join(args[1:]))
            return None
        if word == "run":
            result = ctx.execute(*args, cwd="/work")
            ctx.send_message(
                f"exit={result.exit_code} signal={result.signal} success={result.success} out={result.output}"
            )
            return None
        if word == "elicit":
            answer = ctx.elicit(
                "Your name?", {"type": "object", "properties": {"name": {"type": "string"}}}
            )
            ctx.send_message(f"elicit={type(answer).__name__}:{getattr(answer, 'content', None)}")
            return None
        if word == "wait":
            ctx.send_message("waiting")
            ctx.cancelled.wait()
            return None
        if word == "fail":
            raise RequestError(-32002, "nope", {"what": rest})
        if word == "crash":
            raise RuntimeError("boom")
        if word == "exit":
            sys.exit(3)
        if word == "interrupt":
            raise KeyboardInterrupt
        if word == "ext":
            reply = ctx.client.ext_request("_demo/ping", {"n": 1})
            ctx.client.ext_notification("_demo/note", {"n": 2})
            ctx.send_message(f"ext={reply}")
            return None
        if word == "caps":
            caps = ctx.client_capabilities
            ctx.send_message(
                f"read={caps.supports_read_text_file()} terminal={caps.supports_terminal()}"
            )
            return None
        if word == "refused":
            # Every call the client did not advertise is refused locally.
            refused = []
            for attempt in (
                lambda: ctx.read_file("/x"),
                lambda: ctx.write_file("/x", "y"),
                lambda: ctx.execute("ls"),
                lambda: ctx.elicit("q", {"type": "object", "properties": {}}),
            ):
                try:
                    attempt()
                except AcpError as exc:
                    refused.append(type(exc).__name__)
            ctx.send_message(",".join(refused))
            return None
        ctx.send_message(f"echo: {text}")
        return None


def _block(params: Any, ctx: AgentRequestContext) -> Any:
    ctx.client.ext_notification("_demo/note", {"blocked": True})
    return {"cancelled": ctx.cancelled.wait(60)}


def build_agent(
    demo: DemoAgent | None = None, grace: float | None = 60.0, **options: Any
) -> tuple[SyncAgent, DemoAgent]:
    """The demo agent, built with every stable handler registered."""
    demo = demo or DemoAgent()
    builder = (
        SyncAgent.builder()
        .agent_info("demo-agent", "1.0", title="Demo")
        .auth_methods(S.AuthMethodAgent(id="token", name="Token"))
        .authenticate_handler(demo.authenticate)
        .logout_handler(demo.logout)
        .new_session_handler(demo.new_session)
        .load_session_handler(demo.load_session)
        .list_sessions_handler(demo.list_sessions)
        .resume_session_handler(demo.resume_session)
        .close_session_handler(demo.close_session)
        .delete_session_handler(demo.delete_session)
        .set_session_mode_handler(demo.set_mode)
        .set_session_config_option_handler(demo.set_config)
        .prompt_handler(demo.prompt, image=True, embedded_context=True)
        .cancel_handler(demo.on_cancel)
        .ext_request_handler("_demo/echo", lambda params, ctx: {"echo": params})
        .ext_request_handler("_demo/block", _block)
        .mcp_capabilities(http=True)
        .additional_directories(True)
        .cancel_grace_period(grace)
    )
    for name, value in options.items():
        getattr(builder, name)(value)
    return builder.build(), demo


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    grace: float | None = 60.0
    if "--grace" in sys.argv:
        grace = float(sys.argv[sys.argv.index("--grace") + 1])
    agent, _ = build_agent(grace=grace)
    agent.serve_stdio()


if __name__ == "__main__":
    main()
