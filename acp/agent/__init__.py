"""The agent side of ACP: build an agent from handlers and serve it.

::

    agent = (acp.SyncAgent.builder()
             .agent_info("demo", "1.0")
             .new_session_handler(new_session)
             .prompt_handler(prompt)
             .build())
    agent.serve_stdio()

The asyncio twins (``AsyncAgent``, ``AsyncAgentBuilder``, ``AsyncAgentConnection``,
``AsyncPromptContext``, ``AsyncAgentRequestContext``, ``AsyncClientProxy``) are imported on
first use, so a sync agent never imports asyncio.
"""

from typing import TYPE_CHECKING, Any

from .agent import AgentConnection, SyncAgent, SyncAgentBuilder
from .builder import AgentBuilder
from .client_proxy import ClientProxy
from .context import AgentRequestContext, PlanEntryLike, PromptContext, SessionUpdater
from .initialize import SUPPORTED_PROTOCOL_VERSIONS, negotiate_version
from .spec import DEFAULT_CANCEL_GRACE_PERIOD, AgentSpec

if TYPE_CHECKING:
    from .aio import AsyncAgent, AsyncAgentBuilder, AsyncAgentConnection
    from .aio_context import AsyncAgentRequestContext, AsyncClientProxy, AsyncPromptContext
    from .commands import CommandResult

# Imported on first use: the asyncio twins (asyncio), CommandResult (a dataclass, made only when
# a handler runs a command).
_ASYNC = {
    "CommandResult": "commands",
    "AsyncAgent": "aio",
    "AsyncAgentBuilder": "aio",
    "AsyncAgentConnection": "aio",
    "AsyncAgentRequestContext": "aio_context",
    "AsyncClientProxy": "aio_context",
    "AsyncPromptContext": "aio_context",
}


def __getattr__(name: str) -> Any:
    module = _ASYNC.get(name)
    if module is None:
        raise AttributeError(f"module 'acp.agent' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_CANCEL_GRACE_PERIOD",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "AgentBuilder",
    "AgentConnection",
    "AgentRequestContext",
    "AgentSpec",
    "AsyncAgent",
    "AsyncAgentBuilder",
    "AsyncAgentConnection",
    "AsyncAgentRequestContext",
    "AsyncClientProxy",
    "AsyncPromptContext",
    "ClientProxy",
    "CommandResult",
    "PlanEntryLike",
    "PromptContext",
    "SessionUpdater",
    "SyncAgent",
    "SyncAgentBuilder",
    "negotiate_version",
]
