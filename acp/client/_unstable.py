"""The unstable client -> agent methods (``session/fork``, ``providers/*``, ...): they always exist on :class:`~acp.client.SyncClient`, and raise
:class:`~acp.errors.CapabilityError` (nothing sent) unless the builder opted in with
``unstable(True)``. Their types live in :mod:`acp.schema.unstable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..schema import McpServer
    from ..schema import unstable as u

__all__ = ["UnstableMethods"]

def _u() -> Any:
    from ..schema import unstable

    return unstable


class UnstableMethods:
    """Mixin: typed wrappers over ``SyncClient._send`` / ``_notify`` for unstable methods."""

    def _send(self, method: str, params: Any, *, timeout: Any = ...) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _notify(self, method: str, params: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    # -- sessions --------------------------------------------------------------------------

    def fork_session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: Sequence[McpServer] | None = None,
        additional_directories: Sequence[str] | None = None,
        *,
        meta: dict[str, Any] | None = None,
    ) -> u.ForkSessionResponse:
        """``session/fork`` (unstable): a new session starting from ``session_id``'s history."""
        request = _u().ForkSessionRequest(
            session_id=session_id,
            cwd=cwd,
            mcp_servers=None if mcp_servers is None else list(mcp_servers),
            additional_directories=None if additional_directories is None else list(additional_directories),
            field_meta=meta,
        )
        result: u.ForkSessionResponse = self._send("session/fork", request)
        return result

    # -- providers -------------------------------------------------------------------------

    def list_providers(self, *, meta: dict[str, Any] | None = None) -> u.ListProvidersResponse:
        """``providers/list`` (unstable): the model providers the agent can use."""
        result: u.ListProvidersResponse = self._send("providers/list", _u().ListProvidersRequest(field_meta=meta))
        return result

    def set_provider(
        self,
        provider_id: str,
        api_type: str,
        base_url: str,
        headers: dict[str, str] | None = None,
        *,
        meta: dict[str, Any] | None = None,
    ) -> u.SetProviderResponse:
        """``providers/set`` (unstable): configure a model provider."""
        request = _u().SetProviderRequest(
            provider_id=provider_id, api_type=api_type, base_url=base_url, headers=headers, field_meta=meta
        )
        result: u.SetProviderResponse = self._send("providers/set", request)
        return result

    def disable_provider(self, provider_id: str, *, meta: dict[str, Any] | None = None) -> u.DisableProviderResponse:
        """``providers/disable`` (unstable)."""
        request = _u().DisableProviderRequest(provider_id=provider_id, field_meta=meta)
        result: u.DisableProviderResponse = self._send("providers/disable", request)
        return result
