"""Shared pieces of the fault, fuzz, load and secrets tests.

Nothing here sleeps: waits are on queues, events and joins, each with a timeout, so a test
that would hang fails instead.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from acp.transport.base import Transport

WAIT = 10.0

LOAD_FULL = os.environ.get("ACP_LOAD", "").lower() == "full"
"""``ACP_LOAD=full`` (``make test-load``) runs the fault/load tests at their full sizes."""


def size(reduced: int, full: int) -> int:
    """The reduced size under ``make test``, the full one under ``ACP_LOAD=full``."""
    return full if LOAD_FULL else reduced


class RawPeer:
    """The far end of a transport driven by hand: raw bytes out, parsed JSON lines in.

    A daemon thread reads the transport and queues every line (parsed when it is JSON, else the
    raw bytes), so :meth:`recv` can wait with a timeout instead of blocking forever. The thread
    ends when the transport reaches EOF or is closed (:meth:`close` joins it).
    """

    def __init__(self, transport: Transport, name: str = "raw-peer") -> None:
        self.transport = transport
        self.lines: queue.Queue[Any] = queue.Queue()
        self.eof = threading.Event()
        self.other: list[Any] = []  # what request() read past while waiting for its answer
        self._thread = threading.Thread(target=self._read, name=name, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self.transport.read()
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    try:
                        self.lines.put(json.loads(line))
                    except ValueError:
                        self.lines.put(line)
        finally:
            self.eof.set()

    def send(self, data: bytes | dict[str, Any]) -> None:
        """Write raw bytes as they are, or a dict as one JSON line."""
        if isinstance(data, dict):
            data = json.dumps(data, separators=(",", ":")).encode() + b"\n"
        self.transport.write(data)

    def recv(self, timeout: float = WAIT) -> Any:
        """The next line; AssertionError when none comes within ``timeout``."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"nothing received within {timeout} s") from None

    def recv_until(self, predicate: Any, timeout: float = WAIT) -> tuple[Any, list[Any]]:
        """Read until ``predicate(msg)``; returns (that message, every message before it)."""
        deadline = time.monotonic() + timeout
        before: list[Any] = []
        while True:
            msg = self.recv(max(0.0, deadline - time.monotonic()))
            if predicate(msg):
                return msg, before
            before.append(msg)

    def request(self, msg_id: Any, method: str, params: Any = None, timeout: float = WAIT) -> Any:
        """Send a request and return its answer (a dict with result or error); everything
        else read meanwhile is kept in ``self.other``."""
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, **({} if params is None else {"params": params})})
        answer, before = self.recv_until(lambda m: isinstance(m, dict) and m.get("id") == msg_id and "method" not in m, timeout)
        self.other.extend(before)
        return answer

    def nothing_pending(self) -> bool:
        """True when no line is waiting in the queue right now."""
        return self.lines.empty()

    def close(self) -> None:
        self.transport.close()
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), "raw peer reader did not stop"


def percentiles(samples: Iterable[float]) -> dict[str, float]:
    """p50/p90/p99/max (and count, mean) of latencies in seconds, reported in milliseconds."""
    values = sorted(samples)
    if not values:
        return {"count": 0}

    def pick(q: float) -> float:
        index = min(len(values) - 1, max(0, int(round(q * len(values))) - 1))
        return values[index] * 1000.0

    return {
        "count": len(values),
        "mean_ms": sum(values) / len(values) * 1000.0,
        "p50_ms": pick(0.50),
        "p90_ms": pick(0.90),
        "p99_ms": pick(0.99),
        "max_ms": values[-1] * 1000.0,
    }


def new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not in ``before``."""
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


def wait_for_threads(before: set[threading.Thread], allowed: Iterable[threading.Thread], timeout: float = WAIT) -> list[threading.Thread]:
    """Join every new thread not in ``allowed``; return those still alive after ``timeout``."""
    allowed_set = set(allowed)
    deadline = time.monotonic() + timeout
    for thread in new_threads(before):
        if thread not in allowed_set and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in new_threads(before) if t not in allowed_set and t is not threading.current_thread()]


class ManualCancel:
    """A CancelSource (``on_cancel(fn) -> unregister``) that the test fires by hand."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []
        self.registered = threading.Event()

    def on_cancel(self, callback: Any) -> Any:
        self.callbacks.append(callback)
        self.registered.set()
        return lambda: None

    def fire(self) -> None:
        for callback in self.callbacks:
            callback()


def in_thread(fn: Callable[[], Any], name: str = "test-call") -> tuple[Future[Any], threading.Thread]:
    """Run ``fn`` on a new thread; its outcome lands in the returned Future."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return future, thread


def outcome(future: Future[Any], timeout: float = WAIT) -> Any:
    """The result or the exception of ``future`` (an exception instance is returned, not raised)."""
    try:
        return future.result(timeout)
    except Exception as exc:  # noqa: BLE001 - the tests look at the type
        if isinstance(exc, TimeoutError) and not future.done():
            raise AssertionError(f"the call did not end within {timeout} s") from None
        return exc
