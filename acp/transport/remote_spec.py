"""A remote agent to connect to at ``build()``: its URL and options, and how to open it.

Kept apart from :mod:`acp.transport._remote` (what both remote transports share), which
``websocket`` and ``http_client`` import: this module imports them (only when opening), so
nothing imports back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from ._remote import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_OPEN_TIMEOUT, kind

if TYPE_CHECKING:
    from http.cookiejar import CookieJar  # the cookie support imports it when used

    from .base import Transport

__all__ = ["RemoteSpec"]


# A msgspec Struct, not a dataclass: defining a dataclass costs ~0.35 ms of import time.
class RemoteSpec(msgspec.Struct, frozen=True):
    """A remote agent to connect to at ``build()`` (``SyncClientBuilder.connect``)."""

    url: str
    headers: Mapping[str, str] | None = None
    open_timeout: float | None = DEFAULT_OPEN_TIMEOUT
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    options: Mapping[str, Any] = msgspec.field(default_factory=dict)
    cookies: CookieJar | None = None

    def __post_init__(self) -> None:
        kind(self.url)  # fail early on a URL we cannot serve
        if self.max_message_bytes <= 0:
            raise ValueError("max_message_bytes must be positive")

    def open(self) -> Transport:
        """Connect now; raises :class:`RemoteConnectionError` when that fails."""
        if kind(self.url) == "websocket":
            from .websocket import connect_websocket

            return connect_websocket(
                self.url,
                headers=self.headers,
                cookies=self.cookies,
                open_timeout=self.open_timeout,
                max_message_bytes=self.max_message_bytes,
                **self.options,
            )
        from .http_client import connect_http

        return connect_http(
            self.url,
            headers=self.headers,
            cookies=self.cookies,
            open_timeout=self.open_timeout,
            max_message_bytes=self.max_message_bytes,
            **self.options,
        )
