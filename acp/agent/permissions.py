"""``ask_permission`` / ``ask_choice``: permission requests that announce a real tool call.

Both first send a ``tool_call`` update (status ``pending``) so a client that looks the tool
call up by id finds it, then ``session/request_permission``, then settle the tool call with a
``tool_call_update``: ``completed`` once an allowing option was chosen, ``failed`` when a
rejecting one was (``reject_once`` / ``reject_always``: an editor must not show a denied edit as
done) or when cancelled (by the client's ``cancelled`` outcome or by this turn's cancellation).
Written as steps (see :mod:`acp.agent.client_calls`) that both runtimes drive.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from .. import schema
from ..errors import INTERNAL_ERROR, RequestError
from .client_calls import CallsToClient, Steps

__all__ = ["ALLOW_OPTION_ID", "REJECT_OPTION_ID", "ask_permission", "ask_choice", "new_tool_call_id"]

ALLOW_OPTION_ID = "allow"
REJECT_OPTION_ID = "reject"


_REJECTING = frozenset({schema.PermissionOptionKinds.REJECT_ONCE, schema.PermissionOptionKinds.REJECT_ALWAYS})


class _Updates(Protocol):
    session_id: str

    def send_update(self, update: schema.SessionUpdate) -> bool: ...


def new_tool_call_id() -> str:
    """A fresh, unique tool call id."""
    return f"call_{uuid.uuid4().hex[:16]}"


def _ask(
    updates: _Updates,
    client: CallsToClient,
    title: str,
    kind: str,
    options: list[schema.PermissionOption],
    content: list[schema.ToolCallContent] | None,
    locations: list[schema.ToolCallLocation] | None,
    raw_input: Any,
    name: str | None = None,
) -> Steps[tuple[str, str | None]]:
    """Announce, ask, settle. Returns (tool_call_id, chosen option id or None if cancelled);
    an option id that was never offered raises -32603 naming it (after settling as failed)."""
    tool_call_id = new_tool_call_id()
    updates.send_update(
        schema.ToolCall(
            tool_call_id=tool_call_id,
            title=title,
            name=name,
            kind=kind,
            status=schema.ToolCallStatuses.PENDING,
            content=content,
            locations=locations,
            raw_input=raw_input,
        )
    )
    try:
        response = yield from client._request_permission(
            schema.RequestPermissionRequest(
                session_id=updates.session_id,
                tool_call=schema.ToolCallUpdate(
                    tool_call_id=tool_call_id,
                    title=title,
                    name=name,
                    kind=kind,
                    status=schema.ToolCallStatuses.PENDING,
                ),
                options=options,
            )
        )
    except BaseException:
        _settle(updates, tool_call_id, schema.ToolCallStatuses.FAILED)
        raise
    outcome = response.outcome
    if isinstance(outcome, schema.SelectedPermissionOutcome):
        offered = {option.option_id for option in options}
        if outcome.option_id not in offered:
            _settle(updates, tool_call_id, schema.ToolCallStatuses.FAILED)
            raise RequestError(
                INTERNAL_ERROR,
                f"the client chose permission option {outcome.option_id!r}, which was never "
                f"offered (offered: {sorted(offered)})",
                {"optionId": outcome.option_id},
            )
        rejected = any(
            option.option_id == outcome.option_id and option.kind in _REJECTING for option in options
        )
        _settle(updates, tool_call_id, schema.ToolCallStatuses.FAILED if rejected else schema.ToolCallStatuses.COMPLETED)
        return tool_call_id, outcome.option_id
    # "cancelled", or an outcome this SDK does not know: not a choice.
    _settle(updates, tool_call_id, schema.ToolCallStatuses.FAILED)
    return tool_call_id, None


def _settle(updates: _Updates, tool_call_id: str, status: str) -> None:
    updates.send_update(schema.ToolCallProgress(tool_call_id=tool_call_id, status=status))


def ask_permission(
    updates: _Updates,
    client: CallsToClient,
    action: str,
    kind: str = schema.ToolKinds.OTHER,
    content: list[schema.ToolCallContent] | None = None,
    locations: list[schema.ToolCallLocation] | None = None,
    raw_input: Any = None,
    *,
    name: str | None = None,
) -> Steps[bool]:
    """True only when the client chose "allow"."""
    options = [
        schema.PermissionOption(
            option_id=ALLOW_OPTION_ID, name="Allow", kind=schema.PermissionOptionKinds.ALLOW_ONCE
        ),
        schema.PermissionOption(
            option_id=REJECT_OPTION_ID, name="Reject", kind=schema.PermissionOptionKinds.REJECT_ONCE
        ),
    ]
    _, chosen = yield from _ask(updates, client, action, kind, options, content, locations, raw_input, name)
    return chosen == ALLOW_OPTION_ID


def ask_choice(
    updates: _Updates, client: CallsToClient, question: str, choices: Sequence[str], *, name: str | None = None
) -> Steps[str | None]:
    """The text of the option the client chose, or None when cancelled."""
    if not choices:
        raise ValueError("ask_choice() needs at least one option")
    options = [
        schema.PermissionOption(
            option_id=str(index), name=choice, kind=schema.PermissionOptionKinds.ALLOW_ONCE
        )
        for index, choice in enumerate(choices)
    ]
    _, chosen = yield from _ask(updates, client, question, schema.ToolKinds.OTHER, options, None, None, None, name)
    return None if chosen is None else choices[int(chosen)]
