"""The threaded runtime's clock: a poke is never lost, whenever it comes."""

from __future__ import annotations

import threading

from acp.housekeeper import Housekeeper

WAIT = 10.0


def test_a_poke_during_a_look_is_looked_at_again(no_thread_leak: None) -> None:
    # The race a parked reader met under load: the clock's thread looked at the connection
    # (nothing to watch yet), the connection then parked and poked, while the thread was not
    # waiting yet; that wake-up was lost, and the park went unwatched for as long as the
    # next timer was away (an hour here).
    looking, poked = threading.Event(), threading.Event()
    looks: list[float] = []
    looked_again = threading.Event()

    def watch(now: float) -> float | None:
        looks.append(now)
        if len(looks) == 1:
            looking.set()
            assert poked.wait(WAIT)  # the poke comes while this look is under way
        else:
            looked_again.set()
        return None

    house = Housekeeper("test", flush=lambda: None, next_deadline=lambda: None,
                        expire=lambda now: None, watch=watch)
    house.call_later(3600.0, lambda: None)  # starts the thread; its next timer is an hour away
    try:
        assert looking.wait(WAIT)
        house.poke()
        poked.set()
        assert looked_again.wait(WAIT)
    finally:
        thread = house.stop()
        assert thread is not None
        thread.join(WAIT)
