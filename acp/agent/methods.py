"""The agent-side ACP methods a builder can register, by builder name.

One row per method: the builder's name for it (``new_session`` -> ``new_session_handler`` /
``@on_new_session``), its wire name, whether it is a notification, and whether it is unstable
(registrable only after ``.unstable(True)``). Params and result types come from
``acp.schema.AGENT_METHODS``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .. import schema

__all__ = ["AgentMethod", "AGENT_HANDLERS", "BY_WIRE", "params_type", "result_type"]


# A msgspec Struct, not a dataclass: defining a dataclass costs ~0.35 ms of import time.
class AgentMethod(msgspec.Struct, frozen=True):
    """One registrable agent-side method."""

    name: str
    wire: str
    notification: bool = False
    unstable: bool = False


_ROWS = (
    AgentMethod("initialize", "initialize"),
    AgentMethod("authenticate", "authenticate"),
    AgentMethod("logout", "logout"),
    AgentMethod("new_session", "session/new"),
    AgentMethod("load_session", "session/load"),
    AgentMethod("list_sessions", "session/list"),
    AgentMethod("resume_session", "session/resume"),
    AgentMethod("close_session", "session/close"),
    AgentMethod("delete_session", "session/delete"),
    AgentMethod("set_session_mode", "session/set_mode"),
    AgentMethod("set_session_config_option", "session/set_config_option"),
    AgentMethod("prompt", "session/prompt"),
    AgentMethod("cancel", "session/cancel", notification=True),
    # Unstable (opt-in).
    AgentMethod("fork_session", "session/fork", unstable=True),
    AgentMethod("list_providers", "providers/list", unstable=True),
    AgentMethod("set_provider", "providers/set", unstable=True),
    AgentMethod("disable_provider", "providers/disable", unstable=True),
    AgentMethod("mcp_message", "mcp/message", unstable=True),
    AgentMethod("session_status", "session/status", unstable=True),
    AgentMethod("archive_session", "session/archive", unstable=True),
    AgentMethod("unarchive_session", "session/unarchive", unstable=True),
    AgentMethod("set_session_title", "session/set_title", unstable=True),
    AgentMethod("auth_status", "auth/status", unstable=True),
)

AGENT_HANDLERS: dict[str, AgentMethod] = {row.name: row for row in _ROWS}
BY_WIRE: dict[str, AgentMethod] = {row.wire: row for row in _ROWS}


def _spec(wire: str) -> Any:
    table = schema.STABLE_AGENT_METHODS if wire in schema.STABLE_AGENT_METHODS else schema.AGENT_METHODS
    return table[wire]


def params_type(wire: str) -> Any:
    """The params type of agent method ``wire``."""
    return _spec(wire).params_type


def result_type(wire: str) -> Any:
    """The result type of agent method ``wire`` (None for a notification)."""
    return _spec(wire).result_type
