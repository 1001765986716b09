"""PermissionPolicy: rules by tool kind, remembered "always" choices per session, cancellation."""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import pytest

from acp.client.permissions import PermissionPolicy
from acp.schema import (
    CancelledPermissionOutcome,
    PermissionOption,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SelectedPermissionOutcome,
    ToolCallUpdate,
    decoder,
    encode,
)

ALL = [
    PermissionOption(option_id="ao", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="aa", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="ro", name="Reject", kind="reject_once"),
    PermissionOption(option_id="ra", name="Always reject", kind="reject_always"),
]
ONCE_ONLY = [ALL[0], ALL[2]]


class Ctx:
    def __init__(self, session_id: str = "s1") -> None:
        self.session_id = session_id
        self.cancelled = threading.Event()


def req(
    kind: str | None, session_id: str = "s1", options: list[PermissionOption] | None = None
) -> RequestPermissionRequest:
    return RequestPermissionRequest(
        session_id=session_id,
        tool_call=ToolCallUpdate(tool_call_id="call_1", kind=kind, title="t"),
        options=ALL if options is None else options,
    )


def chosen(response: RequestPermissionResponse) -> str | None:
    """The selected option id, or None for "cancelled"."""
    outcome = response.outcome
    if isinstance(outcome, CancelledPermissionOutcome):
        return None
    assert isinstance(outcome, SelectedPermissionOutcome)
    return outcome.option_id


class Asker:
    """An ask callback that answers from a script and records what it was asked."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[RequestPermissionRequest] = []

    def __call__(self, request: RequestPermissionRequest, ctx: Any) -> Any:
        self.asked.append(request)
        return self.answers.pop(0)


def ask(
    policy: PermissionPolicy, request: RequestPermissionRequest, ctx: Ctx | None = None
) -> str | None:
    return chosen(policy(request, ctx or Ctx(request.session_id)))


def test_allow_and_reject_by_kind() -> None:
    policy = PermissionPolicy(allow={"read", "search"}, reject={"delete"})
    assert ask(policy, req("read")) == "ao"  # rules prefer the "once" options
    assert ask(policy, req("search")) == "ao"
    assert ask(policy, req("delete")) == "ro"
    assert ask(policy, req("edit")) == "ro"  # default: reject


def test_rules_fall_back_to_always_option_when_no_once() -> None:
    policy = PermissionPolicy(allow={"read"}, reject={"delete"})
    assert ask(policy, req("read", options=[ALL[1], ALL[3]])) == "aa"
    assert ask(policy, req("delete", options=[ALL[1], ALL[3]])) == "ra"


def test_default_allow_and_cancel() -> None:
    assert ask(PermissionPolicy(default="allow"), req("edit")) == "ao"
    assert ask(PermissionPolicy(default="cancel"), req("edit")) is None


def test_default_without_matching_option_is_cancelled() -> None:
    only_allow = [ALL[0]]
    assert ask(PermissionPolicy(default="reject"), req("edit", options=only_allow)) is None
    assert ask(PermissionPolicy(allow={"read"}), req("read", options=[ALL[2]])) == "ro"


def test_ask_is_called_for_unruled_kinds_only() -> None:
    asker = Asker("ao")
    policy = PermissionPolicy(allow={"read"}, reject={"delete"}, ask=asker)
    assert ask(policy, req("read")) == "ao"
    assert ask(policy, req("delete")) == "ro"
    assert asker.asked == []
    assert ask(policy, req("edit")) == "ao"
    assert [r.tool_call.kind for r in asker.asked] == ["edit"]


def test_allow_always_remembered_per_session_not_across() -> None:
    asker = Asker("aa", "ro")
    policy = PermissionPolicy(ask=asker)
    assert ask(policy, req("edit", "s1")) == "aa"
    # Later edits in s1 are answered without asking, with the session's choice.
    assert ask(policy, req("edit", "s1")) == "aa"
    assert ask(policy, req("edit", "s1")) == "aa"
    assert len(asker.asked) == 1
    assert policy.remembered("s1") == {"edit": "allow"}
    # Another kind in the same session is still asked...
    # ...and the same kind in another session too.
    assert ask(policy, req("edit", "s2")) == "ro"
    assert len(asker.asked) == 2
    assert policy.remembered("s2") == {}


def test_reject_always_remembered() -> None:
    asker = Asker("ra")
    policy = PermissionPolicy(ask=asker, default="allow")
    assert ask(policy, req("execute")) == "ra"
    assert ask(policy, req("execute")) == "ra"
    assert ask(policy, req("execute", options=ONCE_ONLY)) == "ro"
    assert len(asker.asked) == 1


def test_remembered_choice_beats_static_rule() -> None:
    asker = Asker("aa")
    policy = PermissionPolicy(ask=asker)
    policy.remember("s1", "delete", "allow")
    assert ask(policy, req("delete")) == "aa"
    assert asker.asked == []


def test_once_choices_are_not_remembered() -> None:
    asker = Asker("ao", "ro")
    policy = PermissionPolicy(ask=asker)
    assert ask(policy, req("edit")) == "ao"
    assert ask(policy, req("edit")) == "ro"
    assert len(asker.asked) == 2
    assert policy.remembered("s1") == {}


def test_remembered_uses_once_option_when_always_not_offered() -> None:
    asker = Asker("aa")
    policy = PermissionPolicy(ask=asker)
    ask(policy, req("edit"))
    assert ask(policy, req("edit", options=ONCE_ONLY)) == "ao"
    assert len(asker.asked) == 1


def test_remembered_falls_back_to_ask_when_no_option_of_that_decision() -> None:
    asker = Asker("aa", "ro")
    policy = PermissionPolicy(ask=asker)
    ask(policy, req("edit"))
    reject_only = [ALL[2], ALL[3]]
    assert ask(policy, req("edit", options=reject_only)) == "ro"
    assert len(asker.asked) == 2
    # Without ask, the default decides.
    quiet = PermissionPolicy(default="reject")
    quiet.remember("s1", "edit", "allow")
    assert ask(quiet, req("edit", options=reject_only)) == "ro"


def test_forget() -> None:
    asker = Asker("aa", "aa", "ro")
    policy = PermissionPolicy(ask=asker)
    ask(policy, req("edit", "s1"))
    ask(policy, req("edit", "s2"))
    policy.forget("s1")
    assert policy.remembered("s1") == {}
    assert policy.remembered("s2") == {"edit": "allow"}
    policy.forget()
    assert policy.remembered("s2") == {}
    assert ask(policy, req("edit", "s2")) == "ro"


def test_missing_kind_never_matches_rules_or_memory() -> None:
    asker = Asker("aa", "ro")
    policy = PermissionPolicy(allow={"other"}, ask=asker)
    assert ask(policy, req(None)) == "aa"
    assert ask(policy, req(None)) == "ro"  # asked again: nothing remembered for "no kind"
    assert policy.remembered("s1") == {}
    assert ask(PermissionPolicy(allow={"other"}), req(None)) == "ro"  # default


def test_cancelled_ctx_gives_cancelled_outcome() -> None:
    asker = Asker("ao")
    policy = PermissionPolicy(allow={"read"}, ask=asker)
    ctx = Ctx()
    ctx.cancelled.set()
    assert ask(policy, req("read"), ctx) is None
    assert ask(policy, req("edit"), ctx) is None
    assert asker.asked == []


def test_cancelled_while_asking_gives_cancelled_and_remembers_nothing() -> None:
    ctx = Ctx()

    def slow_user(request: RequestPermissionRequest, c: Any) -> str:
        ctx.cancelled.set()  # the turn is cancelled while the dialog is open
        return "aa"

    policy = PermissionPolicy(ask=slow_user)
    assert ask(policy, req("edit"), ctx) is None
    assert policy.remembered("s1") == {}


def test_ask_returning_none_or_response() -> None:
    policy = PermissionPolicy(ask=Asker(None))
    assert ask(policy, req("edit")) is None
    full = RequestPermissionResponse(outcome=SelectedPermissionOutcome(option_id="aa"))
    policy = PermissionPolicy(ask=Asker(full))
    assert policy(req("edit"), Ctx()) is full
    assert policy.remembered("s1") == {"edit": "allow"}


def test_ask_choosing_unknown_option_uses_default() -> None:
    policy = PermissionPolicy(ask=Asker("made-up"), default="reject")
    assert ask(policy, req("edit")) == "ro"


def test_response_encodes_per_spec() -> None:
    policy = PermissionPolicy(allow={"read"})
    wire = msgspec.json.decode(encode(policy(req("read"), Ctx())))
    assert wire == {"outcome": {"outcome": "selected", "optionId": "ao"}}
    wire = msgspec.json.decode(encode(PermissionPolicy(default="cancel")(req("x"), Ctx())))
    assert wire == {"outcome": {"outcome": "cancelled"}}
    # And a request straight from the wire works.
    raw = (
        b'{"sessionId":"s1","toolCall":{"toolCallId":"c","kind":"read"},'
        b'"options":[{"optionId":"x","name":"Yes","kind":"allow_once"}]}'
    )
    assert ask(policy, decoder(RequestPermissionRequest).decode(raw)) == "x"


def test_constructor_validation() -> None:
    with pytest.raises(ValueError):
        PermissionPolicy(allow={"read"}, reject={"read"})
    with pytest.raises(TypeError):
        PermissionPolicy(allow="read")
    with pytest.raises(ValueError):
        PermissionPolicy(default="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PermissionPolicy().remember("s1", "read", "perhaps")  # type: ignore[arg-type]
