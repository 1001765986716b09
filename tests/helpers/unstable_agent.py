"""An agent serving the unstable surface over stdio, for the tests that drive it as a process.

It opts in with ``.unstable(True)`` and registers ``session/status``, ``session/archive`` /
``session/unarchive``, ``session/set_title`` and ``auth/status``, and accepts system prompts in
both modes. Its prompt handler reads the first word of the prompt:

``subagent``     announces a cancellable child session, streams one message in the child,
                 marks it running, then idle with the ``error`` stop reason (code -32603)
``auth``         sends ``auth/status_update`` three times: unauthenticated, the same again
                 (suppressed by the SDK), then authenticated; reports what was sent
``wait``         holds the turn until it is cancelled (``session/archive`` cancels it)
``prompt?``      answers with the system prompt its session was created with
"""

from __future__ import annotations

import itertools
import sys
import threading

import acp
from acp import schema
from acp.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RequestError
from acp.schema import unstable as U

_ids = itertools.count(1)
_lock = threading.Lock()
_sessions: dict[str, dict[str, object]] = {}


def _session(session_id: str) -> dict[str, object]:
    with _lock:
        session = _sessions.get(session_id)
    if session is None:
        raise RequestError(RESOURCE_NOT_FOUND, f"Unknown session {session_id!r}", {"sessionId": session_id})
    return session


def new_session(request: schema.NewSessionRequest, ctx: acp.AgentRequestContext) -> schema.NewSessionResponse:
    session_id = f"s{next(_ids)}"
    prompt = request.system_prompt
    text = "".join(b.text for b in prompt.content if isinstance(b, schema.TextContent)) if prompt else None
    with _lock:
        _sessions[session_id] = {
            "archived": False,
            "title": None,
            "system_prompt": (prompt.mode, text) if prompt else None,
        }
    return schema.NewSessionResponse(session_id=session_id)


def list_sessions(request: schema.ListSessionsRequest, ctx: acp.AgentRequestContext) -> schema.ListSessionsResponse:
    archived = request.archived or "exclude"
    if archived not in ("exclude", "include", "only"):
        raise RequestError(INVALID_PARAMS, f"unknown archive filter {archived!r}")
    with _lock:
        items = list(_sessions.items())
    keep = {"exclude": (False,), "include": (False, True), "only": (True,)}[archived]
    return schema.ListSessionsResponse(
        sessions=[
            schema.SessionInfo(session_id=sid, cwd="/", title=s["title"], archived=bool(s["archived"]))  # type: ignore[arg-type]
            for sid, s in items
            if s["archived"] in keep
        ]
    )


def session_status(request: U.SessionStatusRequest, ctx: acp.AgentRequestContext) -> U.SessionStatusResponse:
    session = _session(request.session_id)
    return U.SessionStatusResponse(status="saved" if session["archived"] else "open")


def archive(request: U.ArchiveSessionRequest, ctx: acp.AgentRequestContext) -> None:
    _session(request.session_id)["archived"] = True


def unarchive(request: U.UnarchiveSessionRequest, ctx: acp.AgentRequestContext) -> None:
    _session(request.session_id)["archived"] = False


def set_title(request: U.SetSessionTitleRequest, ctx: acp.AgentRequestContext) -> U.SetSessionTitleResponse:
    title = request.title.strip()
    if not title:
        raise RequestError(INVALID_PARAMS, "the title is empty")
    _session(request.session_id)["title"] = title
    return U.SetSessionTitleResponse(title=title)


def auth_status(request: U.AuthStatusRequest, ctx: acp.AgentRequestContext) -> U.AuthStatusResponse:
    return U.AuthStatusResponse(
        state="authenticated", accounts=[U.AuthAccount(label="Work", email="dev@example.com", active=True)]
    )


def prompt(request: schema.PromptRequest, ctx: acp.PromptContext) -> str:
    word = ctx.prompt_text.strip().split(" ")[0]
    if word == "subagent":
        child = f"{ctx.session_id}-child"
        ctx.send_subagent_update(child, title="tester", description="runs the tests", cancellable=True)
        ctx.session(child).send_message("child says hi")
        ctx.send_subagent_update(child, state="running")
        ctx.send_subagent_update(child, error=RequestError(-32603, "the child crashed"))
    elif word == "auth":
        sent = [
            ctx.client.auth_status_update(U.AuthStatusUpdateNotification(state="unauthenticated")),
            ctx.client.auth_status_update(U.AuthStatusUpdateNotification(state="unauthenticated")),
            ctx.client.auth_status_update(U.AuthStatusUpdateNotification(state="authenticated")),
        ]
        ctx.send_message(f"auth updates sent: {sent}")
    elif word == "wait":
        ctx.send_message("waiting")
        ctx.cancelled.wait(30)
        return "cancelled"
    elif word == "prompt?":
        ctx.send_message(repr(_session(ctx.session_id)["system_prompt"]))
    return "end_turn"


def build() -> acp.SyncAgent:
    return (
        acp.SyncAgent.builder()
        .agent_info(name="unstable-agent", version="1")
        .unstable(True)
        .new_session_handler(new_session)
        .list_sessions_handler(list_sessions)
        .prompt_handler(prompt)
        .session_status_handler(session_status)
        .archive_session_handler(archive)
        .unarchive_session_handler(unarchive)
        .set_session_title_handler(set_title)
        .auth_status_handler(auth_status)
        .system_prompt(override=True)
        .cancel_grace_period(None)
        .build()
    )


if __name__ == "__main__":
    build().serve_stdio()
    sys.exit(0)
