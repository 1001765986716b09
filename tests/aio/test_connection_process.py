"""The asyncio engine over real bytes between two processes: an AsyncConnection here, another
in tests/helpers/aio_peer.py, joined by the child's stdin/stdout pipes."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest

from acp.aio import AsyncConnection
from acp.errors import ConnectionClosedError
from tests.conftest import helper_argv
from tests.helpers.aio_pipes import spawn
from tests.helpers.aio_support import WAIT, run


def _drive(body: Any, exit_status: int = 0) -> None:
    procs: list[subprocess.Popen[bytes]] = []

    async def main() -> None:
        transport, proc = await spawn(helper_argv("aio_peer"))
        procs.append(proc)
        conn = AsyncConnection(transport, name="parent", request_timeout=WAIT)
        try:
            await body(conn)
        finally:
            await conn.close()

    try:
        run(main)
    finally:
        for proc in procs:
            assert proc.wait(WAIT) == exit_status  # 0: the peer ended on end of input, cleanly


def test_requests_and_answers_over_pipes() -> None:
    async def body(conn: AsyncConnection) -> None:
        conn.start()
        assert await conn.request("echo", {"x": "é" * 3}) == {"x": "é" * 3}
        answers = await asyncio.gather(*(conn.request("echo", {"i": i}) for i in range(200)))
        assert answers == [{"i": i} for i in range(200)]
        assert await conn.request("blocking", {}) == {"on_loop_thread": False}

    _drive(body)


def test_streamed_notifications_arrive_in_order_before_the_answer() -> None:
    async def body(conn: AsyncConnection) -> None:
        seen: list[int] = []
        conn.on_notification("chunk", lambda params: seen.append(params["i"]))
        conn.start()
        assert await conn.request("stream", {"n": 20000}) == {"sent": 20000}
        assert seen == list(range(20000))

    _drive(body)


def test_the_peer_calls_back_mid_request() -> None:
    async def body(conn: AsyncConnection) -> None:
        async def on_callback(params: Any, call: Any) -> Any:
            return params["q"] * 2

        conn.on_request("parent/callback", on_callback)
        conn.start()
        assert await conn.request("callback", {"q": 21}) == {"parent said": 42}

    _drive(body)


def test_cancel_request_over_pipes() -> None:
    async def body(conn: AsyncConnection) -> None:
        reports: asyncio.Queue[Any] = asyncio.Queue()
        conn.on_notification("peer/handler_cancelled", reports.put_nowait)
        conn.start()
        call = asyncio.ensure_future(conn.request("forever", {}))
        await asyncio.sleep(0)
        await conn.request("echo", {})  # the forever request was read before this one
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        report = await asyncio.wait_for(reports.get(), WAIT)
        assert report["flag"] is True
        assert await conn.request("echo", {"after": 1}) == {"after": 1}

    _drive(body)


def test_half_close_lets_the_peer_finish_and_answer() -> None:
    async def body(conn: AsyncConnection) -> None:
        conn.start()
        call = asyncio.ensure_future(conn.request("forever", {}))
        await conn.request("echo", {})
        conn._transport.close_write()  # type: ignore[attr-defined]  # the peer reads EOF
        # Its handler sees the cancelled flag and still answers; then the peer exits.
        assert await call == {"ended": "cancelled flag"}
        assert await conn.wait_closed(WAIT)

    _drive(body)


def test_peer_exit_fails_pending_calls() -> None:
    async def body(conn: AsyncConnection) -> None:
        closed = asyncio.Event()
        conn.on_close(closed.set)
        conn.start()
        call = asyncio.ensure_future(conn.request("forever", {}))
        await conn.request("echo", {})
        conn.notify("exit")
        with pytest.raises(ConnectionClosedError, match="closed by peer"):
            await call
        await asyncio.wait_for(closed.wait(), WAIT)
        assert conn.is_closed

    _drive(body, exit_status=3)
