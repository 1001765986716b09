"""Plans: client calls written once, driven by a blocking or an awaiting runtime.

A plan (:mod:`acp.effects`, shared with the agent's calls to the client) is a generator that
does no I/O: it yields *effects* (:class:`~acp.effects.Send` this request; here also send this
notification, call this handler, explain why the connection is gone, close the client) and is
sent back their results. :class:`BlockingCalls` (``SyncClient``) performs each effect and blocks;
:class:`AwaitableCalls` (``AsyncClient``) awaits it. A failure of an effect is thrown into the
plan at its ``yield``, so the plan's ``try``/``finally`` blocks (the turn bookkeeping of
``prompt``) run on both runtimes alike, task cancellation included. A call that is just one
checked request returns its :class:`Send` instead of a plan (see :data:`Call`): the same
description for both runtimes, with no generator to drive on the hot path.

:class:`operation` turns a plan method into the public method of each runtime, with its own
static type: ``client.new_session(...)`` returns a ``NewSessionResponse`` on ``SyncClient`` and
an awaitable of one on ``AsyncClient`` (same name, parameters and docstring).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar, Union, overload

from typing_extensions import Concatenate, ParamSpec

from ..effects import Send, run, run_awaiting
from ..errors import ConnectionClosedError

__all__ = [
    "AwaitableCalls",
    "BlockingCalls",
    "Close",
    "Effect",
    "Explain",
    "Invoke",
    "Notify",
    "Plan",
    "Send",
    "Call",
    "explained",
    "operation",
]

P = ParamSpec("P")
R = TypeVar("R")


class Notify:
    """Send a notification (closed: the runtime's explanation is raised)."""

    __slots__ = ("method", "params")

    def __init__(self, method: str, params: Any) -> None:
        self.method = method
        self.params = params


class Explain:
    """Resume the plan with the ``ConnectionClosedError`` saying why ``method`` cannot go out."""

    __slots__ = ("method",)

    def __init__(self, method: str) -> None:
        self.method = method


class Invoke:
    """Call a user's handler ``fn(*args)`` and resume with what it returns (the asyncio
    runtime awaits an ``async def`` one, and runs a plain one on its executor)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args


class Close:
    """Close the client (an ``initialize`` answered with a version we do not speak)."""

    __slots__ = ()


Effect = Union[Send, Notify, Explain, Invoke, Close]


def explained(effect: Effect, exc: ConnectionClosedError) -> bool:
    """Whether the runtime replaces ``exc``, raised by a ``Send`` or ``Notify``, with its own
    explanation of why the connection is gone."""
    return not (type(effect) is Send and effect.keep_subclass and type(exc) is not ConnectionClosedError)
#: A call's plan (see :mod:`acp.effects`): yields effects, is sent their results, returns the
#: call's result.
Plan = Generator[Effect, Any, R]
#: What an operation returns: a plan, or (the common case of a call that is one request) the
#: ``Send`` itself, which the runtime performs with no generator to create and resume.
Call = Union[Send, Plan[R]]


class BlockingCalls:
    """Runs plans by blocking on each effect (the threaded runtime)."""

    def _perform(self, effect: Effect) -> Any:  # pragma: no cover - the runtime's
        raise NotImplementedError

    def _run(self, plan: Plan[R]) -> R:
        return run(plan, self._perform)

    def _settle(self, effect: Invoke, finish: Callable[[Invoke, Any, BaseException | None], R]) -> R:
        """Perform one effect and return ``finish(effect, result, None)``, or on failure
        ``finish(effect, None, error)`` (which raises): a one-effect plan with no generator."""
        try:
            value = self._perform(effect)
        except BaseException as exc:
            return finish(effect, None, exc)
        return finish(effect, value, None)

    def _bind(self, plan: Callable[..., Call[Any]]) -> Callable[..., Any]:
        @functools.wraps(plan)
        def call(*args: Any, **kwargs: Any) -> Any:
            work = plan(self, *args, **kwargs)
            if type(work) is Send:  # one request: its outcome is the call's
                return self._perform(work)
            return run(work, self._perform)  # type: ignore[arg-type]  # a Plan

        return call


class AwaitableCalls:
    """Runs plans by awaiting each effect (the asyncio runtime)."""

    async def _perform(self, effect: Effect) -> Any:  # pragma: no cover - the runtime's
        raise NotImplementedError

    async def _run(self, plan: Plan[R]) -> R:
        return await run_awaiting(plan, self._perform)

    async def _settle(self, effect: Invoke, finish: Callable[[Invoke, Any, BaseException | None], R]) -> R:
        """Perform one effect and return ``finish(effect, result, None)``, or on failure
        ``finish(effect, None, error)`` (which raises): a one-effect plan with no generator."""
        try:
            value = await self._perform(effect)
        except BaseException as exc:  # CancelledError too: finish re-raises it
            return finish(effect, None, exc)
        return finish(effect, value, None)

    def _bind(self, plan: Callable[..., Call[Any]]) -> Callable[..., Any]:
        @functools.wraps(plan)
        async def call(*args: Any, **kwargs: Any) -> Any:
            work = plan(self, *args, **kwargs)
            if type(work) is Send:  # one request: its outcome is the call's
                return await self._perform(work)
            return await self._run(work)  # type: ignore[arg-type]  # a Plan

        return call


class operation(Generic[P, R]):
    """A plan method that is a blocking method on a :class:`BlockingCalls` and an ``async``
    one on an :class:`AwaitableCalls` (same name, parameters and docstring). The bound
    method is made on first use and kept on the instance."""

    def __init__(self, plan: Callable[Concatenate[Any, P], Call[R]]) -> None:
        self.plan = plan
        self.name = plan.__name__
        self._signature: inspect.Signature | None = None
        functools.update_wrapper(self, plan)  # type: ignore[arg-type]  # docs, name, __wrapped__

    def __repr__(self) -> str:
        return f"<operation {self.plan.__qualname__}>"

    def bound_signature(self) -> inspect.Signature:
        """The signature of the bound method (``self`` dropped; the result is the runtime's)."""
        if self._signature is None:
            signature = inspect.signature(self.plan)
            self._signature = signature.replace(
                parameters=list(signature.parameters.values())[1:], return_annotation=inspect.Signature.empty
            )
        return self._signature

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> operation[P, R]: ...
    @overload
    def __get__(self, obj: BlockingCalls, owner: type | None = None) -> Callable[P, R]: ...
    @overload
    def __get__(
        self, obj: AwaitableCalls, owner: type | None = None
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        bound = obj._bind(self.plan)
        bound.__signature__ = self.bound_signature()  # for help() and IDEs: not the plan's
        obj.__dict__[self.name] = bound  # later lookups find it without this descriptor
        return bound
