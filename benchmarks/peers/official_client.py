"""The client on the official Python SDK, driving official_agent.py; an asyncio mirror of
``_common.run_sync`` (the concurrent scenario runs 8 tasks instead of 8 threads).

Runs in benchmarks/.venv-official, where ``acp`` is that SDK, not ours.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    CONCURRENCY,
    CWD,
    FILE_CONTENT,
    WARMUP_PROMPTS,
    ChunkCounter,
    CpuMeter,
    agent_pid,
    emit,
    parse_args,
    peak_rss_mib,
)

from acp import PROTOCOL_VERSION, ReadTextFileResponse, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, FileSystemCapabilities

AGENT = str(Path(__file__).with_name("official_agent.py"))
Metrics = tuple[dict[str, float], int]


class BenchClient:
    def __init__(self) -> None:
        self.chunks = ChunkCounter()
        self.reads = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.chunks(update.content.text)

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any) -> ReadTextFileResponse:
        self.reads += 1
        return ReadTextFileResponse(content=FILE_CONTENT)


class Driver:
    def __init__(self, conn: Any, client: BenchClient) -> None:
        self.conn = conn
        self.client = client

    async def new_session(self) -> str:
        return str((await self.conn.new_session(cwd=CWD, mcp_servers=[])).session_id)

    async def prompt(self, session_id: str, text: str) -> str:
        return str((await self.conn.prompt(session_id=session_id, prompt=[text_block(text)])).stop_reason)

    async def warm(self) -> str:
        session_id = await self.new_session()
        for _ in range(WARMUP_PROMPTS):
            await self.prompt(session_id, "warm")
        return session_id

    async def rtt(self, n: int) -> Metrics:
        session_id = await self.warm()
        ok = 0
        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        for _ in range(n):
            ok += await self.prompt(session_id, "hello") == "end_turn"
        elapsed = time.perf_counter() - start
        return {"prompts_per_s": n / elapsed, **cpu.stop(n)}, ok

    async def stream(self, n: int) -> Metrics:
        session_id = await self.warm()
        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        stop = await self.prompt(session_id, f"stream {n}")
        elapsed = time.perf_counter() - start
        metrics = {"chunks_per_s": n / elapsed, **cpu.stop(n)}
        chunks = self.client.chunks
        ok = stop == "end_turn" and chunks.disorder == 0
        return metrics, chunks.count if ok else -1

    async def read(self, n: int) -> Metrics:
        session_id = await self.warm()
        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        stop = await self.prompt(session_id, f"read {n}")
        elapsed = time.perf_counter() - start
        metrics = {"reads_per_s": n / elapsed, **cpu.stop(n)}
        return metrics, self.client.reads if stop == "end_turn" else -1

    async def sessions(self, n: int) -> Metrics:
        await self.warm()
        ok = 0
        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        for _ in range(n):
            ok += await self.prompt(await self.new_session(), "hello") == "end_turn"
        elapsed = time.perf_counter() - start
        return {"sessions_per_s": n / elapsed, **cpu.stop(n)}, ok

    async def concurrent(self, n: int) -> Metrics:
        await self.warm()
        sessions = [await self.new_session() for _ in range(CONCURRENCY)]
        shares = [n // CONCURRENCY + (i < n % CONCURRENCY) for i in range(CONCURRENCY)]

        async def worker(session_id: str, share: int) -> int:
            return sum([await self.prompt(session_id, "hello") == "end_turn" for _ in range(share)])

        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        done = await asyncio.gather(*(worker(s, k) for s, k in zip(sessions, shares, strict=True)))
        elapsed = time.perf_counter() - start
        return {"prompts_per_s": n / elapsed, **cpu.stop(n)}, sum(done)

    async def memory(self, n: int) -> Metrics:
        pid = agent_pid()
        await self.new_session()
        idle = peak_rss_mib(pid)
        for _ in range(n - 1):
            await self.new_session()
        return {"rss_idle_mib": idle, "rss_sessions_mib": peak_rss_mib(pid)}, n


async def main(scenario: str, n: int) -> None:
    client = BenchClient()
    start = time.perf_counter()
    async with spawn_agent_process(client, sys.executable, AGENT) as (conn, _process):
        capabilities = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=False))
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities)
        if scenario == "startup":
            metrics: Metrics = ({"startup_ms": (time.perf_counter() - start) * 1000}, 1)
        else:
            metrics = await getattr(Driver(conn, client), scenario)(n)
    emit(*metrics)


if __name__ == "__main__":
    asyncio.run(main(*parse_args()))
