"""The unstable client -> agent methods (``session/fork``, ``providers/*``, ``nes/*``,
``document/*``): they always exist on :class:`~acp.client.SyncClient`, and raise
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

    # -- next edit suggestions -------------------------------------------------------------

    def start_nes(self, request: u.StartNesRequest | None = None) -> u.StartNesResponse:
        """``nes/start`` (unstable): start a next-edit-suggestion session."""
        result: u.StartNesResponse = self._send("nes/start", request if request is not None else _u().StartNesRequest())
        return result

    def suggest_nes(self, request: u.SuggestNesRequest) -> u.SuggestNesResponse:
        """``nes/suggest`` (unstable): ask for edit suggestions at a position."""
        result: u.SuggestNesResponse = self._send("nes/suggest", request)
        return result

    def accept_nes(self, session_id: str, suggestion_id: str, *, meta: dict[str, Any] | None = None) -> None:
        """``nes/accept`` (unstable notification): the user took a suggestion."""
        self._notify("nes/accept", _u().AcceptNesNotification(session_id=session_id, id=suggestion_id, field_meta=meta))

    def reject_nes(
        self, session_id: str, suggestion_id: str, reason: str | None = None, *, meta: dict[str, Any] | None = None
    ) -> None:
        """``nes/reject`` (unstable notification): the user dismissed a suggestion."""
        notification = _u().RejectNesNotification(session_id=session_id, id=suggestion_id, reason=reason, field_meta=meta)
        self._notify("nes/reject", notification)

    def close_nes(self, session_id: str, *, meta: dict[str, Any] | None = None) -> u.CloseNesResponse:
        """``nes/close`` (unstable): end a next-edit-suggestion session."""
        result: u.CloseNesResponse = self._send("nes/close", _u().CloseNesRequest(session_id=session_id, field_meta=meta))
        return result

    # -- documents -------------------------------------------------------------------------

    def did_open_document(
        self, session_id: str, uri: str, language_id: str, version: int, text: str, *, meta: dict[str, Any] | None = None
    ) -> None:
        """``document/didOpen`` (unstable notification)."""
        notification = _u().DidOpenDocumentNotification(
            session_id=session_id, uri=uri, language_id=language_id, version=version, text=text, field_meta=meta
        )
        self._notify("document/didOpen", notification)

    def did_change_document(self, notification: u.DidChangeDocumentNotification) -> None:
        """``document/didChange`` (unstable notification)."""
        self._notify("document/didChange", notification)

    def did_close_document(self, session_id: str, uri: str, *, meta: dict[str, Any] | None = None) -> None:
        """``document/didClose`` (unstable notification)."""
        self._notify("document/didClose", _u().DidCloseDocumentNotification(session_id=session_id, uri=uri, field_meta=meta))

    def did_save_document(self, session_id: str, uri: str, *, meta: dict[str, Any] | None = None) -> None:
        """``document/didSave`` (unstable notification)."""
        self._notify("document/didSave", _u().DidSaveDocumentNotification(session_id=session_id, uri=uri, field_meta=meta))

    def did_focus_document(self, notification: u.DidFocusDocumentNotification) -> None:
        """``document/didFocus`` (unstable notification)."""
        self._notify("document/didFocus", notification)
