"""Ctrl-C ends a blocking wait of the main thread, whichever thread the kernel gave SIGINT to.

The kernel hands a signal sent to the process to any thread that does not block it (the reader in
its poll, say). Here a helper thread sends SIGINT to itself (``signal.pthread_kill``) once the
main thread sleeps in the wait: the KeyboardInterrupt must come at once, not when the wait ends.
Seen as a rare hang of ``acp chat`` after Ctrl-C during a sign-in.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from acp import connection as connection_module
from acp.agent import SyncAgent
from acp.connection import Connection
from acp.transport import memory_pair
from tests.helpers.fault_support import RawPeer

WAIT = 10.0
# Where the main thread sleeps while it waits (acp.polling before acp.interruptible existed).
_WAITING_IN = ("interruptible.py", "polling.py")


@pytest.fixture
def main_thread_only(no_thread_leak: None) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("Python runs signal handlers in the main thread")
    yield


def ctrl_c_elsewhere(first: Callable[[], Any] = lambda: None, waiting_in: tuple[str, ...] = _WAITING_IN) -> threading.Thread:
    """Start a thread that runs ``first``, waits until the main thread sleeps in a wait of ours
    (in a module named ``waiting_in``), then takes a SIGINT itself."""
    main = threading.main_thread().ident

    def run() -> None:
        first()
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and not _waiting(sys._current_frames().get(main), waiting_in):  # type: ignore[arg-type]
            threading.Event().wait(0.001)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    thread = threading.Thread(target=run, name="ctrl-c")
    thread.start()
    return thread


def _waiting(frame: Any, waiting_in: tuple[str, ...]) -> bool:
    """The main thread is in one of our waits (maybe inside threading's), not polling."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "spin_for":
            return False
        if code.co_filename.endswith(waiting_in):
            return True
        frame = frame.f_back
    return False


@pytest.mark.parametrize("wait_spin", [0.0, 0.001])
def test_a_request_waiting_in_the_main_thread(main_thread_only: None, wait_spin: float) -> None:
    """The call is abandoned the ACP way: the peer gets $/cancel_request."""
    ours, theirs = memory_pair()
    conn = Connection(ours, name="engine", request_timeout=WAIT, wait_spin=wait_spin)
    peer = RawPeer(theirs)
    conn.start()
    helper = ctrl_c_elsewhere(lambda: peer.recv(WAIT))  # the request reached the peer
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            conn.request("never", {}, timeout=30.0)
        assert time.monotonic() - started < WAIT / 2
        assert peer.recv(WAIT)["method"] == "$/cancel_request"
    finally:
        helper.join(WAIT)
        conn.close()
        peer.close()  # (closes ``theirs`` too)


def test_a_request_whose_answer_the_main_thread_reads_itself(main_thread_only: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading left free for the main thread: it waits in its own read, a Ctrl-C held back
    there is seen within a slice, the call is abandoned, and reading goes back to a pool
    thread (the next call is answered)."""
    # Reading left free stays so, however slowly a loaded machine runs this thread.
    monkeypatch.setattr(connection_module, "_PARK_LIMIT", WAIT)
    ours, theirs = memory_pair()
    conn = Connection(ours, name="engine", request_timeout=WAIT, wait_spin=0)
    peer = RawPeer(theirs)
    conn.start()

    def answer_next(result: Any) -> None:
        msg = peer.recv(WAIT)
        while "id" not in msg:
            msg = peer.recv(WAIT)
        peer.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})

    try:
        answering = threading.Thread(target=answer_next, args=("first",))
        answering.start()
        assert conn.request("echo", {}) == "first"  # its reader left reading free for us
        answering.join(WAIT)
        helper = ctrl_c_elsewhere(lambda: peer.recv(WAIT), waiting_in=("fd.py",))
        started = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                conn.request("never", {}, timeout=30.0)
        finally:
            helper.join(WAIT)
        assert time.monotonic() - started < WAIT / 2
        assert peer.recv(WAIT)["method"] == "$/cancel_request"
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        answering = threading.Thread(target=answer_next, args=("after",))
        answering.start()
        assert conn.request("echo", {}) == "after"
        answering.join(WAIT)
    finally:
        conn.close()
        peer.close()


def test_an_agent_serving_in_the_main_thread(main_thread_only: None) -> None:
    """``SyncAgent.serve`` (and so ``serve_stdio``): the serving ends, the connection closes."""
    agent = SyncAgent.builder().build()
    ours, theirs = memory_pair()
    helper = ctrl_c_elsewhere()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.serve(ours)
        assert time.monotonic() - started < WAIT / 2
        assert agent.connections == []
    finally:
        helper.join(WAIT)
        theirs.close()
