"""A ready-made ``session/request_permission`` handler: rules by tool kind, remembered choices.

::

    def ask_user(request, ctx):            # your UI: return an offered option id (or None)
        ...

    policy = PermissionPolicy(allow={"read", "search"}, reject={"delete"}, ask=ask_user)
    builder.request_permission_handler(policy)

How a request is answered, in order:

1. ``ctx.cancelled`` is set (the turn was cancelled): outcome ``cancelled``, as the spec requires.
2. A remembered choice for this session and tool kind (the user earlier picked an
   ``allow_always`` / ``reject_always`` option for that kind in this session): the offered option
   of that same kind is selected; if the agent offers none, the ``*_once`` option of the same
   decision is; if neither is offered the request goes on to step 4 (``ask``) / 5 (default).
3. The tool kind is in ``allow`` (or ``reject``): the offered ``allow_once`` (``reject_once``)
   option is selected, else the ``*_always`` one (static rules prefer "once", so that the agent
   does not memorise a decision the policy may later change); none offered: step 4 / 5.
4. ``ask(request, ctx)`` is called; it returns an offered option id (``str``), a complete
   :class:`RequestPermissionResponse`, or ``None`` for "cancelled". When the chosen option is an
   ``allow_always`` / ``reject_always`` one and the tool kind is known, the choice is remembered for
   that session and kind (never across sessions). If the turn is cancelled while ``ask`` runs, the
   outcome is ``cancelled`` whatever it returned. An id that was not offered is a bug in ``ask``
   and is answered with the default instead (logged as a warning).
5. ``default``: ``"reject"`` (select a reject option), ``"allow"`` or ``"cancel"``. When no option of
   the needed decision is offered, the outcome is ``cancelled`` (which never grants anything).

A tool call without ``kind`` matches no ``allow`` / ``reject`` rule and nothing is remembered for
it: the spec asks clients to be stricter when details are missing, so it always goes to ``ask`` or
the default.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Literal, Union

from ..schema import (
    CancelledPermissionOutcome,
    PermissionOption,
    PermissionOptionKinds,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SelectedPermissionOutcome,
)

__all__ = ["PermissionPolicy", "AskCallback", "Decision"]

logger = logging.getLogger("acp.client.permissions")

Decision = Literal["allow", "reject"]
"""A remembered or configured decision."""

AskCallback = Callable[[RequestPermissionRequest, Any], Union[str, RequestPermissionResponse, None]]
"""``ask(request, ctx)``: an offered option id, a full response, or ``None`` (cancelled)."""

_ALLOW_ONCE = PermissionOptionKinds.ALLOW_ONCE
_ALLOW_ALWAYS = PermissionOptionKinds.ALLOW_ALWAYS
_REJECT_ONCE = PermissionOptionKinds.REJECT_ONCE
_REJECT_ALWAYS = PermissionOptionKinds.REJECT_ALWAYS
_ALWAYS: dict[str, Decision] = {_ALLOW_ALWAYS: "allow", _REJECT_ALWAYS: "reject"}
_ONCE_FIRST: dict[Decision, tuple[str, str]] = {
    "allow": (_ALLOW_ONCE, _ALLOW_ALWAYS),
    "reject": (_REJECT_ONCE, _REJECT_ALWAYS),
}
_ALWAYS_FIRST: dict[Decision, tuple[str, str]] = {
    "allow": (_ALLOW_ALWAYS, _ALLOW_ONCE),
    "reject": (_REJECT_ALWAYS, _REJECT_ONCE),
}


def _is_cancelled(ctx: Any) -> bool:
    event = getattr(ctx, "cancelled", None)
    return bool(event is not None and event.is_set())


def _cancelled() -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=CancelledPermissionOutcome())


def _selected(option: PermissionOption) -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=SelectedPermissionOutcome(option_id=option.option_id))


def _pick(options: Iterable[PermissionOption], kinds: tuple[str, ...]) -> PermissionOption | None:
    """The first offered option whose kind is ``kinds[0]``, else ``kinds[1]``..."""
    options = list(options)
    for kind in kinds:
        for option in options:
            if option.kind == kind:
                return option
    return None


class PermissionPolicy:
    """A ``session/request_permission`` handler deciding by tool kind, remembering "always".

    Args:
        allow: tool kinds (``"read"``, ``"search"``...) allowed without asking.
        reject: tool kinds rejected without asking (must not overlap ``allow``).
        ask: called for everything else (see the module documentation); ``None``: use ``default``.
        default: the answer when there is no rule, no remembered choice and no ``ask``:
            ``"reject"`` (default), ``"allow"`` or ``"cancel"``.

    Call it as ``policy(request, ctx)``; it is thread-safe (``ask`` itself runs unlocked).
    """

    def __init__(
        self,
        *,
        allow: Iterable[str] = (),
        reject: Iterable[str] = (),
        ask: AskCallback | None = None,
        default: Literal["reject", "allow", "cancel"] = "reject",
    ) -> None:
        if isinstance(allow, str) or isinstance(reject, str):
            raise TypeError("allow and reject are collections of tool kinds, not a single string")
        self._allow = frozenset(allow)
        self._reject = frozenset(reject)
        both = self._allow & self._reject
        if both:
            raise ValueError(f"tool kinds both allowed and rejected: {sorted(both)}")
        if default not in ("reject", "allow", "cancel"):
            raise ValueError("default must be 'reject', 'allow' or 'cancel'")
        self._ask = ask
        self._default = default
        self._lock = threading.Lock()
        self._remembered: dict[str, dict[str, Decision]] = {}

    # ---- remembered choices ----

    def remembered(self, session_id: str) -> dict[str, Decision]:
        """A copy of the choices remembered for one session: tool kind -> decision."""
        with self._lock:
            return dict(self._remembered.get(session_id, {}))

    def remember(self, session_id: str, kind: str, decision: Decision) -> None:
        """Remember ``decision`` for ``kind`` in ``session_id`` (as an "always" answer would)."""
        if decision not in ("allow", "reject"):
            raise ValueError("decision must be 'allow' or 'reject'")
        with self._lock:
            self._remembered.setdefault(session_id, {})[kind] = decision

    def forget(self, session_id: str | None = None) -> None:
        """Forget the remembered choices of one session, or of every session."""
        with self._lock:
            if session_id is None:
                self._remembered.clear()
            else:
                self._remembered.pop(session_id, None)

    # ---- the handler ----

    def __call__(self, request: RequestPermissionRequest, ctx: Any) -> RequestPermissionResponse:
        """Answer one ``session/request_permission`` request."""
        return self.request_permission(request, ctx)

    def request_permission(
        self, request: RequestPermissionRequest, ctx: Any
    ) -> RequestPermissionResponse:
        """Answer one ``session/request_permission`` request (same as calling the policy)."""
        if _is_cancelled(ctx):
            return _cancelled()
        session_id = request.session_id
        kind = request.tool_call.kind
        options = request.options
        if kind is not None:
            with self._lock:
                remembered = self._remembered.get(session_id, {}).get(kind)
            if remembered is not None:
                option = _pick(options, _ALWAYS_FIRST[remembered])
                if option is not None:
                    logger.debug("%s %s: remembered %s", session_id, kind, remembered)
                    return _selected(option)
            rule: Decision | None = (
                "allow" if kind in self._allow else "reject" if kind in self._reject else None
            )
            if rule is not None:
                option = _pick(options, _ONCE_FIRST[rule])
                if option is not None:
                    logger.debug("%s %s: rule %s", session_id, kind, rule)
                    return _selected(option)
        if self._ask is not None:
            return self._asked(request, ctx)
        return self._fallback(options)

    def _asked(self, request: RequestPermissionRequest, ctx: Any) -> RequestPermissionResponse:
        assert self._ask is not None
        answer = self._ask(request, ctx)
        if _is_cancelled(ctx) or answer is None:
            return _cancelled()
        if isinstance(answer, RequestPermissionResponse):
            outcome = answer.outcome
            if not isinstance(outcome, SelectedPermissionOutcome):
                return answer
            option_id = outcome.option_id
        else:
            option_id = answer
        chosen = next((o for o in request.options if o.option_id == option_id), None)
        if chosen is None:
            logger.warning("permission ask callback chose an option that was not offered")
            return self._fallback(request.options)
        kind = request.tool_call.kind
        decision = _ALWAYS.get(chosen.kind)
        if decision is not None and kind is not None:
            self.remember(request.session_id, kind, decision)
            logger.debug("%s %s: remembering %s", request.session_id, kind, decision)
        return answer if isinstance(answer, RequestPermissionResponse) else _selected(chosen)

    def _fallback(self, options: list[PermissionOption]) -> RequestPermissionResponse:
        if self._default == "cancel":
            return _cancelled()
        option = _pick(options, _ONCE_FIRST[self._default])
        return _selected(option) if option is not None else _cancelled()
