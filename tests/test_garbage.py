"""A prompt turn leaves no reference cycle behind: everything it made is freed by reference
counting when it ends, so a busy agent or client never feeds the cyclic garbage collector
(which otherwise runs every few hundred prompts and, as survivors pile up, walks the whole
heap). Both facades, both runtimes, agent and client in one process over real pipes."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from acp import schema
from acp.agent import AsyncAgent, PromptContext, SyncAgent
from acp.client import AsyncClient, SyncClient

WAIT = 10.0
TURNS = 60


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _new_session(request: schema.NewSessionRequest, ctx: Any) -> schema.NewSessionResponse:
    return schema.NewSessionResponse(session_id="s1")


def _unreachable_after(turns: Any) -> int:
    """Objects only the cyclic collector can free, made while ``turns()`` ran."""
    gc.collect()
    turns()
    return gc.collect()


def test_threaded_prompt_turns_leave_no_cycles(no_thread_leak: None, no_gc: None) -> None:
    def prompt(request: schema.PromptRequest, ctx: PromptContext) -> None:
        ctx.send_message("hi")

    agent = SyncAgent.builder().new_session_handler(_new_session).prompt_handler(prompt).build()
    updates: list[Any] = []
    client = (
        SyncClient.builder()
        .transport(agent.serve_in_process())
        .session_update_handler(updates.append)
        .request_timeout(WAIT)
        .build()
    )
    try:
        client.initialize()
        sid = client.new_session("/work").session_id
        client.prompt(sid, "warm up")  # threads, lazily built decoders

        def turns() -> None:
            for _ in range(TURNS):
                assert client.prompt(sid, "go").stop_reason == "end_turn"

        # Before: seven objects per turn (the call, its turn, the turn's token and locks, the
        # cancel callback and its list) were a cycle.
        found = _unreachable_after(turns)
        assert found < TURNS
        assert len(updates) == TURNS + 1
    finally:
        client.close()
        agent.close()


def test_asyncio_prompt_turns_leave_no_cycles(no_gc: None) -> None:
    async def prompt(request: schema.PromptRequest, ctx: Any) -> None:
        ctx.send_message("hi")

    async def new_session(request: schema.NewSessionRequest, ctx: Any) -> schema.NewSessionResponse:
        return _new_session(request, ctx)

    async def main() -> int:
        agent = AsyncAgent.builder().new_session_handler(new_session).prompt_handler(prompt).build()
        updates: list[Any] = []

        async def on_update(update: Any) -> None:
            updates.append(update)

        transport = await agent.serve_in_process()
        client: AsyncClient = await AsyncClient.builder().transport(transport).session_update_handler(on_update).build()
        try:
            await client.initialize()
            sid = (await client.new_session("/work")).session_id
            await client.prompt(sid, "warm up")
            gc.collect()
            for _ in range(TURNS):
                assert (await client.prompt(sid, "go")).stop_reason == "end_turn"
            found = gc.collect()
            assert len(updates) == TURNS + 1
            return found
        finally:
            await client.close()
            await agent.close()

    assert asyncio.run(asyncio.wait_for(main(), WAIT)) < TURNS
