"""The official Python SDK (PyPI ``agent-client-protocol``) as a remote peer, for
tests/test_interop_remote.py.

It lives in benchmarks/.venv-official (its import name is also ``acp``); ``make interop-python-setup``
(a prerequisite of ``make test``) creates it with the pinned SDK and the extras its remote
transports need. Without it the tests are skipped locally, but under CI (env ``CI`` set) they fail.
The peer itself is tests/interop/official_remote_peer.py, always run as a subprocess.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from .interop_node import under_ci

ROOT = Path(__file__).resolve().parent.parent.parent
VENV = ROOT / "benchmarks" / ".venv-official"
PYTHON = VENV / "bin" / "python"
PEER = ROOT / "tests" / "interop" / "official_remote_peer.py"
SDK_VERSION = "0.12.1"
# What the peer imports: the SDK's remote transports (extra "http": httpx[http2], websockets)
# and uvicorn to serve its ASGI adapter. Pinned in the Makefile (interop-python-setup).
_PROBE = (
    "import importlib.metadata as m, acp.http.client, acp.http.asgi, acp.ws.client, h2, uvicorn;"
    "print(m.version('agent-client-protocol'))"
)
_checked: list[str] = []


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def require_official() -> str:
    """The official venv's python, checked once; skips (locally) or fails (CI) without it."""
    if _checked:
        return _checked[0]
    reason = None
    if not PYTHON.exists():
        reason = f"{VENV} is missing (run `make interop-python-setup`)"
    else:
        proc = subprocess.run([str(PYTHON), "-I", "-c", _PROBE], capture_output=True, text=True, timeout=60, env=_env())
        if proc.returncode != 0:
            reason = f"{VENV} lacks the remote extras (run `make interop-python-setup`): {proc.stderr.strip()[-300:]}"
        elif proc.stdout.strip() != SDK_VERSION:
            reason = f"{VENV} has agent-client-protocol {proc.stdout.strip()}, expected {SDK_VERSION}"
    if reason is not None:
        if under_ci():
            pytest.fail(f"official SDK interop tests cannot run under CI: {reason}", pytrace=False)
        pytest.skip(f"official SDK interop tests skipped: {reason} (under CI this is a failure)")
    _checked.append(str(PYTHON))
    return str(PYTHON)


def run_official_client(
    python: str, transport: str, url: str, config: dict[str, Any], timeout: float = 90.0
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """Run the official SDK's client (``transport``: ws or http) against ``url``; its summary."""
    argv = [python, "-I", str(PEER), "client", "--transport", transport, "--url", url, "--config", "-"]
    proc = subprocess.run(
        argv, input=json.dumps(config), capture_output=True, text=True, timeout=timeout, env=_env()
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"the official client printed no summary (exit {proc.returncode}); stderr:\n{proc.stderr}"
    summary: dict[str, Any] = json.loads(lines[-1])
    assert "fatal" not in summary, f"official client crashed: {summary}\nstderr:\n{proc.stderr}"
    return summary, proc


class OfficialServer:
    """A peer server in a subprocess (the official SDK's ASGI app under uvicorn, or the TS SDK's
    node:http server); ``url(scheme)`` is its /acp."""

    def __init__(self, proc: subprocess.Popen[str], port: int, stderr: _Lines) -> None:
        self.proc = proc
        self.port = port
        self._stderr = stderr

    def url(self, scheme: str) -> str:
        return f"{scheme}://127.0.0.1:{self.port}/acp"

    def wire(
        self, until: Callable[[list[dict[str, Any]]], bool] = bool, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Every request the server saw so far (method, http_version, headers as pairs), once
        ``until(records)`` holds (default: there is one) or ``timeout`` passed: the server
        logs each request when it arrives, but our thread pumping its stderr may lag behind."""

        def records() -> list[dict[str, Any]]:
            return [json.loads(line[5:]) for line in list(self._stderr) if line.startswith("WIRE ")]

        with self._stderr.changed:
            self._stderr.changed.wait_for(lambda: until(records()), timeout)
        return records()

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)


class _Lines(list[str]):
    """The lines read so far from a stream; ``changed`` is notified at each new one."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def append(self, line: str) -> None:
        with self.changed:
            super().append(line)
            self.changed.notify_all()


def _pump(stream: IO[str], sink: list[str] | queue.Queue[str]) -> None:
    for line in stream:
        if isinstance(sink, list):
            sink.append(line)
        else:
            sink.put(line)


@contextmanager
def official_server(python: str, start_timeout: float = 30.0) -> Iterator[OfficialServer]:
    """Start the official SDK's server; stop it (stdin closed, then killed if it lingers)."""
    with peer_server([python, "-I", str(PEER), "serve"], start_timeout=start_timeout) as server:
        yield server


@contextmanager
def peer_server(
    argv: list[str], *, cwd: Path | None = None, start_timeout: float = 30.0
) -> Iterator[OfficialServer]:
    """Start a peer server that prints ``PORT <n>`` when listening, logs ``WIRE {json}`` lines on
    stderr and stops when its stdin ends; stop it (stdin closed, then killed if it lingers)."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=cwd,
    )
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    lines: queue.Queue[str] = queue.Queue()
    stderr = _Lines()
    readers = [
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        try:
            first = lines.get(timeout=start_timeout)
        except queue.Empty:
            first = ""
        if not first.startswith("PORT "):
            proc.kill()
            proc.wait(10)
            for reader in readers:
                reader.join(10)
            raise AssertionError(f"the peer server {argv} did not start: {first!r}\n{''.join(stderr)}")
        yield OfficialServer(proc, int(first.split()[1]), stderr)
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        for reader in readers:
            reader.join(10)
