"""The client at the engine level on asyncio: acp.aio.AsyncConnection over a spawned
aconn_agent.py, the scenarios of ``_common`` (rtt, stream, read, sessions) awaited on one loop."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    CWD,
    READ_PATH,
    WARMUP_PROMPTS,
    ChunkCounter,
    CpuMeter,
    emit,
    parse_args,
    read_answer,
    unavailable,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "helpers"))
from aio_pipes import spawn  # noqa: E402

from acp.aio import AsyncConnection, AsyncInboundCall  # noqa: E402

AGENT = [sys.executable, str(Path(__file__).with_name("aconn_agent.py"))]


async def run(scenario: str, n: int) -> None:
    transport, proc = await spawn(AGENT)
    conn = AsyncConnection(transport, name="bench-client")
    chunks = ChunkCounter()
    reads = [0]

    def on_update(params: Any) -> None:
        chunks(params["update"]["content"]["text"])

    def on_read(params: Any, call: AsyncInboundCall) -> Any:
        reads[0] += 1
        return {"content": read_answer(params["path"])}

    conn.on_notification("session/update", on_update)
    conn.on_request("fs/read_text_file", on_read)
    conn.start()
    request = conn.request

    async def new_session() -> str:
        return str((await request("session/new", {"cwd": CWD, "mcpServers": []}))["sessionId"])

    async def prompt(session_id: str, text: str) -> str:
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        return str((await request("session/prompt", params))["stopReason"])

    try:
        capabilities = {"fs": {"readTextFile": True, "writeTextFile": False}}
        await request("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})
        session_id = await new_session()
        for _ in range(WARMUP_PROMPTS):
            await prompt(session_id, "warm")
        cpu = CpuMeter(proc.pid)
        cpu.start()
        start = time.perf_counter()
        if scenario == "rtt":
            ok = 0
            for _ in range(n):
                ok += await prompt(session_id, "hello") == "end_turn"
            metrics, count = {"prompts_per_s": n / (time.perf_counter() - start), **cpu.stop(n)}, ok
        elif scenario == "stream":
            stop = await prompt(session_id, f"stream {n}")
            metrics = {"chunks_per_s": n / (time.perf_counter() - start), **cpu.stop(n)}
            count = chunks.count if stop == "end_turn" and chunks.disorder == 0 else -1
        elif scenario == "read":
            stop = await prompt(session_id, f"read {n} {READ_PATH}")
            metrics = {"reads_per_s": n / (time.perf_counter() - start), **cpu.stop(n)}
            count = reads[0] if stop == "end_turn" else -1
        elif scenario == "sessions":
            ok = 0
            for _ in range(n):
                ok += await prompt(await new_session(), "hello") == "end_turn"
            metrics, count = {"sessions_per_s": n / (time.perf_counter() - start), **cpu.stop(n)}, ok
        else:
            unavailable(f"aconn has no {scenario} scenario")
            return
    finally:
        await conn.close(graceful=True)
        proc.wait(10)
    emit(metrics, count)


if __name__ == "__main__":
    scenario, n = parse_args()
    asyncio.run(run(scenario, n))
