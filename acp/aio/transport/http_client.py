"""ACP over Streamable HTTP for the asyncio runtime: the client side, on ``httpx.AsyncClient``.

Install the extra: ``pip install 'acp-sync[http]'``. The wire is the one of
:mod:`acp.transport.http_client`, whose pure pieces (:class:`~acp.transport.http_client.HttpWire`:
the headers of every request, what each answer means; :class:`~acp.transport.http_client.SseParser`)
are imported from there: every line written is one ``POST``, sent in order by one task (a
``POST`` is answered before the next goes); ``initialize`` is answered ``200`` with the
``Acp-Connection-Id``, after which one task reads the ``GET`` event stream (and, with
``session_streams``, one task per session stream); ``close`` ends the connection with
``DELETE``. Nothing here starts a thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from http.cookiejar import CookieJar
from typing import TYPE_CHECKING

from ..._extras import need

with need("http", "the Streamable HTTP client"):
    import httpx

from ...errors import ConnectionClosedError
from ...transport._inbox import AsyncInbox
from ...transport._remote import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_OPEN_TIMEOUT,
    RemoteConnectionError,
)
from ...transport.http_client import (
    _SSE,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_STREAM_TIMEOUT,
    HttpWire,
    SseParser,
    check_probe,
    client_options,
)

if TYPE_CHECKING:
    import ssl as ssl_module

__all__ = ["AsyncHttpTransport", "connect_http"]

_log = logging.getLogger("acp.aio.transport.http")

_EOF = b""
#: Unsent bytes above which :meth:`AsyncHttpTransport.drain` waits.
HIGH_WATER = 65536
#: Seconds :meth:`AsyncHttpTransport.close` lets the POSTs already written go out.
CLOSE_FLUSH_TIMEOUT = 5.0
#: Seconds :meth:`AsyncHttpTransport.close` waits for the server to end the event streams.
CLOSE_STREAM_TIMEOUT = 2.0


class AsyncHttpTransport(HttpWire[httpx.AsyncClient]):
    """An :class:`~acp.aio.transport.AsyncTransport` over Streamable HTTP (see the module
    docstring). Made by :func:`connect_http` from the endpoint's URL and an
    ``httpx.AsyncClient`` (the arguments of :class:`~acp.transport.http_client.HttpTransport`); ``connection_id`` is None until ``initialize``
    was answered.

    ``write`` never blocks: lines wait in order for the posting task. A failure to deliver is
    raised by the next :meth:`drain` or ``write``: :class:`RemoteConnectionError` when
    ``initialize`` could not be delivered (its ``status`` the HTTP status of a refusal),
    :class:`~acp.errors.ConnectionClosedError` once the connection is lost. :meth:`drain`
    waits for ``initialize`` to be answered, so its refusal is raised there. A request the
    server refuses later is answered locally with a JSON-RPC error carrying the HTTP status.
    """

    def _init_io(self) -> None:
        self._inbox = AsyncInbox()
        self._outbox: deque[bytes] = deque()  # lines not yet POSTed, in order
        self._unsent = 0  # their bytes
        self._sent = asyncio.Event()  # set whenever drain() may have something to see
        self._poster: asyncio.Task[None] | None = None
        self._streams: list[asyncio.Task[None]] = []
        self._ending: asyncio.Future[None] | None = None  # the DELETE, once started
        self._error: ConnectionClosedError | None = None  # why writing failed

    # -- AsyncTransport ----------------------------------------------------------------------

    @property
    def error(self) -> ConnectionClosedError | None:
        """Why writing failed, once it did: :class:`RemoteConnectionError` (with its HTTP
        ``status``) when ``initialize`` could not be delivered, else the lost connection's
        :class:`~acp.errors.ConnectionClosedError`; None while all is well or after a plain
        close. A caller whose request failed with end of input can raise this instead."""
        return self._error

    async def read(self) -> bytes:
        """Wait until the agent sent something; ``b""`` once the connection ended."""
        return await self._inbox.read()

    def write(self, data: bytes | bytearray) -> None:
        """Queue a ``POST`` of each line of ``data``, in order; never blocks.

        Raises the error that ended the connection (see the class), or
        :class:`~acp.errors.ConnectionClosedError` once it is closed.
        """
        if self._write_closed or self._closed:
            raise self._error or ConnectionClosedError(f"{self._description}: transport is closed")
        for line in bytes(data).split(b"\n"):
            if line and not line.isspace():
                self._outbox.append(line)
                self._unsent += len(line)
        if self._outbox and (self._poster is None or self._poster.done()):
            self._poster = asyncio.ensure_future(self._post_all())

    async def drain(self) -> None:
        """Wait until the unsent lines are below 64 KiB and ``initialize`` (if written) was
        answered; raise the error that made the connection fail, if one did."""
        while self._poster is not None and not self._poster.done():
            if self._unsent <= HIGH_WATER and self.connection_id is not None:
                break
            self._sent.clear()
            await self._sent.wait()
        if self._error is not None:
            raise self._error

    def close_write(self) -> None:
        """End the connection: once the lines already written are posted, ``DELETE`` it; the
        server closes it, answers what it can and ends the event stream, so :meth:`read`
        returns ``b""``. Idempotent."""
        if self._write_closed:
            return
        self._write_closed = True
        self._end_connection()

    async def close(self) -> None:
        """Post what was written (for up to 5 s), ``DELETE`` the connection (if not yet), stop
        the event streams and release the HTTP client; a pending :meth:`read` returns ``b""``.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._write_closed = True
        await self._end_connection()
        streams = [task for task in self._streams if not task.done()]
        if streams:
            _, late = await asyncio.wait(streams, timeout=CLOSE_STREAM_TIMEOUT)  # ended after DELETE
            for task in late:  # an unreachable server: stop reading
                task.cancel()
            await asyncio.gather(*streams, return_exceptions=True)
        await self._client.aclose()
        self._put(_EOF)
        _log.debug("%s: closed", self._description)

    # -- internals ---------------------------------------------------------------------------

    def _put(self, data: bytes) -> None:
        self._inbox.put(data)

    def _stop_streams(self) -> None:
        for task in self._streams:
            task.cancel()

    def _end(self) -> None:
        super()._end()
        self._outbox.clear()  # nothing left to post them to
        self._unsent = 0

    async def _post_all(self) -> None:
        """The posting task: one ``POST`` at a time, in order, until the outbox is empty."""
        outbox = self._outbox
        try:
            while outbox:
                line = outbox.popleft()
                self._unsent -= len(line)
                await self._post(line)
                self._sent.set()
        except ConnectionClosedError as exc:  # the connection ended (_failed/_answered said why)
            self._error = exc
        except Exception as exc:  # a bug of ours: fail the connection, do not hang it
            _log.exception("%s: posting failed", self._description)
            self._error = ConnectionClosedError(f"{self._description}: {exc!r}")
            self._end()
        finally:
            self._sent.set()

    async def _post(self, line: bytes) -> None:
        post = self._prepare(line)
        if post.open_first is not None:
            await self._open_stream(post.open_first)
        try:
            response = await self._client.post(self._url, content=line, headers=post.headers, timeout=self._post_timeout)
        except httpx.HTTPError as exc:
            raise self._failed(exc, post) from exc
        if self._answered(post, response):
            await self._open_stream(None)

    async def _open_stream(self, session_id: str | None) -> None:
        """Start the task of the connection's event stream, or of one session's (then wait
        until the server accepted it, so what the next POST causes is routed to it)."""
        opened = asyncio.Event()
        self._streams.append(asyncio.ensure_future(self._read_stream(session_id, opened)))
        if session_id is not None:
            try:
                await asyncio.wait_for(opened.wait(), self._stream_timeout.connect)
            except asyncio.TimeoutError:
                pass

    async def _read_stream(self, session_id: str | None, opened: asyncio.Event) -> None:
        """An event stream's task: parse events into lines for :meth:`read`."""
        parser = SseParser(self._max)
        with self._streaming(session_id, opened):
            headers = self._stream_headers(session_id)
            async with self._client.stream("GET", self._url, headers=headers, timeout=self._stream_timeout) as response:
                if response.status_code != 200:
                    try:
                        await response.aread()
                    except httpx.HTTPError:
                        pass
                    self._stream_refused(session_id, response)
                    return
                opened.set()
                async for chunk in response.aiter_bytes():
                    self._feed_stream(parser, chunk, session_id)

    def _end_connection(self) -> asyncio.Future[None]:
        """Start (once) what ends the connection: flush the outbox, then DELETE."""
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._flush_and_delete())
        return self._ending

    async def _flush_and_delete(self) -> None:
        poster = self._poster
        if poster is not None and not poster.done():
            try:
                await asyncio.wait_for(asyncio.shield(poster), CLOSE_FLUSH_TIMEOUT)
            except asyncio.TimeoutError:
                poster.cancel()
                await asyncio.gather(poster, return_exceptions=True)
        if self._must_delete():
            try:
                await self._client.delete(self._url, headers=self._connection_headers(), timeout=self._post_timeout)
            except httpx.HTTPError as exc:
                _log.debug("%s: DELETE failed: %r", self._description, exc)
        if self.connection_id is None:
            self._put(_EOF)  # no stream was ever opened: nothing else will end reads

    def __repr__(self) -> str:
        return f"<AsyncHttpTransport {self._description}{' closed' if self._closed else ''}>"


async def connect_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    cookies: CookieJar | None = None,
    open_timeout: float | None = DEFAULT_OPEN_TIMEOUT,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    stream_timeout: float | None = DEFAULT_STREAM_TIMEOUT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    http2: bool = False,
    verify: bool | str | ssl_module.SSLContext = True,
    check: bool = True,
    session_streams: bool = False,
) -> AsyncHttpTransport:
    """Open a Streamable HTTP connection to an ACP agent at ``url`` (``http(s)://host:port/acp``)
    for the asyncio runtime. The options and errors of
    :func:`acp.transport.http_client.connect_http`: ``check`` probes the endpoint now, so an
    unreachable server, a wrong path or a refused credential raises
    :class:`~acp.transport.http_client.RemoteConnectionError` here rather than at ``initialize``.
    """
    client = httpx.AsyncClient(**client_options(url, headers, cookies, open_timeout, request_timeout, http2, verify))
    try:
        if check:
            try:
                response = await client.get(url, headers={"Accept": _SSE}, timeout=open_timeout)
            except httpx.HTTPError as exc:
                raise RemoteConnectionError(url, str(exc) or type(exc).__name__) from exc
            check_probe(url, response)
    except BaseException:
        await client.aclose()
        raise
    return AsyncHttpTransport(
        url,
        client,
        request_timeout=request_timeout,
        stream_timeout=stream_timeout,
        open_timeout=open_timeout,
        max_message_bytes=max_message_bytes,
        session_streams=session_streams,
    )
