"""The agent side of ACP: build an agent from handlers and serve it.

::

    agent = (acp.SyncAgent.builder()
             .agent_info("demo", "1.0")
             .new_session_handler(new_session)
             .prompt_handler(prompt)
             .build())
    agent.serve_stdio()
"""

from .agent import AgentConnection, SyncAgent, SyncAgentBuilder
from .builder import AgentBuilder
from .client_proxy import ClientProxy
from .commands import CommandResult
from .context import AgentRequestContext, PlanEntryLike, PromptContext, SessionUpdater
from .initialize import SUPPORTED_PROTOCOL_VERSIONS, negotiate_version
from .spec import DEFAULT_CANCEL_GRACE_PERIOD, AgentSpec

__all__ = [
    "DEFAULT_CANCEL_GRACE_PERIOD",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "AgentBuilder",
    "AgentConnection",
    "AgentRequestContext",
    "AgentSpec",
    "ClientProxy",
    "CommandResult",
    "PlanEntryLike",
    "PromptContext",
    "SessionUpdater",
    "SyncAgent",
    "SyncAgentBuilder",
    "negotiate_version",
]
