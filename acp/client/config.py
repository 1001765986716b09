"""What a client builder hands to a client runtime: :class:`ClientConfig`, runtime-neutral.

Configuration flows one way: a builder (:mod:`acp.client.registration`, with the
``SyncClientBuilder`` / ``AsyncClientBuilder`` on top) validates what was registered into a
:class:`ClientConfig`; a runtime (``SyncClient`` on threads, ``AsyncClient`` on an event loop)
takes the config and opens its transport. Nothing here knows about threads, tasks or sockets.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Union

import msgspec

from .. import schema

if TYPE_CHECKING:
    from ..connection import Ordering
    from ..wiretap import JsonlWireTap, WireTap

__all__ = ["ClientConfig", "HandlerSet", "ProcessSpec", "StrPath"]

StrPath = Union[str, "os.PathLike[str]"]

RequestFn = Callable[[Any, Any], Any]
NotificationFn = Callable[[Any], Any]
UpdateFn = Callable[[schema.SessionNotification], Any]


# msgspec Structs, not dataclasses: defining a dataclass costs ~0.35 ms of import time.
class ProcessSpec(msgspec.Struct, frozen=True):
    """How to spawn the agent (``agent_process``)."""

    argv: tuple[str, ...]
    cwd: StrPath | None = None
    env: Mapping[str, str] | None = None
    inherit_env: bool = True
    start_new_session: bool = False


class HandlerSet(msgspec.Struct):
    """Everything a builder registered, keyed by wire method name."""

    session_update: list[UpdateFn] = msgspec.field(default_factory=list)
    # Per-kind session update consumers, in registration order: (capability, fn); capability is
    # "notices", "compaction" or "subagents" (see UPDATE_CAPABILITY for the tags each gets).
    update_kinds: list[tuple[str, UpdateFn]] = msgspec.field(default_factory=list)
    requests: dict[str, RequestFn] = msgspec.field(default_factory=dict)
    notifications: dict[str, NotificationFn] = msgspec.field(default_factory=dict)
    ext_requests: dict[str, RequestFn] = msgspec.field(default_factory=dict)
    ext_notifications: dict[str, NotificationFn] = msgspec.field(default_factory=dict)

    def methods(self) -> set[str]:
        """The standard client methods that have a handler (what capabilities derive from)."""
        return {*self.requests, *self.notifications}

    def shown_kinds(self) -> set[str]:
        """The update capabilities (``notices``...) a per-kind handler was registered for."""
        return {kind for kind, _ in self.update_kinds}


class ClientConfig(msgspec.Struct, frozen=True):
    """A validated client configuration; nothing in it is opened or started yet.

    ``source`` is what to talk over: a :class:`ProcessSpec` (spawned by the runtime), a
    ``RemoteSpec`` (connected by the runtime) or a transport object of the runtime's kind.
    """

    source: Any
    handlers: HandlerSet
    capabilities: schema.ClientCapabilities
    client_info: schema.Implementation
    request_timeout: float | None
    prompt_timeout: float | None
    executor: Executor | None
    ordering: Ordering
    wire_tap: WireTap | StrPath | None
    unstable: bool
    name: str
    wait_spin: float  # the threaded runtime's Connection(wait_spin=...)

    def connection_options(self, wire_tap: WireTap | None) -> dict[str, Any]:
        """The keyword arguments of either runtime's connection."""
        return {
            "executor": self.executor,
            "request_timeout": self.request_timeout,
            "wire_tap": wire_tap,
            "ordering": self.ordering,
            "name": self.name,
        }

    @contextmanager
    def opening(self) -> Iterator[tuple[WireTap | None, JsonlWireTap | None]]:
        """Open the wire tap, for the ``with`` block that opens the transport: the tap to hand
        to the connection, and the JSONL file tap the client owns (a path was given) or None.
        An unwritable path fails before anything is spawned; a failure in the block closes it."""
        tap = self.wire_tap
        if tap is None or callable(tap):
            yield tap, None
            return
        from ..wiretap import JsonlWireTap  # only for a file tap

        owned = JsonlWireTap(tap)
        try:
            yield owned, owned
        except BaseException:
            owned.close()
            raise
