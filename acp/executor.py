"""The SDK-owned handler executor: a thread pool that can also run work without a Future.

:class:`HandlerPool` is a regular :class:`concurrent.futures.Executor` (``submit`` returns a
Future, ``shutdown`` waits), so it behaves like ``ThreadPoolExecutor``. The connection engine
uses its extra :meth:`HandlerPool.execute`, which skips the Future: the engine answers the peer
itself, so a Future per inbound request would only cost time. Threads start on demand, are named
``<prefix>-N`` and stay until shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from queue import SimpleQueue
from typing import Any, TypeVar

from typing_extensions import ParamSpec

__all__ = ["HandlerPool", "DEFAULT_MAX_WORKERS"]

_log = logging.getLogger("acp.executor")

P = ParamSpec("P")
T = TypeVar("T")

# Handlers block (a prompt turn waits on the client for minutes), so the pool must be wide;
# threads are only started when every existing one is busy.
DEFAULT_MAX_WORKERS = 256

_Work = tuple[Callable[..., Any], tuple[Any, ...]]


class HandlerPool(Executor):
    """A thread pool with a Future-free fast path (:meth:`execute`)."""

    def __init__(self, max_workers: int = DEFAULT_MAX_WORKERS, thread_name_prefix: str = "acp-handler") -> None:
        if max_workers <= 0:
            raise ValueError("max_workers must be positive")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._queue: SimpleQueue[_Work | None] = SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shutdown = False

    def execute(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a pool thread; exceptions are logged, nothing is returned."""
        if self._shutdown:
            raise RuntimeError("cannot schedule new work after shutdown")
        self._queue.put((fn, args))
        # An idle thread will take it; otherwise start one (up to the bound).
        if not self._idle.acquire(blocking=False):
            self._grow()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Standard Executor.submit: run ``fn`` on a pool thread, return its Future."""
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

        self.execute(run)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the threads once queued work is done (``wait`` joins them)."""
        with self._lock:
            if not self._shutdown:
                self._shutdown = True
                for _ in self._threads:
                    self._queue.put(None)
            threads = list(self._threads)
        if wait:
            current = threading.current_thread()
            for thread in threads:
                if thread is not current:
                    thread.join()

    def join(self, timeout: float | None) -> bool:
        """After shutdown: wait for the threads until ``timeout``; True when all have ended."""
        current = threading.current_thread()
        # One deadline for all: blocked handlers must not each get the whole timeout.
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in list(self._threads):
            if thread is not current:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads if t is not current)

    def _grow(self) -> None:
        with self._lock:
            if self._shutdown or len(self._threads) >= self._max_workers:
                return
            thread = threading.Thread(
                target=self._worker, name=f"{self._prefix}-{len(self._threads) + 1}", daemon=True
            )
            self._threads.append(thread)
        thread.start()

    def _worker(self) -> None:
        get = self._queue.get
        while True:
            work = get()
            if work is None:
                return
            fn, args = work
            try:
                fn(*args)
            except BaseException:
                _log.exception("unhandled exception in handler work")
            del work, fn, args
            self._idle.release()
