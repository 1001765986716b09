"""Blocking work from the event loop: run a plain function on an executor, await its result.

The asyncio runtime never runs a blocking handler on the loop. With the SDK's own
:class:`~acp.executor.HandlerPool`, work runs without a concurrent Future (``run_in_executor``
would chain one to the loop's): one loop Future, completed from the pool thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

__all__ = ["run_on"]

T = TypeVar("T")


async def run_on(loop: asyncio.AbstractEventLoop, executor: Executor, own_pool: bool,
                 fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    """Run the blocking ``fn(*args)`` on ``executor`` and await its result. ``own_pool``: it is
    the SDK's HandlerPool (its Future-free ``execute`` is used). Cancelling the awaiting task
    does not stop ``fn`` (a thread cannot be interrupted): its result is then dropped."""
    if own_pool:
        waiter: asyncio.Future[T] = loop.create_future()
        executor.execute(_run_and_report, loop, waiter, fn, args)  # type: ignore[attr-defined]
        return await waiter
    return await loop.run_in_executor(executor, fn, *args)


def _run_and_report(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[Any], fn: Callable[..., Any],
                    args: tuple[Any, ...]) -> None:
    """On a pool thread: run ``fn(*args)`` and hand its outcome to ``waiter`` on the loop."""
    outcome: Callable[[asyncio.Future[Any], Any], None]
    try:
        value = fn(*args)
        outcome = _set_result
    except BaseException as exc:  # handed over whole, as run_in_executor would
        value, outcome = exc, _set_exception
    try:
        loop.call_soon_threadsafe(outcome, waiter, value)
    except RuntimeError:  # the loop is closed: nobody waits any more
        pass


def _set_result(waiter: asyncio.Future[Any], value: Any) -> None:
    if not waiter.done():  # cancelled meanwhile
        waiter.set_result(value)


def _set_exception(waiter: asyncio.Future[Any], exc: BaseException) -> None:
    if not waiter.done():
        waiter.set_exception(exc)
