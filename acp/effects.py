"""Calls written once, performed by either runtime: the request effect and the two drivers.

Both facades write their multi-step calls as *plans*: generators that do no I/O, yield an
effect (above all :class:`Send`: "send this request, resume me with its typed result"), are
sent back its result and have its failure thrown in, so the ``try``/``finally`` they hold
(turn bookkeeping, releasing a terminal) runs the same on both runtimes. The client's calls to
the agent (``acp.client``) and the agent's calls to the client (``acp.agent``) use the same
effect and the same drivers: :func:`run` blocks on each effect (the threaded runtime),
:func:`run_awaiting` awaits it (asyncio). A facade adds its own effect kinds and says how each
is performed; this module knows no runtime and no facade.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar, Union

import msgspec

if TYPE_CHECKING:  # asyncio itself is imported by run_awaiting only: a sync script never loads it
    import asyncio

__all__ = ["DEFAULT", "CancelledAfter", "Plan", "Send", "run", "run_awaiting"]

R = TypeVar("R")

#: A :class:`Send` timeout meaning "the connection's request timeout".
DEFAULT: Any = object()

#: A plan: yields effects, is sent their results, returns the call's result.
Plan = Generator[Any, Any, R]


class Send(msgspec.Struct):
    """Send the request ``method`` and resume the plan with its typed result.

    ``timeout``: seconds, None (wait forever) or :data:`DEFAULT`. The agent side's turn
    options: ``abandon`` (a cancelled turn abandons the call: ``$/cancel_request``; False for a
    call whose answer must not be lost, a created terminal's id) and ``refuse`` (a turn already
    cancelled refuses it before sending; False for clean-up). The client side's:
    ``keep_subclass`` (a remote refusal's ``ConnectionClosedError`` subclass is kept, with its
    HTTP status).
    A Struct: one is made per call, and msgspec builds it in C (no Python ``__init__`` to run).
    """

    method: str
    params: Any
    result_type: Any
    timeout: Union[float, None] = DEFAULT  # (DEFAULT: the connection's request timeout)
    abandon: bool = True
    refuse: bool = True
    keep_subclass: bool = False

    def __repr__(self) -> str:  # no params: a payload is logged at DEBUG only
        return f"Send({self.method!r}, timeout={self.timeout!r}, abandon={self.abandon}, refuse={self.refuse})"


class CancelledAfter(BaseException):
    """Raised by an awaiting ``perform`` whose effect completed although its task was
    cancelled meanwhile (the answer must not be lost): :func:`run_awaiting` sends ``value``
    into the plan and re-raises ``cancelled`` once the plan is done."""

    def __init__(self, cancelled: asyncio.CancelledError, value: Any) -> None:
        super().__init__(cancelled, value)
        self.cancelled = cancelled
        self.value = value


def run(plan: Plan[R], perform: Callable[[Any], Any]) -> R:
    """Drive ``plan`` to its end, blocking on each effect: what ``perform(effect)`` returns is
    sent back, what it raises is thrown in (the plan may handle it)."""
    send = plan.send
    try:
        effect = send(None)
        while True:
            try:
                value = perform(effect)
            except BaseException as exc:
                effect = plan.throw(exc)
            else:
                effect = send(value)
    except StopIteration as stop:  # the plan returned
        result: R = stop.value
        return result


# asyncio's CancelledError, imported by the first run_awaiting (a sync script never loads
# asyncio) and kept: an import statement in run_awaiting cost ~1 µs per plan.
_cancelled_error: type[asyncio.CancelledError] | None = None


def _asyncio_cancelled_error() -> type[asyncio.CancelledError]:
    global _cancelled_error
    # (asyncio.exceptions is a module, not the package: no _handle_fromlist)
    from asyncio.exceptions import CancelledError  # loaded already: an event loop runs the plan

    _cancelled_error = CancelledError
    return CancelledError


async def run_awaiting(
    plan: Plan[R],
    perform: Callable[[Any], Awaitable[Any]],
    cancelled_as: Callable[[Any], BaseException] | None = None,
) -> R:
    """Drive ``plan`` to its end, awaiting each effect. A cancellation of the awaiting task is
    thrown into the plan as it is, or, with ``cancelled_as``, as ``cancelled_as(effect)`` (so
    that the plan's clean-up is the threaded runtime's) and re-raised once the plan is done."""
    CancelledError = _cancelled_error or _asyncio_cancelled_error()  # noqa: N806  # the class
    send = plan.send
    cancelled: asyncio.CancelledError | None = None
    try:
        effect = send(None)
        while True:
            try:
                value = await perform(effect)
            except CancelledAfter as late:
                cancelled = late.cancelled
                effect = send(late.value)
            except CancelledError as exc:
                if cancelled_as is None:
                    effect = plan.throw(exc)
                else:
                    cancelled = exc
                    effect = plan.throw(cancelled_as(effect))
            except BaseException as exc:
                effect = plan.throw(exc)
            else:
                effect = send(value)
    except StopIteration as stop:  # the plan returned
        if cancelled is not None:
            raise cancelled from None
        result: R = stop.value
        return result
    except BaseException:
        if cancelled is not None:
            raise cancelled from None
        raise
