"""The client side of ACP: :class:`SyncClient` (and :class:`AsyncClient`, on asyncio), their
builders, what handlers receive, and ready-made handlers (:class:`LocalFiles`, :class:`LocalTerminals`, :class:`PermissionPolicy`).

::

    with (acp.SyncClient.builder()
            .agent_process("my-agent", "--stdio")
            .session_update_handler(on_update)
            .read_text_file_handler(read)
            .build()) as client:
        client.initialize()
        session = client.new_session(cwd="/abs/project")
        print(client.prompt(session.session_id, "What does main.py do?").stop_reason)
"""

from typing import TYPE_CHECKING, Any

from .builder import SyncClientBuilder
from .client import (
    SUPPORTED_PROTOCOL_VERSIONS,
    AgentProcess,
    PromptInput,
    SyncClient,
    UnsupportedProtocolVersionError,
)
from .context import AgentProxy, ClientRequestContext
from .registration import TerminalHandlers

if TYPE_CHECKING:
    from ..wiretap import JsonlWireTap
    from .aio import AsyncAgentProcess, AsyncClient, AsyncClientBuilder
    from .files import LocalFiles
    from .permissions import PermissionPolicy
    from .settings import AgentSettings, AgentSettingsError
    from .terminals import LocalTerminals

# The ready-made handlers pull in subprocess & co, the asyncio client asyncio, the settings parser
# re and a dataclass (most clients never read settings), the file wire tap: imported on first use.
_LAZY = {
    "AgentSettings": ".settings",
    "JsonlWireTap": "..wiretap",
    "AgentSettingsError": ".settings",
    "LocalFiles": ".files",
    "LocalTerminals": ".terminals",
    "PermissionPolicy": ".permissions",
    "AsyncAgentProcess": ".aio",
    "AsyncClient": ".aio",
    "AsyncClientBuilder": ".aio",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "SUPPORTED_PROTOCOL_VERSIONS",
    "AgentProcess",
    "AsyncAgentProcess",
    "AsyncClient",
    "AsyncClientBuilder",
    "AgentProxy",
    "AgentSettings",
    "AgentSettingsError",
    "ClientRequestContext",
    "JsonlWireTap",
    "LocalFiles",
    "LocalTerminals",
    "PermissionPolicy",
    "PromptInput",
    "SyncClient",
    "SyncClientBuilder",
    "TerminalHandlers",
    "UnsupportedProtocolVersionError",
]
