"""`acp tap`: a recording proxy between a real client and a real agent, over real pipes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import acp
from acp import schema
from acp.tap import default_recording_path, exit_status
from acp.transport import ProcessTransport

ROOT = Path(__file__).resolve().parent.parent
HELPERS = ROOT / "tests" / "helpers"
TAP = [sys.executable, "-m", "acp", "tap"]
WAIT = 60.0


class RecordingProcess(ProcessTransport):
    """The client's end of the pipes, keeping every byte it reads and writes."""

    def __init__(self, argv: list[str], **kwargs: Any) -> None:
        super().__init__(argv, **kwargs)
        self.wrote = bytearray()
        self.read_bytes = bytearray()
        self._record_lock = threading.Lock()

    def read(self) -> bytes:
        data = super().read()
        with self._record_lock:
            self.read_bytes += data
        return data

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        with self._record_lock:
            self.wrote += bytes(data)


def recording(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_tap_between_a_client_and_the_scenario_agent_is_transparent(tmp_path: Path) -> None:
    out = tmp_path / "tap.jsonl"
    (tmp_path / "in.txt").write_text("héllo from a file\n", encoding="utf-8")
    transport = RecordingProcess(
        [*TAP, "--out", str(out), "--", sys.executable, str(HELPERS / "byte_recording_agent.py"), str(tmp_path)],
        cwd=ROOT, exit_timeout=WAIT,
    )
    chunks: list[str] = []

    def on_update(note: schema.SessionNotification) -> None:
        if isinstance(note.update, schema.AgentMessageChunk) and isinstance(note.update.content, schema.TextContent):
            chunks.append(note.update.content.text)

    client = (
        acp.SyncClient.builder().transport(transport)
        .session_update_handler(on_update)
        .request_permission_handler(acp.PermissionPolicy(allow={"edit"}))
        .read_text_file_handler(acp.LocalFiles([str(tmp_path)]).read_text_file)
        .build()
    )
    with client:
        client.initialize()
        session = client.new_session(cwd=str(tmp_path)).session_id
        assert client.prompt(session, "stream 5").stop_reason == "end_turn"
        assert client.prompt(session, "permission").stop_reason == "end_turn"   # agent -> client request
        assert client.prompt(session, f"read {tmp_path / 'in.txt'}").stop_reason == "end_turn"
        with pytest.raises(acp.RequestError):
            client.prompt(session, "error -32001")
    assert transport.returncode == 0  # the agent's exit status, passed through
    assert "chunk 5/5\n" in chunks and "permission: allowed\n" in chunks and "héllo from a file\n" in chunks

    agent_read = (tmp_path / "agent-read.bin").read_bytes()
    agent_wrote = (tmp_path / "agent-wrote.bin").read_bytes()
    assert agent_read == bytes(transport.wrote) and len(agent_read) > 1000   # byte for byte, both ways
    assert agent_wrote == bytes(transport.read_bytes) and len(agent_wrote) > 1000

    entries = recording(out)
    assert entries and all(set(e) == {"t", "dir", "msg"} for e in entries)
    times = [e["t"] for e in entries]
    assert times == sorted(times) and times[0] >= 0
    sent = [e["msg"] for e in entries if e["dir"] == "out"]
    received = [e["msg"] for e in entries if e["dir"] == "in"]
    assert sent == [json.loads(line) for line in agent_read.splitlines()]       # every line, in order
    assert received == [json.loads(line) for line in agent_wrote.splitlines()]
    methods = {m.get("method") for m in sent + received}
    assert {"initialize", "session/new", "session/prompt", "session/update", "session/request_permission",
            "fs/read_text_file"} <= methods


def run_tap(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*TAP, *args], input=stdin, capture_output=True, timeout=WAIT, cwd=ROOT, env=env)


ECHO = [sys.executable, str(HELPERS / "echo_child.py"), "echo"]


def test_tap_passes_stderr_and_the_exit_status_through(tmp_path: Path) -> None:
    done = run_tap("--out", str(tmp_path / "r.jsonl"), "--", "sh", "-c", "echo to-stderr >&2; echo out; exit 3")
    assert done.returncode == 3
    assert b"to-stderr\n" in done.stderr and done.stdout == b"out\n"
    assert recording(tmp_path / "r.jsonl") == [{"t": pytest.approx(0, abs=30), "dir": "in", "raw": "out"}]
    killed = run_tap("--out", str(tmp_path / "k.jsonl"), "--", "sh", "-c", "kill -TERM $$")
    assert killed.returncode == 128 + signal.SIGTERM
    assert exit_status(-9) == 137 and exit_status(0) == 0 and exit_status(2) == 2


def test_tap_end_of_input_closes_the_agents_stdin_and_bytes_pass_unchanged(tmp_path: Path) -> None:
    # Not JSON, not UTF-8, \r\n, a long line and no final newline: all forwarded exactly.
    payload = b'{"jsonrpc":"2.0","method":"x"}\r\nnot json \xff\xfe\n' + b"z" * 300_000 + b"\nlast"
    done = run_tap("--out", str(tmp_path / "r.jsonl"), "--", *ECHO, stdin=payload)
    assert done.returncode == 0, done.stderr
    assert done.stdout == payload
    entries = recording(tmp_path / "r.jsonl")
    out = [e for e in entries if e["dir"] == "out"]
    assert out[0]["msg"] == {"jsonrpc": "2.0", "method": "x"}
    assert out[1]["raw"] == "not json \ufffd\ufffd" and out[2]["raw"] == "z" * 300_000 and out[3]["raw"] == "last"
    assert len([e for e in entries if e["dir"] == "in"]) == 4


@pytest.mark.parametrize("target", ["unwritable", "disk-full"])
def test_a_failing_recording_never_breaks_the_session(tmp_path: Path, target: str) -> None:
    if target == "disk-full":
        if not os.path.exists("/dev/full"):
            pytest.skip("needs /dev/full (Linux) to simulate a full disk")
        out = "/dev/full"
    else:
        (tmp_path / "a-file").write_text("")
        out = str(tmp_path / "a-file" / "cannot-be-inside-a-file.jsonl")
    payload = b"".join(b'{"n":%d}\n' % n for n in range(2000))
    done = run_tap("--out", out, "--", *ECHO, stdin=payload)
    assert done.returncode == 0
    assert done.stdout == payload
    errors = [line for line in done.stderr.decode().splitlines() if "forwarding goes on" in line]
    assert len(errors) == 1 and out in errors[0], done.stderr


def test_tap_forwards_sigterm_to_the_agent(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*TAP, "--out", str(tmp_path / "r.jsonl"), "--", sys.executable, str(HELPERS / "echo_child.py"), "ignore-eof"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 128 + signal.SIGTERM  # the agent died of the forwarded SIGTERM
    finally:
        proc.kill()
        proc.communicate()


def test_recording_paths_one_file_per_run(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for _ in range(2):
        assert run_tap("--", *ECHO, stdin=b"{}\n", env=env).returncode == 0
    if sys.platform.startswith("linux"):
        files = sorted((tmp_path / "cache" / "acp" / "taps").iterdir())
        assert len(files) == 2 and all(f.name.startswith("tap-") and f.suffix == ".jsonl" for f in files)
        assert recording(files[0])[0] == {"t": pytest.approx(0, abs=30), "dir": "out", "msg": {}}
    folder = tmp_path / "runs"
    folder.mkdir()
    assert run_tap("--out", str(folder), "--", *ECHO, stdin=b"{}\n").returncode == 0
    assert len(list(folder.iterdir())) == 1
    assert default_recording_path().endswith(".jsonl")


def test_tap_needs_a_command_and_reports_a_missing_one(tmp_path: Path) -> None:
    assert run_tap().returncode == 2
    missing = run_tap("--out", str(tmp_path / "r.jsonl"), "--", str(tmp_path / "no-such-agent"))
    assert missing.returncode == 127 and b"cannot start" in missing.stderr
