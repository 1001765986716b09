"""``initialize``: protocol version negotiation and the default answer.

Spec rule: if the agent supports the version the client asked for, answer that version;
otherwise answer the latest version the agent supports (never echo an unsupported one). The
client then decides whether it can continue.
"""

from __future__ import annotations

from .. import schema
from ..capabilities import NegotiatedCapabilities

__all__ = ["SUPPORTED_PROTOCOL_VERSIONS", "negotiate_version", "default_initialize", "record"]

SUPPORTED_PROTOCOL_VERSIONS: frozenset[int] = frozenset({schema.PROTOCOL_VERSION})


def negotiate_version(requested: int) -> int:
    """The protocol version to answer for a client that asked for ``requested``."""
    if requested in SUPPORTED_PROTOCOL_VERSIONS:
        return requested
    return max(SUPPORTED_PROTOCOL_VERSIONS)


def default_initialize(
    request: schema.InitializeRequest,
    capabilities: schema.AgentCapabilities,
    auth_methods: tuple[schema.AuthMethod, ...],
    agent_info: schema.Implementation | None,
) -> schema.InitializeResponse:
    """The answer an agent gives when no initialize handler was registered."""
    return schema.InitializeResponse(
        protocol_version=negotiate_version(request.protocol_version),
        agent_capabilities=capabilities,
        auth_methods=list(auth_methods),
        agent_info=agent_info,
    )


def record(request: schema.InitializeRequest, response: schema.InitializeResponse) -> NegotiatedCapabilities:
    """What this connection negotiated: both halves of the exchange."""
    return NegotiatedCapabilities.from_initialize(request, response)
