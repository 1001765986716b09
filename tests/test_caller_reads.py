"""A waiting caller reads for itself (threaded runtime): who reads, and that nothing is lost.

The connection's wire tap runs on the thread that reads a line, so each test records which
thread read what, over real pipes, and checks that the caller's own thread read its answer,
and that every way out of such a read (a cancel from another thread, a timeout, close, an
answer queued behind notifications, reading left free with nobody waiting) leaves a reader.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from acp import connection as connection_module
from acp.connection import Connection, InboundCall
from acp.errors import ConnectionClosedError, RequestCancelledError, RequestTimeoutError
from acp.transport import memory_pair
from acp.transport.fd import FdTransport
from tests.helpers.fault_support import ManualCancel, RawPeer, in_thread, outcome

WAIT = 10.0


class ThreadTap:
    """A wire tap that remembers the thread that read each inbound line."""

    def __init__(self) -> None:
        self.read_by: list[tuple[dict[str, Any], int]] = []
        self.sent: list[dict[str, Any]] = []

    def __call__(self, direction: str, line: bytes) -> None:
        if direction == "in":
            self.read_by.append((json.loads(line), threading.get_ident()))
        else:
            self.sent.append(json.loads(line))

    def readers_of_answers(self, method: str) -> list[int]:
        """The threads that read the answers to our requests for ``method``, in order."""
        ids = [msg["id"] for msg in self.sent if msg.get("method") == method]
        by_id = {msg["id"]: ident for msg, ident in self.read_by if "method" not in msg}
        return [by_id[msg_id] for msg_id in ids]


@pytest.fixture
def tapped(no_thread_leak: None) -> Iterator[tuple[Connection, RawPeer, ThreadTap]]:
    ours, theirs = memory_pair()
    tap = ThreadTap()
    conn = Connection(ours, name="engine", request_timeout=WAIT, wire_tap=tap, wait_spin=0)
    peer = RawPeer(theirs)
    yield conn, peer, tap
    conn.close()
    peer.close()


def called_in_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` called on a thread of its own (not the main one, which reads only while it holds
    a Ctrl-C back): its result, or the exception it raised."""
    return outcome(in_thread(fn, "caller")[0])


def answer_next(peer: RawPeer, result: Any = "ok") -> dict[str, Any]:
    msg: dict[str, Any] = peer.recv()
    peer.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
    return msg


@contextmanager
def answering(peer: RawPeer, *results: Any) -> Iterator[None]:
    """While the block runs, a peer thread answers the next requests, one per result, in order."""
    thread = threading.Thread(target=lambda: [answer_next(peer, result) for result in results], name="peer")
    thread.start()
    try:
        yield
    finally:
        thread.join(WAIT)


@pytest.fixture
def no_hand_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading left free (or parked) is not handed to a pool thread after 1 ms: who reads is
    then up to the callers alone, however slowly a loaded machine runs them."""
    monkeypatch.setattr(connection_module, "_PARK_LIMIT", WAIT)


def test_a_caller_thread_reads_its_own_answers_after_the_first(tapped: tuple[Connection, RawPeer, ThreadTap],
                                                               no_hand_over: None) -> None:
    conn, peer, tap = tapped
    conn.start()

    def calls() -> tuple[int, list[Any]]:
        return threading.get_ident(), [conn.request("echo", {"i": i}) for i in range(4)]

    with answering(peer, 0, 1, 2, 3):
        caller, results = called_in_thread(calls)
    assert results == [0, 1, 2, 3]
    readers = tap.readers_of_answers("echo")
    # The first answer comes to the pool's reader, which then leaves reading to this caller.
    assert readers[0] != caller
    assert readers[1:] == [caller, caller, caller]


def test_the_main_thread_reads_its_own_answers_after_the_first(tapped: tuple[Connection, RawPeer, ThreadTap],
                                                               no_hand_over: None) -> None:
    conn, peer, tap = tapped
    conn.start()
    with answering(peer, "ok", "ok", "ok"):
        assert [conn.request("echo") for _ in range(3)] == ["ok"] * 3
    readers = tap.readers_of_answers("echo")
    assert readers[0] != threading.get_ident()
    assert readers[1:] == [threading.get_ident()] * 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back each time


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_main_thread_never_reads_under_an_applications_own_handler(
    tapped: tuple[Connection, RawPeer, ThreadTap], no_hand_over: None, signum: int
) -> None:
    # Its handler may raise anywhere: a read's routing would be cut in two.
    conn, peer, tap = tapped
    own = signal.signal(signum, lambda signum, frame: None)
    try:
        conn.start()
        with answering(peer, "ok", "ok", "ok"):
            assert [conn.request("echo") for _ in range(3)] == ["ok"] * 3
    finally:
        signal.signal(signum, own)
    assert threading.get_ident() not in {ident for _, ident in tap.read_by}


def test_a_ctrl_c_while_the_main_thread_routes_a_read_is_raised_after_it(no_thread_leak: None,
                                                                       no_hand_over: None) -> None:
    # The Ctrl-C comes while the main thread taps the first line of a read of three: the other
    # two are still routed (the notification is handled), then the KeyboardInterrupt is raised
    # (the call abandoned, as a Ctrl-C while waiting does), and the connection goes on.
    ours, theirs = memory_pair()
    notes: list[int] = []
    noted = threading.Event()
    ctrl_c_sent = threading.Event()

    def tap(direction: str, line: bytes) -> None:
        if direction == "in" and b'"first"' in line and threading.get_ident() == threading.main_thread().ident:
            ctrl_c_sent.set()
            signal.raise_signal(signal.SIGINT)  # its handler runs at the next bytecode here

    conn = Connection(ours, name="engine", request_timeout=WAIT, wire_tap=tap, wait_spin=0)
    conn.on_notification("note", lambda params: (notes.append(params["i"]), noted.set()))
    peer = RawPeer(theirs)
    try:
        conn.start()
        first = threading.Thread(target=lambda: answer_next(peer), name="peer")
        first.start()
        assert conn.request("echo") == "ok"  # read by a pool thread: reading is left free for us
        first.join(WAIT)

        def answer_with_a_note_first() -> None:
            msg = peer.recv()
            lines = [{"jsonrpc": "2.0", "method": "first", "params": {}},
                     {"jsonrpc": "2.0", "method": "note", "params": {"i": 1}},
                     {"jsonrpc": "2.0", "id": msg["id"], "result": "second"}]
            peer.send(b"".join(json.dumps(line).encode() + b"\n" for line in lines))  # one write, one read

        second = threading.Thread(target=answer_with_a_note_first, name="peer")
        second.start()
        with pytest.raises(KeyboardInterrupt):
            conn.request("echo")
        second.join(WAIT)
        assert ctrl_c_sent.is_set()  # the main thread did read it
        assert noted.wait(WAIT) and notes == [1]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

        def answer_the_next_request() -> None:
            msg = peer.recv()
            while "id" not in msg:  # the interrupted call's $/cancel_request, if it was still pending
                msg = peer.recv()
            peer.send({"jsonrpc": "2.0", "id": msg["id"], "result": "third"})

        third = threading.Thread(target=answer_the_next_request, name="peer")
        third.start()
        assert conn.request("echo") == "third"
        third.join(WAIT)
    finally:
        conn.close()
        peer.close()


def test_reading_left_free_is_taken_up_when_nobody_calls(tapped: tuple[Connection, RawPeer, ThreadTap]) -> None:
    conn, peer, tap = tapped
    seen = threading.Event()
    conn.on_notification("note", lambda params: seen.set())
    conn.start()
    with answering(peer, "ok", "ok"):
        called_in_thread(lambda: [conn.request("echo") for _ in range(2)])  # the caller left reading free
    peer.send({"jsonrpc": "2.0", "method": "note", "params": {}})
    assert seen.wait(WAIT)  # a pool thread took reading up (the housekeeper, within 1 ms)


def test_a_cancel_from_another_thread_stops_a_caller_reading(tapped: tuple[Connection, RawPeer, ThreadTap]) -> None:
    conn, peer, tap = tapped
    conn.start()
    source = ManualCancel()  # fired from the test thread

    def calls() -> Any:
        conn.request("warm-up")  # answered: reading is left to this thread
        return conn.request("slow", timeout=None, cancel=source)

    call, _ = in_thread(calls, "caller")
    answer_next(peer)
    assert peer.recv()["method"] == "slow"
    assert source.registered.wait(WAIT)
    source.fire()  # the caller is blocked reading (the peer never answers): it must wake
    assert type(outcome(call)) is RequestCancelledError
    assert peer.recv()["method"] == "$/cancel_request"
    # Reading went back to a pool thread: the connection goes on.
    with answering(peer, "again"):
        assert conn.request("echo") == "again"


def test_a_caller_reading_times_out_and_hands_reading_back(tapped: tuple[Connection, RawPeer, ThreadTap]) -> None:
    conn, peer, tap = tapped
    conn.start()

    def calls() -> Any:
        conn.request("warm-up")
        try:
            conn.request("silent", timeout=0.2)
        except RequestTimeoutError as exc:
            return exc
        return None

    with answering(peer, "ok"):
        assert isinstance(called_in_thread(calls), RequestTimeoutError)
    assert peer.recv()["method"] == "silent"
    assert peer.recv()["method"] == "$/cancel_request"
    with answering(peer, "later"):
        assert conn.request("echo") == "later"  # (from the main thread: a pool thread reads)


def test_close_wakes_a_caller_reading(tapped: tuple[Connection, RawPeer, ThreadTap]) -> None:
    conn, peer, tap = tapped
    conn.start()

    def calls() -> Any:
        conn.request("warm-up")
        return conn.request("never", timeout=None)

    call, _ = in_thread(calls, "caller")
    answer_next(peer)
    assert peer.recv()["method"] == "never"  # the caller now reads for it
    conn.close()
    assert type(outcome(call)) is ConnectionClosedError


def test_an_answer_queued_behind_notifications_comes_after_them(tapped: tuple[Connection, RawPeer, ThreadTap]) -> None:
    conn, peer, tap = tapped
    handled: list[int] = []
    release = threading.Event()

    def on_note(params: Any) -> None:
        release.wait(WAIT)  # the first holds the queue: the answer waits behind all of them
        handled.append(params["i"])

    conn.on_notification("note", on_note)
    conn.start()

    def calls() -> Any:
        conn.request("warm-up")
        return conn.request("after-notes"), list(handled)

    call, _ = in_thread(calls, "caller")
    answer_next(peer)
    msg = peer.recv()
    notes = b"".join(json.dumps({"jsonrpc": "2.0", "method": "note", "params": {"i": i}}).encode() + b"\n"
                     for i in range(5))
    peer.send(notes + json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": "done"}).encode() + b"\n")
    release.set()
    assert outcome(call) == ("done", [0, 1, 2, 3, 4])  # every earlier notification handled first


def test_a_handler_on_the_parked_reader_reads_for_its_own_calls(no_thread_leak: None, no_hand_over: None) -> None:
    a_side, b_side = memory_pair()
    tap = ThreadTap()
    agent = Connection(a_side, name="agent", request_timeout=WAIT, wire_tap=tap, wait_spin=0)
    client = Connection(b_side, name="client", request_timeout=WAIT, wait_spin=0)
    threads: list[int] = []

    def prompt(params: Any, call: InboundCall) -> Any:
        threads.append(threading.get_ident())
        return [agent.request("fs/read", {"n": n}) for n in range(3)]

    agent.on_request("prompt", prompt)
    client.on_request("fs/read", lambda params, call: params["n"] * 10)
    agent.start()
    client.start()
    try:
        assert client.request("prompt") == [0, 10, 20]
        handler = threads[0]
        prompt_reader = next(ident for msg, ident in tap.read_by if msg.get("method") == "prompt")
        assert handler == prompt_reader  # run on the reader (leader/follower)...
        assert tap.readers_of_answers("fs/read") == [handler] * 3  # ...which read its answers too
    finally:
        client.close()
        agent.close()


def test_read_within_times_out_is_interrupted_and_still_reads(no_thread_leak: None) -> None:
    ours, theirs = memory_pair()
    assert isinstance(ours, FdTransport)
    try:
        assert ours.read_within(0.01) is None  # nothing came
        ours.interrupt_read()
        assert ours.read_within(None) is None  # interrupted at once
        ours.interrupt_read()  # an interrupt a plain read() does not stop for:
        theirs.write(b"line\n")
        assert ours.read() == b"line\n"
        assert ours.read_within(0.01) is None  # (and it was drained)
        ours.close()
        assert ours.read_within(WAIT) == b""
    finally:
        ours.close()
        theirs.close()


def test_a_transport_whose_read_is_overridden_is_read_through_it(no_thread_leak: None) -> None:
    ours, theirs = memory_pair()
    seen = bytearray()

    class Recording(type(ours)):  # type: ignore[misc]  # a user's subclass that records reads
        def read(self) -> bytes:
            data: bytes = super().read()
            seen.extend(data)
            return data

    ours.__class__ = Recording
    conn = Connection(ours, name="engine", request_timeout=WAIT, wait_spin=0)
    peer = RawPeer(theirs)
    conn.start()
    try:
        with answering(peer, 0, 1, 2):
            assert called_in_thread(lambda: [conn.request("echo") for _ in range(3)]) == [0, 1, 2]
        assert seen.count(b"\n") == 3  # every answer went through the override
    finally:
        conn.close()
        peer.close()
