"""acp: a sync-first Python SDK for the Agent Client Protocol (ACP).

Build an agent with :class:`SyncAgent` (or :class:`AsyncAgent`, for an asyncio program), drive
one with :class:`SyncClient`; the typed messages are in :mod:`acp.schema`. Names are imported on
first use, so ``import acp`` stays cheap (and a sync program never imports asyncio).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it (imported lazily by __getattr__)
_LAZY: dict[str, str] = {
    "schema": "acp.schema",
    "errors": "acp.errors",
    "AcpError": "acp.errors",
    "RequestError": "acp.errors",
    "CapabilityError": "acp.errors",
    "ConnectionClosedError": "acp.errors",
    "RequestTimeoutError": "acp.errors",
    "RequestCancelledError": "acp.errors",
    "NegotiatedCapabilities": "acp.capabilities",
    "Connection": "acp.connection",
    "InboundCall": "acp.connection",
    "SyncAgent": "acp.agent",
    "SyncAgentBuilder": "acp.agent",
    "AgentConnection": "acp.agent",
    "AgentRequestContext": "acp.agent",
    "PromptContext": "acp.agent",
    "CommandResult": "acp.agent",
    "AsyncAgent": "acp.agent",
    "AsyncAgentBuilder": "acp.agent",
    "AsyncAgentConnection": "acp.agent",
    "AsyncAgentRequestContext": "acp.agent",
    "AsyncPromptContext": "acp.agent",
    "SyncClient": "acp.client",
    "SyncClientBuilder": "acp.client",
    "AsyncClient": "acp.client",
    "AsyncClientBuilder": "acp.client",
    "ClientRequestContext": "acp.client",
    "UnsupportedProtocolVersionError": "acp.client",
    "LocalFiles": "acp.client",
    "LocalTerminals": "acp.client",
    "PermissionPolicy": "acp.client",
    "AgentSettings": "acp.client",
    "AgentSettingsError": "acp.client",
}

if TYPE_CHECKING:
    from . import errors, schema
    from .agent import (
        AgentConnection,
        AgentRequestContext,
        AsyncAgent,
        AsyncAgentBuilder,
        AsyncAgentConnection,
        AsyncAgentRequestContext,
        AsyncPromptContext,
        CommandResult,
        PromptContext,
        SyncAgent,
        SyncAgentBuilder,
    )
    from .capabilities import NegotiatedCapabilities
    from .client import (
        AgentSettings,
        AgentSettingsError,
        AsyncClient,
        AsyncClientBuilder,
        ClientRequestContext,
        LocalFiles,
        LocalTerminals,
        PermissionPolicy,
        SyncClient,
        SyncClientBuilder,
        UnsupportedProtocolVersionError,
    )
    from .connection import Connection, InboundCall
    from .errors import (
        AcpError,
        CapabilityError,
        ConnectionClosedError,
        RequestCancelledError,
        RequestError,
        RequestTimeoutError,
    )


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'acp' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name == f"acp.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [  # spelled out for linters; tests check it matches _LAZY
    "__version__",
    "schema",
    "errors",
    "AcpError",
    "RequestError",
    "CapabilityError",
    "ConnectionClosedError",
    "RequestTimeoutError",
    "RequestCancelledError",
    "NegotiatedCapabilities",
    "Connection",
    "InboundCall",
    "SyncAgent",
    "SyncAgentBuilder",
    "AgentConnection",
    "AgentRequestContext",
    "PromptContext",
    "CommandResult",
    "AsyncAgent",
    "AsyncAgentBuilder",
    "AsyncAgentConnection",
    "AsyncAgentRequestContext",
    "AsyncPromptContext",
    "SyncClient",
    "SyncClientBuilder",
    "AsyncClient",
    "AsyncClientBuilder",
    "ClientRequestContext",
    "UnsupportedProtocolVersionError",
    "LocalFiles",
    "LocalTerminals",
    "PermissionPolicy",
    "AgentSettings",
    "AgentSettingsError",
]
