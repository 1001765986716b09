"""Both process transports end what the agent started along with it (Linux, /proc).

The agent here is a launcher, as npm's ``codex-acp`` is: it starts the real agent (the
"grandchild"), which ignores the end of its stdin, as the real codex-acp binary does. Closing
the transport must leave nothing of it running, however the launcher behaves.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path

import pytest

from acp.aio.transport import ProcessTransport as AsyncProcessTransport
from acp.transport import ProcessTransport
from acp.transport import _descendants as descendants_module
from acp.transport._descendants import Descendants

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="what an agent started is found in /proc")

LOGGER = "acp.transport.process"
WAIT = 10.0

# The real agent: runs until killed (optionally ignoring SIGTERM too), whatever its stdin does.
GRANDCHILD = "import signal, time\n{ignore}\nwhile True: time.sleep(60)"
# The launcher: starts it, prints its pid, then exits at the end of its stdin or waits for it.
LAUNCHER = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
    "print(child.pid, flush=True)\n"
    "{then}\n"
)
THEN = {
    "exits at the end of its stdin": "sys.stdin.read()",
    "waits for what it started": "child.wait()",  # npm's codex-acp launcher (spawnSync)
}


def launcher(then: str, ignore_sigterm: bool = False) -> list[str]:
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN)" if ignore_sigterm else ""
    script = LAUNCHER.format(grandchild=GRANDCHILD.format(ignore=ignore), then=THEN[then])
    return [sys.executable, "-c", script]


def ended(pid: int) -> bool:
    """Gone, or a zombie (it has exited; an init that does not reap leaves it so)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 :].split()[0] == b"Z"


def ended_within(pid: int, timeout: float) -> bool:
    # SIGKILL is the last step: close() does not wait for a process that is not its child.
    deadline = time.monotonic() + timeout
    while not ended(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def run_sync(argv: list[str]) -> tuple[int, int | None]:
    """Start ``argv``, read the grandchild's pid, close; (that pid, the launcher's return code)."""
    transport = ProcessTransport(argv, exit_timeout=0.3, terminate_timeout=1.0)
    try:
        line = b""
        while not line.endswith(b"\n"):
            chunk = transport.read()
            assert chunk, "the launcher ended before printing its child's pid"
            line += chunk
    finally:
        transport.close()
    return int(line), transport.returncode


def run_asyncio(argv: list[str]) -> tuple[int, int | None]:
    async def main() -> tuple[int, int | None]:
        transport = await AsyncProcessTransport.spawn(argv, exit_timeout=0.3, terminate_timeout=1.0)
        try:
            line = b""
            while not line.endswith(b"\n"):
                chunk = await transport.read()
                assert chunk, "the launcher ended before printing its child's pid"
                line += chunk
        finally:
            await transport.close()
        return int(line), transport.returncode

    return asyncio.run(main())


RUNTIMES = {"sync": run_sync, "asyncio": run_asyncio}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("then", THEN)
def test_close_ends_what_the_agent_started(runtime: str, then: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    grandchild, returncode = RUNTIMES[runtime](launcher(then))
    assert ended(grandchild)  # ended by close(), which waited for it (SIGTERM sufficed)
    assert returncode is not None
    sent = [r.getMessage() for r in caplog.records if "process(es) it started still running" in r.getMessage()]
    assert sent and all(f"({grandchild})" in m for m in sent)
    assert sent[-1].endswith("sending SIGTERM")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_what_ignores_sigterm_gets_sigkill(runtime: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    grandchild, _ = RUNTIMES[runtime](launcher("exits at the end of its stdin", ignore_sigterm=True))
    assert ended_within(grandchild, WAIT)
    sent = [r for r in caplog.records if "process(es) it started still running" in r.getMessage()]
    assert [r.getMessage().rsplit(" ", 1)[-1] for r in sent] == ["SIGTERM", "SIGKILL"]
    assert sent[-1].levelno == logging.WARNING


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_agent_that_exits_at_the_end_of_its_stdin_is_not_kept_waiting(runtime: str) -> None:
    # Nothing left behind: close() sends no signal and returns without waiting out exit_timeout.
    argv = [sys.executable, "-c", "import sys; print(0, flush=True); sys.stdin.read()"]
    started = time.monotonic()
    _, returncode = RUNTIMES[runtime](argv)
    assert returncode == 0
    assert time.monotonic() - started < WAIT


def fake_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stats: dict[int, str]) -> None:
    for pid, stat in stats.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} {stat}")
    (tmp_path / "self").mkdir()  # not a pid: skipped
    monkeypatch.setattr(descendants_module, "_PROC", str(tmp_path))


def stat(comm: str, state: str, ppid: int, started: int) -> str:
    # The fields after comm up to the start time (the 22nd): state, ppid, then 17 others.
    return f"({comm}) {state} {ppid} " + "0 " * 17 + f"{started} 0 0"


def test_descendants_are_found_through_every_generation_and_known_by_start_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_proc(tmp_path, monkeypatch, {
        10: stat("launcher", "S", 1, 100),
        11: stat("real agent) S 1 (x", "S", 10, 101),  # comm may hold ") "
        12: stat("its helper", "S", 11, 102),
        13: stat("exited", "Z", 10, 103),
        20: stat("someone else", "S", 1, 104),
        21: stat("their child", "S", 20, 105),
    })
    seen = Descendants(10, "agent")
    seen.look()
    assert sorted(seen.running()) == [11, 12]  # a zombie has ended; 20 and 21 are not below 10
    # Pid 12 ends and the system gives its number to another process: never signalled then.
    (tmp_path / "12" / "stat").write_text("12 " + stat("another", "S", 1, 999))
    assert seen.running() == [11]
    (tmp_path / "11" / "stat").unlink()
    assert seen.running() == []


def test_without_proc_nothing_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(descendants_module, "_PROC", str(tmp_path / "missing"))
    seen = Descendants(os.getpid(), "agent")
    seen.look()
    assert seen.running() == []
    seen.signal(15)  # nothing to signal: no error
