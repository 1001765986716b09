"""Errors that say what happened: str(RequestError) shows the peer's reason from its data, and
when a spawned agent dies, ConnectionClosedError says how and carries the end of its stderr."""

from __future__ import annotations

import copy
import logging
import os
import pickle
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import acp
from acp.errors import ConnectionClosedError, RequestError
from acp.transport.process import describe_exit

from .conftest import helper_argv
from .helpers.exiting_agent import CREDENTIALS

WAIT = 30.0

# -------------------------------------------------------------------- str(RequestError)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, "Internal error (code -32603)"),
        ("Invalid Mode", "Internal error (code -32603): Invalid Mode"),
        ({"details": "Missing credentials."}, "Internal error (code -32603): Missing credentials."),
        ({"message": "from message"}, "Internal error (code -32603): from message"),
        ({"detail": "from detail"}, "Internal error (code -32603): from detail"),
        ({"reason": "from reason"}, "Internal error (code -32603): from reason"),
        ({"error": "from error"}, "Internal error (code -32603): from error"),
        # The first key holding a non-empty string wins; others are not strings here.
        ({"details": {"nested": 1}, "message": " ", "reason": "the reason"}, "Internal error (code -32603): the reason"),
        ({"uri": "/a b.txt", "n": 2}, 'Internal error (code -32603): {"uri":"/a b.txt","n":2}'),
        ([1, "two", None], 'Internal error (code -32603): [1,"two",null]'),
        (42, "Internal error (code -32603): 42"),
        ("line one\n  line two\r\n", "Internal error (code -32603): line one line two"),
        ("Internal error", "Internal error (code -32603)"),  # only repeats the message
    ],
)
def test_request_error_str_shows_the_readable_part_of_data(data: Any, expected: str) -> None:
    error = RequestError(-32603, "Internal error", data)
    assert str(error) == expected
    # The attributes are the answer exactly as received.
    assert (error.code, error.message, error.data) == (-32603, "Internal error", data)


def test_request_error_str_of_data_that_is_not_json() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque thing>"

    assert str(RequestError(-32603, None, Opaque())) == "Internal error (code -32603): <opaque thing>"


def test_long_data_is_cut_at_a_word_boundary_with_an_ellipsis() -> None:
    words = " ".join(f"word{i}" for i in range(200))
    text = str(RequestError(-32603, None, {"details": words}))
    prefix = "Internal error (code -32603): "
    assert text.startswith(prefix)
    shown = text[len(prefix):]
    assert len(shown) <= 300 and shown.endswith("\u2026")
    kept = shown[:-1]
    assert words.startswith(kept) and words[len(kept)] == " "  # ends where a word ends
    assert len(kept) > 250  # and does not give up much of the allowed length


def test_long_data_without_spaces_is_cut_mid_word_only_with_an_ellipsis() -> None:
    blob = "x" * 1000
    shown = str(RequestError(-32602, "Invalid params", blob)).split(": ", 1)[1]
    assert shown == "x" * 299 + "\u2026"
    # Just at the limit: nothing is cut, no ellipsis.
    assert str(RequestError(-32602, "Invalid params", "y" * 300)).endswith(": " + "y" * 300)


def test_compact_json_data_is_bounded_too() -> None:
    shown = str(RequestError(-32603, None, {"items": list(range(1000))})).split(": ", 1)[1]
    assert len(shown) <= 300 and shown.endswith("\u2026") and shown.startswith('{"items":[0,1,2,')


def test_request_error_copies_and_pickles_as_itself() -> None:
    error = RequestError.invalid_params("Invalid params", {"details": "bad mode"})
    for twin in (copy.copy(error), pickle.loads(pickle.dumps(error))):
        assert type(twin) is RequestError
        assert (twin.code, twin.message, twin.data) == (-32602, "Invalid params", {"details": "bad mode"})
        assert str(twin) == str(error) == "Invalid params (code -32602): bad mode"


# -------------------------------------------------------------- str(ConnectionClosedError)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (0, "exited with code 0"),
        (3, "exited with code 3"),
        (-signal.SIGKILL, "was killed by SIGKILL"),
        (-signal.SIGTERM, "was killed by SIGTERM"),
        (-200, "was killed by signal 200"),
    ],
)
def test_describe_exit(code: int, expected: str) -> None:
    assert describe_exit(code) == expected


def test_connection_closed_error_shows_the_last_stderr_lines() -> None:
    assert str(ConnectionClosedError()) == "connection closed"
    plain = ConnectionClosedError("session/new: the agent closed the connection")
    assert (plain.returncode, plain.stderr_tail) == (None, "")
    assert str(plain) == "session/new: the agent closed the connection"

    tail = "\n".join(f"line {i}" for i in range(20)) + "\n" + "z" * 500
    error = ConnectionClosedError("x: the agent process exited with code 1", returncode=1, stderr_tail=tail)
    head, *shown = str(error).split("\n")
    assert head == "x: the agent process exited with code 1; the last lines of its stderr:"
    # The last ten lines, indented; an over-long one cut with an ellipsis.
    assert shown[:-1] == [f"    line {i}" for i in range(11, 20)]
    assert shown[-1] == "    " + "z" * 199 + "\u2026"
    assert error.stderr_tail == tail  # the attribute keeps everything it was given
    twin = pickle.loads(pickle.dumps(error))
    assert (twin.returncode, twin.stderr_tail, str(twin)) == (1, tail, str(error))


# ------------------------------------------------------------------ over real processes


def test_a_peers_error_data_reaches_str_over_a_real_process(no_thread_leak: None) -> None:
    # The official SDKs answer a failing handler with -32603 and data {"details": <message>}.
    with acp.SyncClient.builder().agent_process(*helper_argv("exiting_agent", "error-data")).build() as client:
        client.initialize()
        with pytest.raises(RequestError) as info:
            client.new_session(cwd=os.getcwd())
    error = info.value
    assert (error.code, error.message, error.data) == (-32603, "Internal error", {"details": CREDENTIALS})
    assert str(error) == f"Internal error (code -32603): {CREDENTIALS}"


def test_a_crashed_agent_says_how_it_exited_and_what_it_wrote(
    no_thread_leak: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="acp.transport.process")
    client = acp.SyncClient.builder().agent_process(*helper_argv("exiting_agent", "crash")).build()
    try:
        client.initialize()
        session_id = client.new_session(cwd=os.getcwd()).session_id
        with pytest.raises(ConnectionClosedError) as pending:
            client.prompt(session_id, "go")  # pending when the agent died
        with pytest.raises(ConnectionClosedError) as later:
            client.new_session(cwd=os.getcwd())  # a call after it died
    finally:
        client.close()
    last_line = "RuntimeError: model backend unreachable: connection refused"
    for error, method in ((pending.value, "session/prompt"), (later.value, "session/new")):
        assert error.returncode == 3
        lines = error.stderr_tail.splitlines()
        assert lines[0] == "starting the turn" and lines[1] == "Traceback (most recent call last):"
        assert lines[-1] == last_line
        text = str(error)
        assert text.startswith(f"{method}: the agent process exited with code 3; the last lines of its stderr:\n")
        assert text.endswith("\n    " + last_line)
    assert client.process is not None and client.process.stderr_tail == pending.value.stderr_tail
    # The stderr is still logged, line by line, as before.
    logged = [r.getMessage() for r in caplog.records if r.name == "acp.transport.process"]
    assert any(m.endswith("] Traceback (most recent call last):") for m in logged)
    assert any(m.endswith("] " + last_line) for m in logged)


class _Watch(logging.Handler):
    """Sets ``seen`` when the agent's stderr line ``text`` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.INFO)
        self.text = text
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().endswith("] " + self.text):
            self.seen.set()


def test_an_agent_killed_mid_call_is_named_by_its_signal(no_thread_leak: None) -> None:
    watch = _Watch("hanging in prompt")
    logger = logging.getLogger("acp.transport.process")
    level = logger.level
    logger.addHandler(watch)
    logger.setLevel(logging.INFO)
    client = acp.SyncClient.builder().agent_process(*helper_argv("exiting_agent", "hang")).build()
    try:
        client.initialize()
        session_id = client.new_session(cwd=os.getcwd()).session_id
        with ThreadPoolExecutor(1, thread_name_prefix="test-prompt") as pool:
            turn = pool.submit(client.prompt, session_id, "go")
            assert watch.seen.wait(WAIT), "the agent never started its turn"
            assert client.process is not None
            os.kill(client.process.pid, signal.SIGKILL)
            with pytest.raises(ConnectionClosedError) as pending:
                turn.result(WAIT)
        with pytest.raises(ConnectionClosedError) as later:
            client.new_session(cwd=os.getcwd())
    finally:
        client.close()
        logger.removeHandler(watch)
        logger.setLevel(level)
    for error, method in ((pending.value, "session/prompt"), (later.value, "session/new")):
        assert error.returncode == -signal.SIGKILL
        assert error.stderr_tail == "hanging in prompt"
        assert str(error) == (
            f"{method}: the agent process was killed by SIGKILL; the last lines of its stderr:\n"
            "    hanging in prompt"
        )
        assert "code -9" not in str(error)


def test_an_agent_that_exits_silently_has_an_empty_tail(no_thread_leak: None) -> None:
    import sys

    argv = [sys.executable, "-c", "import sys; sys.exit(7)"]
    with acp.SyncClient.builder().agent_process(*argv).build() as client:
        assert client.process is not None and client.process.wait(WAIT) == 7
        with pytest.raises(ConnectionClosedError) as info:
            client.initialize()
    assert (info.value.returncode, info.value.stderr_tail) == (7, "")
    assert str(info.value) == "initialize: the agent process exited with code 7"


def _tail_of(script: str) -> str:
    import sys

    from acp.transport import ProcessTransport

    transport = ProcessTransport([sys.executable, "-c", script])
    try:
        assert transport.wait(WAIT) is not None
    finally:
        transport.close()  # joins the stderr reader: the tail is complete
    return transport.stderr_tail


def test_the_stderr_tail_keeps_the_last_20_lines(no_thread_leak: None) -> None:
    # Blank lines do not count: they would push the useful ones out.
    script = "import sys\nfor i in range(100): sys.stderr.write(f'l{i}\\r\\n \\n\\n')"
    assert _tail_of(script) == "\n".join(f"l{i}" for i in range(80, 100))


def test_the_stderr_tail_is_bounded_in_bytes_and_keeps_a_partial_last_line(no_thread_leak: None) -> None:
    # A 20 000-byte line of two-byte characters, then "ends" without a newline (so that the
    # 8 KiB cut falls inside a character).
    script = "import sys\nsys.stderr.buffer.write(('start\\n' + '\\u00e9' * 10000 + '\\nends').encode())"
    tail = _tail_of(script)
    assert tail.endswith("\u00e9\nends")
    assert len(tail.encode()) <= 8192
    # Cut inside the long line: it starts at a character, never with a replacement character.
    assert set(tail[:-5]) == {"\u00e9"} and len(tail.encode()) == 8191
