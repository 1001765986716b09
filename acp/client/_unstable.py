"""The unstable client -> agent methods (``session/fork``, ``providers/*``, ...): they always exist on :class:`~acp.client.SyncClient` and ``AsyncClient``, and raise
:class:`~acp.errors.CapabilityError` (nothing sent) unless the builder opted in with
``unstable(True)``. Their types live in :mod:`acp.schema.unstable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._plans import Plan, operation

if TYPE_CHECKING:
    from ..schema import McpServer
    from ..schema import unstable as u

__all__ = ["UnstableMethods", "system_prompt_value"]

def _u() -> Any:
    from ..schema import unstable

    return unstable


def system_prompt_value(system_prompt: Any) -> Any:
    """A ``SystemPrompt`` from the shorthand: a string is one text block in ``append`` mode."""
    if system_prompt is None or not isinstance(system_prompt, str):
        return system_prompt
    from ..schema import TextContent

    return _u().SystemPrompt(mode="append", content=[TextContent(text=system_prompt)])


class UnstableMethods:
    """Mixin: the unstable methods as plans over ``ClientCalls._send`` (both runtimes)."""

    def _send(self, method: str, params: Any, *, timeout: Any = ...) -> Plan[Any]:  # pragma: no cover
        raise NotImplementedError

    # -- sessions --------------------------------------------------------------------------

    @operation
    def fork_session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: Sequence[McpServer] | None = None,
        additional_directories: Sequence[str] | None = None,
        *,
        system_prompt: u.SystemPrompt | str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Plan[u.ForkSessionResponse]:
        """``session/fork`` (unstable): a new session starting from ``session_id``'s history.
        ``system_prompt``: as for :meth:`~acp.client.SyncClient.new_session`."""
        request = _u().ForkSessionRequest(
            session_id=session_id,
            cwd=cwd,
            mcp_servers=None if mcp_servers is None else list(mcp_servers),
            additional_directories=None if additional_directories is None else list(additional_directories),
            system_prompt=system_prompt_value(system_prompt),
            field_meta=meta,
        )
        result: u.ForkSessionResponse = yield from self._send("session/fork", request)
        return result

    @operation
    def session_status(self, session_id: str, *, meta: dict[str, Any] | None = None) -> Plan[u.SessionStatusResponse]:
        """``session/status`` (unstable; needs ``sessionCapabilities.status``): whether the agent
        has the session in memory (``"open"``) or can resume it (``"saved"``; treat any other
        value as saved). No side effects: it does not attach this connection to the session.
        An unknown session raises ``RequestError`` -32002."""
        request = _u().SessionStatusRequest(session_id=session_id, field_meta=meta)
        result: u.SessionStatusResponse = yield from self._send("session/status", request)
        return result

    @operation
    def archive_session(self, session_id: str, *, meta: dict[str, Any] | None = None) -> Plan[u.ArchiveSessionResponse]:
        """``session/archive`` (unstable; needs ``sessionCapabilities.archive``): hide the session
        from default ``session/list`` results (``list_sessions(archived="include")`` shows it).
        An active session is closed first (its running turn is cancelled)."""
        request = _u().ArchiveSessionRequest(session_id=session_id, field_meta=meta)
        result: u.ArchiveSessionResponse = yield from self._send("session/archive", request)
        return result

    @operation
    def unarchive_session(self, session_id: str, *, meta: dict[str, Any] | None = None) -> Plan[u.UnarchiveSessionResponse]:
        """``session/unarchive`` (unstable; needs ``sessionCapabilities.archive``): list the
        session again. It does not load or resume it."""
        request = _u().UnarchiveSessionRequest(session_id=session_id, field_meta=meta)
        result: u.UnarchiveSessionResponse = yield from self._send("session/unarchive", request)
        return result

    @operation
    def set_session_title(
        self, session_id: str, title: str, *, meta: dict[str, Any] | None = None
    ) -> Plan[u.SetSessionTitleResponse]:
        """``session/set_title`` (unstable; needs ``sessionCapabilities.title``): rename a
        session (it need not be active here); answers the title as the agent stored it."""
        if not isinstance(title, str):
            raise TypeError(f"set_session_title: title must be a str, not {type(title).__name__}")
        request = _u().SetSessionTitleRequest(session_id=session_id, title=title, field_meta=meta)
        result: u.SetSessionTitleResponse = yield from self._send("session/set_title", request)
        return result

    # -- auth ------------------------------------------------------------------------------

    @operation
    def auth_status(self, *, meta: dict[str, Any] | None = None) -> Plan[u.AuthStatusResponse]:
        """``auth/status`` (unstable; needs ``auth.status``): the agent's authentication
        ``state`` (treat an unknown value as ``"unknown"``) and its ``accounts``, for display.
        Changes arrive as ``auth/status_update`` (``auth_status_update_handler``)."""
        result: u.AuthStatusResponse = yield from self._send("auth/status", _u().AuthStatusRequest(field_meta=meta))
        return result

    # -- providers -------------------------------------------------------------------------

    @operation
    def list_providers(self, *, meta: dict[str, Any] | None = None) -> Plan[u.ListProvidersResponse]:
        """``providers/list`` (unstable): the model providers the agent can use."""
        result: u.ListProvidersResponse = yield from self._send("providers/list", _u().ListProvidersRequest(field_meta=meta))
        return result

    @operation
    def set_provider(
        self,
        provider_id: str,
        api_type: str,
        base_url: str,
        headers: dict[str, str] | None = None,
        *,
        meta: dict[str, Any] | None = None,
    ) -> Plan[u.SetProviderResponse]:
        """``providers/set`` (unstable): configure a model provider."""
        request = _u().SetProviderRequest(
            provider_id=provider_id, api_type=api_type, base_url=base_url, headers=headers, field_meta=meta
        )
        result: u.SetProviderResponse = yield from self._send("providers/set", request)
        return result

    @operation
    def disable_provider(self, provider_id: str, *, meta: dict[str, Any] | None = None) -> Plan[u.DisableProviderResponse]:
        """``providers/disable`` (unstable)."""
        request = _u().DisableProviderRequest(provider_id=provider_id, field_meta=meta)
        result: u.DisableProviderResponse = yield from self._send("providers/disable", request)
        return result
