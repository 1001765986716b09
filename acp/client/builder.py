"""``SyncClient.builder()``: transport, handlers and options, checked once in :meth:`build`.

Capabilities are never spelled out by hand: they are derived from the handlers registered
(``read_text_file_handler`` => ``fs.readTextFile``; all five terminal handlers => ``terminal``;
``create_elicitation_handler`` => ``elicitation`` in the modes given). Extra capabilities that
need no handler (``auth.terminal``, ``_meta`` entries...) can be given with
:meth:`SyncClientBuilder.client_capabilities`; one that needs a handler fails :meth:`build`
when the handler is missing. The registration methods live in
:class:`~acp.client.registration.ClientBuilderBase`, shared with ``AsyncClientBuilder``.
"""

from __future__ import annotations

from typing_extensions import Self

from ..transport._remote import RemoteSpec
from ..transport.base import Transport
from .client import SyncClient
from .config import ProcessSpec
from .registration import ClientBuilderBase, TerminalHandlers

__all__ = ["ProcessSpec", "SyncClientBuilder", "TerminalHandlers"]


class SyncClientBuilder(ClientBuilderBase):
    """Collects a client's transport, handlers and options; :meth:`build` makes the client.

    Every method returns the builder, so calls chain; the ``on_...`` variants register the
    same handlers as decorators. :meth:`build` validates everything before it spawns anything.
    Handlers are plain functions, run on the handler executor (``async def`` ones are refused:
    use :class:`~acp.client.aio.AsyncClientBuilder`).
    """

    def transport(self, transport: Transport) -> Self:
        """Talk over an existing transport (``memory_pair()``, a socket...); the client owns
        it from :meth:`build` on and closes it."""
        self._transports.append(transport)
        return self

    def build(self) -> SyncClient:
        """Validate, open the transport (spawning the agent), start the connection.

        Raises ``ValueError`` naming every problem: no transport or more than one, a partial
        set of terminal handlers, a capability declared without its handler.
        """
        from ..transport.process import ProcessTransport

        config = self.config()
        source = config.source
        process: ProcessTransport | None = None
        transport: Transport
        with config.opening() as (tap, owned_tap):
            if isinstance(source, ProcessSpec):
                transport = process = ProcessTransport(
                    source.argv,
                    cwd=source.cwd,
                    env=source.env,
                    inherit_env=source.inherit_env,
                    start_new_session=source.start_new_session,
                )
            elif isinstance(source, RemoteSpec):
                transport = source.open()
            else:
                transport = source
        return SyncClient(config, transport, process=process, wire_tap=tap, owned_tap=owned_tap)
