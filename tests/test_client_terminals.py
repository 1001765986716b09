"""LocalTerminals: output, exit status, kill, env/cwd, the output limit, cancellation, cleanup."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from acp.client.terminals import LocalTerminals
from acp.errors import INVALID_PARAMS, INVALID_REQUEST, REQUEST_CANCELLED, RequestError
from acp.schema import (
    CreateTerminalRequest,
    EnvVariable,
    KillTerminalRequest,
    ReleaseTerminalRequest,
    TerminalOutputRequest,
    TerminalOutputResponse,
    WaitForTerminalExitRequest,
    WaitForTerminalExitResponse,
)
from tests.conftest import helper_argv

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

SID = "sess_1"
TIMEOUT = 10.0


class Ctx:
    def __init__(self, session_id: str = SID) -> None:
        self.session_id = session_id
        self.cancelled = threading.Event()


@pytest.fixture
def terms(no_thread_leak: None) -> Iterator[LocalTerminals]:
    with LocalTerminals() as t:
        yield t
    assert not [th.name for th in threading.enumerate() if th.name.startswith("acp-terminal-")]


def create(
    terms: LocalTerminals,
    *argv: str,
    session_id: str = SID,
    env: list[EnvVariable] | None = None,
    cwd: str | None = None,
    limit: int | None = None,
) -> str:
    request = CreateTerminalRequest(
        session_id=session_id,
        command=argv[0],
        args=list(argv[1:]),
        env=env,
        cwd=cwd,
        output_byte_limit=limit,
    )
    return terms.create_terminal(request, Ctx(session_id)).terminal_id


def child(terms: LocalTerminals, mode: str, *args: str, **kw: object) -> str:
    return create(terms, *helper_argv("handlers_child", mode, *args), **kw)  # type: ignore[arg-type]


def output(terms: LocalTerminals, tid: str, session_id: str = SID) -> TerminalOutputResponse:
    return terms.terminal_output(
        TerminalOutputRequest(session_id=session_id, terminal_id=tid), Ctx(session_id)
    )


def wait_exit(
    terms: LocalTerminals, tid: str, ctx: Ctx | None = None
) -> WaitForTerminalExitResponse:
    return terms.wait_for_terminal_exit(
        WaitForTerminalExitRequest(session_id=SID, terminal_id=tid), ctx or Ctx()
    )


def kill(terms: LocalTerminals, tid: str) -> None:
    terms.kill_terminal(KillTerminalRequest(session_id=SID, terminal_id=tid), Ctx())


def release(terms: LocalTerminals, tid: str, session_id: str = SID) -> None:
    terms.release_terminal(
        ReleaseTerminalRequest(session_id=session_id, terminal_id=tid), Ctx(session_id)
    )


def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def wait_output(terms: LocalTerminals, tid: str, text: str) -> str:
    seen = ""

    def has() -> bool:
        nonlocal seen
        seen = output(terms, tid).output
        return text in seen

    wait_until(has)
    return seen


def pid_gone(pid: int) -> bool:
    """No such process, or only a zombie that is not ours to reap (reparented to init)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def refused(fn: Callable[[], object], code: int = INVALID_PARAMS) -> RequestError:
    with pytest.raises(RequestError) as info:
        fn()
    assert info.value.code == code, info.value
    return info.value


# ---- output and exit status ----


def test_echo_output_and_exit_code(terms: LocalTerminals) -> None:
    tid = child(terms, "echo", "hello", "wörld")
    assert tid.startswith("term_")
    assert wait_exit(terms, tid) == WaitForTerminalExitResponse(exit_code=0, signal=None)
    out = output(terms, tid)
    # stdout and stderr come through the same pipe; the exit status is published only after
    # the output has been drained, so it is complete here.
    assert out.output == "hello wörld\nerr\n"
    assert out.truncated is False
    assert out.exit_status is not None and out.exit_status.exit_code == 0
    release(terms, tid)


def test_exit_status_waits_for_output_drain(
    terms: LocalTerminals, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hold the reader back: the process has exited, but its last output is not stored yet.
    # The exit status must not be published before that output (within the grace period).
    from acp.client import terminals as mod

    gate = threading.Event()
    real_append = mod._Terminal._append

    def gated_append(self: mod._Terminal, data: bytes) -> None:
        gate.wait(TIMEOUT)
        real_append(self, data)

    monkeypatch.setattr(mod._Terminal, "_append", gated_append)
    tid = child(terms, "echo", "last", "words")
    proc = terms._terminals[tid].proc
    wait_until(lambda: proc.returncode is not None)  # reaped by the waiter thread
    assert output(terms, tid).exit_status is None
    gate.set()
    assert wait_exit(terms, tid).exit_code == 0
    assert output(terms, tid).output == "last words\nerr\n"


def test_nonzero_exit_code(terms: LocalTerminals) -> None:
    tid = child(terms, "exit", "3")
    status = wait_exit(terms, tid)
    assert (status.exit_code, status.signal) == (3, None)
    assert output(terms, tid).output == "bye\n"


def test_no_exit_status_while_running(terms: LocalTerminals) -> None:
    tid = child(terms, "sleep")
    assert wait_output(terms, tid, "ready") == "ready\n"
    assert output(terms, tid).exit_status is None
    release(terms, tid)


def test_kill_reports_signal_and_terminal_stays_valid(terms: LocalTerminals) -> None:
    tid = child(terms, "sleep")
    wait_output(terms, tid, "ready")
    kill(terms, tid)
    status = wait_exit(terms, tid)
    assert (status.exit_code, status.signal) == (None, "SIGKILL")
    out = output(terms, tid)
    assert out.output == "ready\n"
    assert out.exit_status is not None and out.exit_status.signal == "SIGKILL"
    kill(terms, tid)  # killing again is harmless
    release(terms, tid)


def test_signal_from_outside_is_named(terms: LocalTerminals) -> None:
    tid = child(terms, "sleep")
    wait_output(terms, tid, "ready")
    os.kill(terms.pid(SID, tid), signal.SIGTERM)
    assert wait_exit(terms, tid).signal == "SIGTERM"


# ---- env and cwd ----


def test_env_from_request(terms: LocalTerminals) -> None:
    tid = child(terms, "env", "ACP_TEST_VAR", env=[EnvVariable(name="ACP_TEST_VAR", value="v 1")])
    wait_exit(terms, tid)
    assert output(terms, tid).output == "v 1\n"


def test_env_inherited_and_constructor_env(
    monkeypatch: pytest.MonkeyPatch, no_thread_leak: None
) -> None:
    monkeypatch.setenv("ACP_INHERITED", "from-parent")
    with LocalTerminals(env={"ACP_BASE": "base", "ACP_OVER": "base"}) as t:
        a = child(t, "env", "ACP_INHERITED")
        b = child(t, "env", "ACP_BASE")
        c = child(t, "env", "ACP_OVER", env=[EnvVariable(name="ACP_OVER", value="request")])
        for tid in (a, b, c):
            wait_exit(t, tid)
        assert output(t, a).output == "from-parent\n"
        assert output(t, b).output == "base\n"
        assert output(t, c).output == "request\n"
    with LocalTerminals(inherit_env=False) as t:
        tid = child(t, "env", "ACP_INHERITED")
        wait_exit(t, tid)
        assert output(t, tid).output == "<unset>\n"


def test_bad_env_name_refused(terms: LocalTerminals) -> None:
    refused(lambda: child(terms, "echo", env=[EnvVariable(name="A=B", value="x")]))
    refused(lambda: child(terms, "echo", env=[EnvVariable(name="", value="x")]))
    assert terms.terminal_ids() == []


def test_cwd_applied(terms: LocalTerminals, tmp_path: Path) -> None:
    tid = child(terms, "cwd", cwd=str(tmp_path))
    wait_exit(terms, tid)
    assert output(terms, tid).output == f"{os.path.realpath(tmp_path)}\n"


def test_cwd_must_be_absolute_and_exist(terms: LocalTerminals, tmp_path: Path) -> None:
    refused(lambda: child(terms, "cwd", cwd="relative/dir"))
    refused(lambda: child(terms, "cwd", cwd=str(tmp_path / "missing")))


def test_cwd_confined_to_allowed_roots(tmp_path: Path, no_thread_leak: None) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "escape").symlink_to(tmp_path, target_is_directory=True)
    with LocalTerminals(allowed_cwd_roots=[root]) as t:
        assert "outside" in refused(lambda: child(t, "cwd", cwd=str(tmp_path))).message
        refused(lambda: child(t, "cwd", cwd=str(root / "escape")))
        refused(lambda: child(t, "cwd", cwd=f"{root}/../"))
        inside = child(t, "cwd", cwd=str(root / "sub"))
        default = child(t, "cwd")
        wait_exit(t, inside)
        wait_exit(t, default)
        assert output(t, inside).output == f"{os.path.realpath(root / 'sub')}\n"
        assert output(t, default).output == f"{os.path.realpath(root)}\n"


def test_command_not_found(terms: LocalTerminals) -> None:
    err = refused(lambda: create(terms, "/definitely/not/a/command"))
    assert "not found" in err.message
    refused(lambda: create(terms, ""))


def test_shell_mode(no_thread_leak: None) -> None:
    with LocalTerminals(shell=True) as t:
        tid = create(t, "echo hello | tr a-z A-Z")
        wait_exit(t, tid)
        assert output(t, tid).output == "HELLO\n"
        # args are quoted: no word splitting, no command injection through them
        tid = create(t, "printf '%s\\n'", "a b", "it's", "; echo pwned")
        wait_exit(t, tid)
        assert output(t, tid).output == "a b\nit's\n; echo pwned\n"


# ---- output byte limit ----


def expected_tail(data: bytes, limit: int) -> bytes:
    tail = data[-limit:] if limit else b""
    while tail and (tail[0] & 0xC0) == 0x80:
        tail = tail[1:]
    return tail


@pytest.mark.parametrize("limit", [1, 2, 3, 101, 1000])
def test_output_limit_truncates_front_at_char_boundary(terms: LocalTerminals, limit: int) -> None:
    n = 5000
    tid = child(terms, "utf8", str(n), limit=limit)
    wait_exit(terms, tid)
    out = output(terms, tid)
    full = ("é" * n).encode() + b"END"
    assert out.truncated is True
    raw = out.output.encode("utf-8")  # a str, so valid UTF-8 by construction: check its content
    assert "\ufffd" not in out.output
    assert len(raw) <= limit
    assert raw == expected_tail(full, limit)
    assert full.endswith(raw)


def test_output_within_limit_not_truncated(terms: LocalTerminals) -> None:
    tid = child(terms, "utf8", "100", limit=203)
    wait_exit(terms, tid)
    out = output(terms, tid)
    assert out.output == "é" * 100 + "END"
    assert out.truncated is False


def test_output_limit_zero_keeps_nothing(terms: LocalTerminals) -> None:
    tid = child(terms, "echo", "hi", limit=0)
    wait_exit(terms, tid)
    assert (output(terms, tid).output, output(terms, tid).truncated) == ("", True)


def test_default_and_max_output_limit(no_thread_leak: None) -> None:
    with LocalTerminals(default_output_byte_limit=10, max_output_byte_limit=20) as t:
        a = child(t, "utf8", "100")  # default limit: 10
        b = child(t, "utf8", "100", limit=1_000_000)  # capped at 20
        wait_exit(t, a)
        wait_exit(t, b)
        assert output(t, a).output == "ééé" + "END"
        assert output(t, b).output == "é" * 8 + "END"


def test_unfinished_character_held_back_until_exit(terms: LocalTerminals) -> None:
    code = (
        "import sys, time\n"
        "sys.stdout.buffer.write(b'ok\\xc3'); sys.stdout.flush()\n"
        "time.sleep(3600)\n"
    )
    tid = create(terms, sys.executable, "-c", code)
    wait_output(terms, tid, "ok")
    # The dangling lead byte may still be completed: it is not shown as U+FFFD yet.
    assert output(terms, tid).output == "ok"
    kill(terms, tid)
    wait_exit(terms, tid)
    assert output(terms, tid).output == "ok\ufffd"  # never completed: replaced at exit


# ---- waiting and cancellation ----


def test_wait_blocks_until_exit(terms: LocalTerminals) -> None:
    tid = child(terms, "sleep")
    wait_output(terms, tid, "ready")
    result: list[WaitForTerminalExitResponse] = []
    waiter = threading.Thread(target=lambda: result.append(wait_exit(terms, tid)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not result  # still waiting: the process is running
    kill(terms, tid)
    waiter.join(TIMEOUT)
    assert result and result[0].signal == "SIGKILL"


def test_wait_woken_by_cancel(terms: LocalTerminals) -> None:
    tid = child(terms, "sleep")
    wait_output(terms, tid, "ready")
    ctx = Ctx()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            wait_exit(terms, tid, ctx)
        except BaseException as exc:
            errors.append(exc)

    waiter = threading.Thread(target=run)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()
    ctx.cancelled.set()
    waiter.join(TIMEOUT)
    assert not waiter.is_alive()
    assert isinstance(errors[0], RequestError) and errors[0].code == REQUEST_CANCELLED
    assert output(terms, tid).exit_status is None  # the command itself keeps running
    release(terms, tid)


def test_wait_woken_by_release(terms: LocalTerminals) -> None:
    tid = child(terms, "sleep")
    wait_output(terms, tid, "ready")
    result: list[WaitForTerminalExitResponse] = []
    waiter = threading.Thread(target=lambda: result.append(wait_exit(terms, tid)))
    waiter.start()
    release(terms, tid)
    waiter.join(TIMEOUT)
    assert result and result[0].signal == "SIGKILL"


# ---- process groups, release, close ----


def test_kill_gets_the_whole_process_group(terms: LocalTerminals) -> None:
    tid = child(terms, "spawn")
    text = wait_output(terms, tid, "child ")
    grandchild = int(text.split()[1])
    leader = terms.pid(SID, tid)
    assert os.getpgid(grandchild) == leader
    kill(terms, tid)
    assert wait_exit(terms, tid).signal == "SIGKILL"
    wait_until(lambda: pid_gone(grandchild))
    release(terms, tid)


def test_release_reaps_no_zombie(terms: LocalTerminals) -> None:
    tid = child(terms, "sleep")
    wait_output(terms, tid, "ready")
    pid = terms.pid(SID, tid)
    release(terms, tid)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # a zombie would still accept signal 0
    refused(lambda: output(terms, tid))
    refused(lambda: release(terms, tid))
    assert terms.terminal_ids() == []


def test_release_after_natural_exit_reaps(terms: LocalTerminals) -> None:
    tid = child(terms, "exit", "0")
    pid = terms.pid(SID, tid)
    wait_exit(terms, tid)
    release(terms, tid)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_grandchild_escaping_the_group_does_not_hang(terms: LocalTerminals) -> None:
    # The grandchild starts its own session (out of reach of the group kill) and keeps the
    # output pipe open: the exit status must still come, and release must not hang.
    tid = child(terms, "escape")
    text = wait_output(terms, tid, "child ")
    grandchild = int(text.split()[1])
    try:
        status = wait_exit(terms, tid)
        assert status.exit_code == 0
        release(terms, tid)
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_unknown_and_foreign_terminal_ids(terms: LocalTerminals) -> None:
    refused(lambda: output(terms, "term_nope"))
    refused(lambda: wait_exit(terms, "term_nope"))
    refused(lambda: kill(terms, "term_nope"))
    refused(lambda: release(terms, "term_nope"))
    tid = child(terms, "sleep", session_id="sess_other")
    refused(lambda: output(terms, tid))  # another session's terminal is unknown here
    refused(lambda: release(terms, tid))
    assert output(terms, tid, session_id="sess_other").exit_status is None
    assert terms.terminal_ids("sess_other") == [tid]
    assert terms.terminal_ids(SID) == []
    release(terms, tid, session_id="sess_other")


def test_release_session(terms: LocalTerminals) -> None:
    a = child(terms, "sleep", session_id="s_a")
    b = child(terms, "sleep", session_id="s_b")
    pid_a = terms.pid("s_a", a)
    terms.release_session("s_a")
    with pytest.raises(ProcessLookupError):
        os.kill(pid_a, 0)
    assert terms.terminal_ids() == [b]


def test_close_kills_everything_and_leaves_no_thread(no_thread_leak: None) -> None:
    t = LocalTerminals()
    tids = [child(t, "sleep") for _ in range(3)] + [child(t, "spawn")]
    text = wait_output(t, tids[-1], "child ")
    grandchild = int(text.split()[1])
    pids = [t.pid(SID, tid) for tid in tids]
    assert any(th.name == f"acp-terminal-{tids[0]}" for th in threading.enumerate())
    t.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    wait_until(lambda: pid_gone(grandchild))
    assert not [th.name for th in threading.enumerate() if th.name.startswith("acp-terminal-")]
    assert t.closed
    refused(lambda: child(t, "echo"), code=INVALID_REQUEST)
    t.close()  # idempotent


def test_cancelled_create_starts_nothing(terms: LocalTerminals) -> None:
    ctx = Ctx()
    ctx.cancelled.set()
    request = CreateTerminalRequest(session_id=SID, command=sys.executable, args=["-c", "1"])
    with pytest.raises(RequestError) as info:
        terms.create_terminal(request, ctx)
    assert info.value.code == REQUEST_CANCELLED
    assert terms.terminal_ids() == []
