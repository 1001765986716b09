"""``SyncClient.builder()``: transport, handlers and options, checked once in :meth:`build`.

Capabilities are never spelled out by hand: they are derived from the handlers registered
(``read_text_file_handler`` => ``fs.readTextFile``; all five terminal handlers => ``terminal``;
``create_elicitation_handler`` => ``elicitation`` in the modes given). Extra capabilities that
need no handler (``auth.terminal``, ``_meta`` entries...) can be given with
:meth:`SyncClientBuilder.client_capabilities`; one that needs a handler fails :meth:`build`
when the handler is missing. The registration methods live in
:class:`~acp.client.registration.ClientBuilderBase`, shared with ``AsyncClientBuilder``.

The builder class itself lives in :mod:`acp.client.client`, next to the client it builds (as
``SyncAgentBuilder`` lives next to ``SyncAgent``): this module names it under its old path.
"""

from __future__ import annotations

from .client import SyncClientBuilder
from .config import ProcessSpec
from .registration import TerminalHandlers

__all__ = ["ProcessSpec", "SyncClientBuilder", "TerminalHandlers"]
