"""An SDK agent that advertises every capability ``acp check`` can exercise, for its tests.

Sessions live in memory. It advertises and implements ``session/load`` (replays the history),
``session/list`` (pages of two, with ``nextCursor``), ``session/resume``, ``session/close``
(which cancels a running turn: done by hand here, so it does not depend on what the SDK does on
close), ``session/delete`` (an unknown id succeeds silently), modes, config options (one select),
image/audio/embedded-context prompts, additional directories, ``authenticate`` (method
``token``) and ``logout``. The prompt ``wait`` holds the turn until it is cancelled or closed.

Each flag breaks one thing, for the checker to catch:

``--dup-ids``           the second ``session/new`` answers the first session's id again
``--list-loops``        a page asked for with a cursor is the first page again, same nextCursor
``--load-no-replay``    ``session/load`` answers without replaying anything
``--resume-replays``    ``session/resume`` replays the history (it must not)
``--require-auth``      ``session/new`` fails with -32000 until ``authenticate`` succeeded
``--skip-shoulds``      breaks two SHOULDs: deleting an unknown session is an error, and an
                        invalid list cursor is read as the first page
"""

from __future__ import annotations

import itertools
import sys
import threading
from dataclasses import dataclass, field

import acp
from acp import schema
from acp.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RequestError

FLAGS = set(sys.argv[1:])
PAGE = 2
MODES = [schema.SessionMode(id="ask", name="Ask"), schema.SessionMode(id="code", name="Code")]
MODELS = [schema.SessionConfigSelectOption(value="small", name="Small"),
          schema.SessionConfigSelectOption(value="large", name="Large")]


@dataclass
class Session:
    session_id: str
    cwd: str
    model: str = "small"
    history: list[tuple[str, str]] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)


class CheckAgent:
    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.sessions: dict[str, Session] = {}
        self.authenticated = False
        self.handed_out: list[str] = []

    def get(self, session_id: str) -> Session:
        with self.lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise RequestError(RESOURCE_NOT_FOUND, f"Unknown session {session_id!r}", {"sessionId": session_id})
        return session

    def options(self, session: Session) -> list[schema.SessionConfigOption]:
        return [schema.SessionConfigOptionSelect(id="model", name="Model", current_value=session.model, options=MODELS)]

    def new_session(self, request: schema.NewSessionRequest, ctx: acp.AgentRequestContext) -> schema.NewSessionResponse:
        if "--require-auth" in FLAGS and not self.authenticated:
            raise RequestError(-32000, "Authentication required")
        with self.lock:
            if "--dup-ids" in FLAGS and len(self.handed_out) == 1:
                session_id = self.handed_out[0]
            else:
                session_id = f"check-{next(self.ids)}"
                self.sessions[session_id] = Session(session_id, request.cwd)
            self.handed_out.append(session_id)
            session = self.sessions[session_id]
        return schema.NewSessionResponse(
            session_id=session_id,
            modes=schema.SessionModeState(current_mode_id="ask", available_modes=MODES),
            config_options=self.options(session),
        )

    def replay(self, session: Session, ctx: acp.AgentRequestContext) -> None:
        updater = ctx.session(session.session_id)
        for role, text in session.history:
            if role == "user":
                updater.send_user_message(text)
            else:
                updater.send_message(text)

    def load_session(self, request: schema.LoadSessionRequest, ctx: acp.AgentRequestContext) -> None:
        session = self.get(request.session_id)
        if "--load-no-replay" not in FLAGS:
            self.replay(session, ctx)

    def resume_session(self, request: schema.ResumeSessionRequest, ctx: acp.AgentRequestContext) -> None:
        session = self.get(request.session_id)
        if "--resume-replays" in FLAGS:
            self.replay(session, ctx)

    def list_sessions(self, request: schema.ListSessionsRequest, ctx: acp.AgentRequestContext) -> schema.ListSessionsResponse:
        with self.lock:
            found = [s for s in self.sessions.values() if request.cwd in (None, s.cwd)]
        start = 0
        if request.cursor is not None:
            if not request.cursor.startswith("page-") and "--skip-shoulds" not in FLAGS:
                raise RequestError(INVALID_PARAMS, f"Invalid cursor {request.cursor!r}")
            start = 0 if "--list-loops" in FLAGS or not request.cursor.startswith("page-") else int(request.cursor[5:])
        page = found[start:start + PAGE]
        more = start + PAGE < len(found)
        return schema.ListSessionsResponse(
            sessions=[schema.SessionInfo(session_id=s.session_id, cwd=s.cwd) for s in page],
            next_cursor=f"page-{start + PAGE}" if more else None,
        )

    def close_session(self, request: schema.CloseSessionRequest, ctx: acp.AgentRequestContext) -> None:
        self.get(request.session_id).closing.set()  # a running turn ends 'cancelled'

    def delete_session(self, request: schema.DeleteSessionRequest, ctx: acp.AgentRequestContext) -> None:
        with self.lock:
            found = self.sessions.pop(request.session_id, None)  # unknown: succeed silently
        if found is None and "--skip-shoulds" in FLAGS:
            raise RequestError(RESOURCE_NOT_FOUND, f"Unknown session {request.session_id!r}")

    def set_mode(self, request: schema.SetSessionModeRequest, ctx: acp.AgentRequestContext) -> None:
        self.get(request.session_id)
        if request.mode_id not in {m.id for m in MODES}:
            raise RequestError(INVALID_PARAMS, f"Unknown mode {request.mode_id!r}")

    def set_config(
        self, request: schema.SetSessionConfigOptionRequest, ctx: acp.AgentRequestContext
    ) -> schema.SetSessionConfigOptionResponse:
        session = self.get(request.session_id)
        if request.config_id != "model" or request.value not in {m.value for m in MODELS}:
            raise RequestError(INVALID_PARAMS, f"Invalid value {request.value!r} for {request.config_id!r}")
        session.model = str(request.value)
        return schema.SetSessionConfigOptionResponse(config_options=self.options(session))

    def authenticate(self, request: schema.AuthenticateRequest, ctx: acp.AgentRequestContext) -> None:
        if request.method_id != "token":
            raise RequestError(INVALID_PARAMS, f"Unknown auth method {request.method_id!r}")
        self.authenticated = True

    def logout(self, request: schema.LogoutRequest, ctx: acp.AgentRequestContext) -> None:
        self.authenticated = False

    def prompt(self, request: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        session = self.get(request.session_id)
        text = ctx.prompt_text
        session.history.append(("user", text))
        if text == "wait":
            session.closing.clear()
            ctx.on_cancel(session.closing.set)
            ctx.send_message("waiting")
            session.closing.wait()
            return "cancelled"
        reply = f"got {len(request.prompt)} block(s)"
        ctx.send_message(reply)
        session.history.append(("agent", reply))
        return "end_turn"


def main() -> None:
    state = CheckAgent()
    agent = (
        acp.SyncAgent.builder()
        .agent_info(name="check-agent", version="1")
        .new_session_handler(state.new_session)
        .load_session_handler(state.load_session)
        .resume_session_handler(state.resume_session)
        .list_sessions_handler(state.list_sessions)
        .close_session_handler(state.close_session)
        .delete_session_handler(state.delete_session)
        .set_session_mode_handler(state.set_mode)
        .set_session_config_option_handler(state.set_config)
        .authenticate_handler(state.authenticate)
        .auth_methods(schema.AuthMethodAgent(id="token", name="Token"))
        .logout_handler(state.logout)
        .prompt_handler(state.prompt, image=True, audio=True, embedded_context=True)
        .additional_directories()
        .build()
    )
    agent.serve_stdio()


if __name__ == "__main__":
    main()
