"""An agent service whose sessions outlive connections, processes and machines.

Sessions are not kept in memory: each one is a JSON file in ``--sessions-dir`` (its cwd, title
and history of user prompts and agent replies), written atomically (a temporary file renamed
over the old one) under a file lock. Run several copies of this service on the same directory
(a shared volume in production) behind a load balancer, and a client that lost its connection
can reconnect to any of them and pick its session up again with ``session/load`` (the history
is replayed as ``user_message_chunk`` / ``agent_message_chunk`` updates) or ``session/resume``
(no replay); ``session/delete`` removes a session's file (deleting an unknown session
succeeds, as the spec advises). ``docs/deployment.md`` runs two of them behind nginx.

Run it::

    python -m acp.examples.session_service --port 8701 --name b1 --sessions-dir /srv/acp-sessions

Options: ``--host`` (default 127.0.0.1), ``--transport ws|http`` (``ws``: WebSocket, needs
``acp-sync[ws]``; ``http``: Streamable HTTP and WebSocket on one port, needs ``acp-sync[http]``;
default ws), ``--token T`` (clients must send ``Authorization: Bearer T``; the
``ACP_SERVICE_TOKEN`` environment variable does the same without showing the token in ``ps``).
When it is ready it prints ``listening <url>`` on stdout; SIGTERM or SIGINT shut it down
gracefully (turns in flight are cancelled and answered, then the sockets close).

The agent itself is deliberately trivial: a prompt is answered ``[NAME] you said: TEXT``, so
you can see which process served it. A prompt starting with ``wait`` holds the turn until the
client cancels it (handy to show what a client sees when its backend dies mid-turn).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import hmac
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import acp
from acp import schema
from acp.errors import RESOURCE_NOT_FOUND, RequestError

__all__ = ["SessionStore", "build_agent", "main"]

_log = logging.getLogger("acp.examples.session_service")

_SESSION_ID = re.compile(r"^[0-9a-f]{32}$")  # uuid4().hex: also keeps ids from naming other paths


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


class SessionStore:
    """Sessions as JSON files in one directory, safe to share between processes.

    A file holds ``{"cwd", "title", "updated_at", "history": [[role, text], ...]}`` with role
    ``"user"`` or ``"agent"``. Readers never see a half-written file (writes go to a temporary
    file first, then ``os.replace``); read-modify-write cycles hold an exclusive ``flock`` on
    ``<id>.lock``, so two backends appending to one session at once lose nothing.
    """

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)

    def create(self, cwd: str) -> str:
        """A new, empty session in ``cwd``; its id."""
        session_id = uuid.uuid4().hex
        self._write(session_id, {"cwd": cwd, "title": None, "updated_at": _now(), "history": []})
        return session_id

    def get(self, session_id: str) -> dict[str, Any]:
        """The stored session; ``RequestError`` (resource not found) if there is none."""
        path = self._path(session_id)
        try:
            with open(path, encoding="utf-8") as f:
                data: dict[str, Any] = json.load(f)
        except FileNotFoundError:
            raise RequestError(
                RESOURCE_NOT_FOUND, f"Unknown session {session_id!r}", {"sessionId": session_id}
            ) from None
        return data

    def append(self, session_id: str, role: str, text: str) -> None:
        """Add one message to the session's history (the first user message is its title)."""
        with self._locked(session_id):
            data = self.get(session_id)
            data["history"].append([role, text])
            if role == "user" and data["title"] is None:
                data["title"] = text[:60]
            data["updated_at"] = _now()
            self._write(session_id, data)

    def list(self, cwd: str | None = None) -> list[schema.SessionInfo]:
        """Every stored session (those of ``cwd`` when given), most recently updated first."""
        found = []
        for name in os.listdir(self.directory):
            session_id, ext = os.path.splitext(name)
            if ext != ".json" or not _SESSION_ID.match(session_id):
                continue
            try:
                data = self.get(session_id)
            except RequestError:  # deleted in the meantime
                continue
            if cwd is None or data["cwd"] == cwd:
                found.append(
                    schema.SessionInfo(
                        session_id=session_id, cwd=data["cwd"], title=data["title"], updated_at=data["updated_at"]
                    )
                )
        found.sort(key=lambda info: info.updated_at or "", reverse=True)
        return found

    def delete(self, session_id: str) -> None:
        """Remove the session; one that does not exist (any more) is not an error."""
        if not _SESSION_ID.match(session_id):
            return  # no such file can exist
        # The lock file stays: removing it while another backend holds it would let a third
        # one lock a new file of the same name, and two "exclusive" locks would coexist.
        with self._locked(session_id), contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(session_id))

    def _path(self, session_id: str, ext: str = ".json") -> str:
        if not _SESSION_ID.match(session_id):
            raise RequestError(RESOURCE_NOT_FOUND, f"Unknown session {session_id!r}", {"sessionId": session_id})
        return os.path.join(self.directory, session_id + ext)

    @contextlib.contextmanager
    def _locked(self, session_id: str) -> Iterator[None]:
        with open(self._path(session_id, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            yield

    def _write(self, session_id: str, data: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path(session_id))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def build_agent(store: SessionStore, name: str) -> acp.SyncAgent:
    """The service's agent: sessions in ``store``, replies signed ``[name]``."""

    def new_session(request: schema.NewSessionRequest, ctx: acp.AgentRequestContext) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id=store.create(request.cwd))

    def load_session(request: schema.LoadSessionRequest, ctx: acp.AgentRequestContext) -> None:
        # Replay the whole conversation as session/update notifications, then answer.
        history = ctx.session(request.session_id)
        for role, text in store.get(request.session_id)["history"]:
            if role == "user":
                history.send_user_message(text)
            else:
                history.send_message(text)

    def resume_session(request: schema.ResumeSessionRequest, ctx: acp.AgentRequestContext) -> None:
        store.get(request.session_id)  # it exists: nothing to replay

    def list_sessions(request: schema.ListSessionsRequest, ctx: acp.AgentRequestContext) -> schema.ListSessionsResponse:
        return schema.ListSessionsResponse(sessions=store.list(request.cwd))

    def delete_session(request: schema.DeleteSessionRequest, ctx: acp.AgentRequestContext) -> None:
        store.delete(request.session_id)  # an unknown session is already deleted: success

    def prompt(request: schema.PromptRequest, ctx: acp.PromptContext) -> str:
        text = ctx.prompt_text
        store.append(request.session_id, "user", text)
        if text.startswith("wait"):
            ctx.send_message(f"[{name}] waiting")
            ctx.cancelled.wait()
            return schema.StopReasons.CANCELLED
        reply = f"[{name}] you said: {text}"
        ctx.send_message(reply)
        store.append(request.session_id, "agent", reply)
        return schema.StopReasons.END_TURN

    return (
        acp.SyncAgent.builder()
        .agent_info(name="acp-session-service", version=acp.__version__, title=f"Session service {name}")
        .new_session_handler(new_session)
        .load_session_handler(load_session)
        .resume_session_handler(resume_session)
        .list_sessions_handler(list_sessions)
        .delete_session_handler(delete_session)
        .prompt_handler(prompt)
        .build()
    )


def bearer_token_check(token: str) -> Callable[[Mapping[str, str]], int | None]:
    """An ``authenticate(headers)`` hook: accept ``Authorization: Bearer <token>``, else 401."""
    expected = f"Bearer {token}".encode()

    def authenticate(headers: Mapping[str, str]) -> int | None:
        given = headers.get("Authorization", "").encode()
        return None if hmac.compare_digest(given, expected) else 401

    return authenticate


class _Server(Protocol):
    @property
    def url(self) -> str: ...

    def close(self, timeout: float | None = 5.0) -> None: ...


def _serve(agent: acp.SyncAgent, transport: str, host: str, port: int, token: str | None) -> _Server:
    authenticate = bearer_token_check(token) if token else None
    if transport == "ws":
        return agent.serve_websocket(host, port, authenticate=authenticate)
    return agent.serve_http(host, port, authenticate=authenticate)  # WebSocket on the same port too


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM / SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m acp.examples.session_service", description="An ACP agent service with shared, persistent sessions.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="0: any free port (see the printed URL)")
    parser.add_argument("--name", default="agent", help="signs the replies, to see which backend served")
    parser.add_argument("--sessions-dir", required=True, help="where sessions live (shared by all backends)")
    parser.add_argument("--transport", choices=("ws", "http"), default="ws")
    parser.add_argument("--token", default=os.environ.get("ACP_SERVICE_TOKEN"), help="required bearer token")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("ACP_LOG_LEVEL", "WARNING").upper(), stream=sys.stderr)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with build_agent(SessionStore(args.sessions_dir), args.name) as agent:
        server = _serve(agent, args.transport, args.host, args.port, args.token)
        print(f"listening {server.url}", flush=True)
        stop.wait()
        _log.info("%s: shutting down", args.name)
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
