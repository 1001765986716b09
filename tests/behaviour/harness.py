"""One behaviour suite, every runtime: the harness.

A test drives a :class:`Runtime` (the connection under test: threads, asyncio, or the
single-threaded ``selectors`` loop of tests/helpers/selector_runtime.py) from the test thread,
and plays the peer itself over real OS pipes with a :class:`RawPeer` (real bytes: what the
runtime writes is read back and parsed, what the test writes is any bytes at all).

Handlers are written once for every runtime, as plans (:mod:`acp.effects`): a handler returns
its result, or is a generator that yields :class:`~acp.effects.Send` (a request of its own,
answered by the peer) and :class:`Wait` (block until a ``threading.Event`` is set). The
threaded runtime blocks on each effect; the asyncio one awaits it (a Wait on the executor, so
the loop never blocks); the selectors one pumps its loop.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import queue
import threading
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import Any

from acp import effects
from acp.aio import AsyncConnection
from acp.aio.transport._fd import FdTransport as AsyncFdTransport
from acp.connection import Connection
from acp.transport.fd import FdTransport
from tests.helpers.selector_runtime import SelectorConnection

WAIT = 10.0

__all__ = ["WAIT", "RawPeer", "Runtime", "Wait", "make_runtime", "RUNTIMES"]


class Wait:
    """A handler's effect: block until ``event`` is set (at most ``timeout``)."""

    def __init__(self, event: threading.Event, timeout: float = WAIT) -> None:
        self.event = event
        self.timeout = timeout


Handler = Callable[..., Any]


class RawPeer:
    """The other end of the pipes: whole lines in, any bytes out."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self.lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._buffer = b""
        self._skipped: list[dict[str, Any]] = []  # read while looking for another message
        self._thread = threading.Thread(target=self._read, name="raw-peer", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.read_fd, 65536)
            except OSError:
                data = b""
            if not data:
                self.lines.put(None)
                return
            self._buffer += data
            *whole, self._buffer = self._buffer.split(b"\n")
            for line in whole:
                self.lines.put(line)

    def send(self, *messages: dict[str, Any] | bytes) -> None:
        data = b"".join(m if isinstance(m, bytes) else json.dumps({"jsonrpc": "2.0", **m}).encode() + b"\n"
                        for m in messages)
        os.write(self.write_fd, data)

    def recv(self, timeout: float = WAIT) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout)
        assert line is not None, "the runtime closed its end"
        message: dict[str, Any] = json.loads(line)
        return message

    def recv_until(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = WAIT) -> dict[str, Any]:
        """The first message (skipped ones first, then new ones) that ``predicate`` accepts;
        the others are kept for a later look (answers to concurrent requests come in any
        order)."""
        for n, message in enumerate(self._skipped):
            if predicate(message):
                return self._skipped.pop(n)
        while True:
            message = self.recv(timeout)
            if predicate(message):
                return message
            self._skipped.append(message)

    def nothing_more(self, within: float = 0.2) -> bool:
        """True if no line arrives within ``within`` seconds (used after the point where an
        answer would have been written: nothing more may come)."""
        try:
            self.lines.get(timeout=within)
        except queue.Empty:
            return True
        return False

    def close_write(self) -> None:
        """Go away: the runtime reads the end of input (this end still reads what it writes)."""
        os.close(self.write_fd)
        self.write_fd = -1  # (close() then closes nothing that reused the number)

    def close(self) -> None:
        for fd in (self.write_fd,):
            try:
                os.close(fd)
            except OSError:
                pass
        self._thread.join(WAIT)
        try:
            os.close(self.read_fd)
        except OSError:
            pass


class Runtime:
    """A connection under test, driven from the test thread with blocking calls."""

    name = "?"
    concurrent = True  # runs handlers concurrently with reading (not the selectors loop)

    def on_request(self, method: str, fn: Handler, params_type: Any = None) -> None:
        raise NotImplementedError

    def on_notification(self, method: str, fn: Handler, params_type: Any = None) -> None:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def request(self, method: str, params: Any = None, timeout: float | None = WAIT) -> Any:
        raise NotImplementedError

    def request_later(self, method: str, params: Any = None, timeout: float | None = WAIT) -> Future[Any]:
        """Send now; the Future gets the outcome (on the threaded runtimes)."""
        raise NotImplementedError

    def notify(self, method: str, params: Any = None) -> None:
        raise NotImplementedError

    def close(self, graceful: bool = False) -> None:
        raise NotImplementedError


def _pipes() -> tuple[tuple[int, int], tuple[int, int]]:
    """(ours: read, write), (peer's: read, write)."""
    to_us_r, to_us_w = os.pipe()
    to_peer_r, to_peer_w = os.pipe()
    return (to_us_r, to_peer_w), (to_peer_r, to_us_w)


class ThreadRuntime(Runtime):
    name = "threads"

    def __init__(self, ours: tuple[int, int], **options: Any) -> None:
        for fd in ours:
            os.set_blocking(fd, False)
        self.conn = Connection(FdTransport(*ours, description="under test"), name="threads", **options)

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Wait):
            return effect.event.wait(effect.timeout)
        return self.conn.request(effect.method, effect.params, effect.result_type, timeout=WAIT)

    def _wrap(self, fn: Handler) -> Handler:
        def run(*args: Any) -> Any:
            result = fn(*args)
            return effects.run(result, self._perform) if inspect.isgenerator(result) else result

        return run

    def on_request(self, method: str, fn: Handler, params_type: Any = None) -> None:
        self.conn.on_request(method, self._wrap(fn), params_type)

    def on_notification(self, method: str, fn: Handler, params_type: Any = None) -> None:
        self.conn.on_notification(method, self._wrap(fn), params_type)

    def start(self) -> None:
        self.conn.start()

    def request(self, method: str, params: Any = None, timeout: float | None = WAIT) -> Any:
        return self.conn.request(method, params, timeout=timeout)

    def request_later(self, method: str, params: Any = None, timeout: float | None = WAIT) -> Future[Any]:
        return self.conn.request_future(method, params, timeout=timeout)

    def notify(self, method: str, params: Any = None) -> None:
        self.conn.notify(method, params)

    def close(self, graceful: bool = False) -> None:
        self.conn.close(graceful=graceful, timeout=WAIT)  # idempotent


class AsyncioRuntime(Runtime):
    name = "asyncio"

    def __init__(self, ours: tuple[int, int], **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="asyncio-under-test", daemon=True)
        self.thread.start()
        self.ours = ours
        self.options = options

        async def make() -> AsyncConnection:
            return AsyncConnection(AsyncFdTransport(*ours, description="under test"), name="asyncio", **options)

        self.conn: AsyncConnection = self._call(make())

    def _call(self, coro: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Wait):
            return await self.loop.run_in_executor(None, effect.event.wait, effect.timeout)
        return await self.conn.request(effect.method, effect.params, effect.result_type, timeout=WAIT)

    def _wrap(self, fn: Handler) -> Handler:
        async def run(*args: Any) -> Any:
            result = fn(*args)
            return (await effects.run_awaiting(result, self._perform)) if inspect.isgenerator(result) else result

        return run

    def on_request(self, method: str, fn: Handler, params_type: Any = None) -> None:
        self.conn.on_request(method, self._wrap(fn), params_type)

    def on_notification(self, method: str, fn: Handler, params_type: Any = None) -> None:
        self.conn.on_notification(method, self._wrap(fn), params_type)

    def start(self) -> None:
        async def start() -> None:
            self.conn.start()

        self._call(start())

    def request(self, method: str, params: Any = None, timeout: float | None = WAIT) -> Any:
        return self._call(self.conn.request(method, params, timeout=timeout))

    def request_later(self, method: str, params: Any = None, timeout: float | None = WAIT) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(self.conn.request(method, params, timeout=timeout), self.loop)

    def notify(self, method: str, params: Any = None) -> None:
        self.loop.call_soon_threadsafe(self.conn.notify, method, params)

    def close(self, graceful: bool = False) -> None:
        if self.loop.is_closed():
            return
        try:
            self._call(self.conn.close(graceful=graceful, timeout=WAIT), WAIT * 2)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT)
            self.loop.close()


class SelectorsRuntime(Runtime):
    """The third runtime: one thread runs the loop and every handler inline; a request pumps
    the loop until its answer. The test thread hands it work (as with the asyncio loop's
    thread), so that the runtime itself stays single-threaded."""

    name = "selectors"
    concurrent = False

    def __init__(self, ours: tuple[int, int], **options: Any) -> None:
        self.conn = SelectorConnection(*ours, **options)
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="selectors-under-test", daemon=True)
        self.closed = False

    def _serve(self) -> None:
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                self.conn.pump(0.01)
                continue
            if job is None:
                return
            fn, future = job
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def _submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.jobs.put((fn, future))
        return future

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Wait):
            raise AssertionError("a blocking wait needs a runtime that runs handlers concurrently")
        return self.conn.request(effect.method, effect.params)

    def _wrap(self, fn: Handler) -> Handler:
        def run(*args: Any) -> Any:
            result = fn(*args)
            return effects.run(result, self._perform) if inspect.isgenerator(result) else result

        return run

    def on_request(self, method: str, fn: Handler, params_type: Any = None) -> None:
        self.conn.on_request(method, self._wrap(fn), params_type)

    def on_notification(self, method: str, fn: Handler, params_type: Any = None) -> None:
        self.conn.on_notification(method, self._wrap(fn), params_type)

    def start(self) -> None:
        self.thread.start()

    def request(self, method: str, params: Any = None, timeout: float | None = WAIT) -> Any:
        return self._submit(lambda: self.conn.request(method, params, timeout=timeout)).result(WAIT * 2)

    def request_later(self, method: str, params: Any = None, timeout: float | None = WAIT) -> Future[Any]:
        return self._submit(lambda: self.conn.request(method, params, timeout=timeout))

    def notify(self, method: str, params: Any = None) -> None:
        self._submit(lambda: self.conn.notify(method, params)).result(WAIT)

    def close(self, graceful: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        if self.thread.is_alive():
            self.jobs.put(None)
            self.thread.join(WAIT)
        self.conn.close()


RUNTIMES: dict[str, Callable[..., Runtime]] = {
    "threads": ThreadRuntime,
    "asyncio": AsyncioRuntime,
    "selectors": SelectorsRuntime,
}


def make_runtime(name: str, **options: Any) -> tuple[Runtime, RawPeer]:
    ours, theirs = _pipes()
    runtime = RUNTIMES[name](ours, **options)
    return runtime, RawPeer(*theirs)


Plan = Generator[Any, Any, Any]
