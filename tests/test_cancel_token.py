"""The agent's CancelToken: callbacks run once, in order, wherever the cancel happens, and
registering (lock-free) while another thread cancels never loses or doubles a callback (the
two interleavings that matter are made certain by a callbacks dict that cancels on insert)."""

from __future__ import annotations

from acp.agent.cancellation import CancelToken


def test_callbacks_run_once_in_registration_order_first_one_first() -> None:
    ran: list[str] = []
    token = CancelToken(lambda: ran.append("first"))
    token.on_cancel(lambda: ran.append("a"))
    forget_b = token.on_cancel(lambda: ran.append("b"))
    token.on_cancel(lambda: ran.append("c"))
    forget_b()
    assert not token.is_cancelled
    assert token.cancel() is True
    assert ran == ["first", "a", "c"]
    assert token.cancel() is False  # once only
    assert ran == ["first", "a", "c"]
    assert token.is_cancelled and token.event.is_set()


def test_a_callback_registered_after_the_cancel_runs_at_once() -> None:
    token = CancelToken()
    token.cancel()
    ran: list[int] = []
    forget = token.on_cancel(lambda: ran.append(1))
    assert ran == [1]
    forget()  # a no-op now
    assert ran == [1]


def test_a_failing_callback_does_not_stop_the_others() -> None:
    ran: list[str] = []

    def fail() -> None:
        raise RuntimeError("boom")

    token = CancelToken()
    token.on_cancel(fail)
    token.on_cancel(lambda: ran.append("after"))
    assert token.cancel()
    assert ran == ["after"]


class _CancelOnInsert(dict):  # type: ignore[type-arg]
    """Callbacks of a token whose next registration races a cancel: the cancel runs right
    before the insertion (``after=False``: its list misses the new key) or right after it
    (``after=True``: its list has it, and on_cancel() then sees the flip too)."""

    def __init__(self, token: CancelToken, after: bool) -> None:
        super().__init__()
        self.token = token
        self.after = after
        token._callbacks = self

    def __setitem__(self, key: object, value: object) -> None:
        if not self.after:
            self.token.cancel()
        super().__setitem__(key, value)
        if self.after:
            self.token.cancel()


def test_a_registration_overtaken_by_the_cancel_still_runs_its_callback_once() -> None:
    token = CancelToken()
    callbacks = _CancelOnInsert(token, after=False)
    ran: list[int] = []
    forget = token.on_cancel(lambda: ran.append(1))
    assert token.is_cancelled
    assert ran == [1]  # the cancel's list missed it: on_cancel() saw the flip and ran it itself
    forget()
    assert ran == [1] and not callbacks


def test_a_registration_both_sides_see_runs_its_callback_once_not_twice() -> None:
    token = CancelToken()
    callbacks = _CancelOnInsert(token, after=True)
    ran: list[int] = []
    forget = token.on_cancel(lambda: ran.append(1))
    assert ran == [1]  # the cancel took it and ran it; on_cancel() saw the flip and found it gone
    forget()
    assert ran == [1] and not callbacks
