"""An AsyncConnection peer on this process's stdin/stdout (real pipes), for the asyncio
runtime's process tests. Methods: echo, stream {n}, callback (asks the parent back), forever
(until cancelled; reports the CancelledError it saw), blocking (runs on the executor); the
notification exit ends the process at once (exit status 3)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from aio_pipes import open_stdio

from acp.aio import AsyncConnection, AsyncInboundCall


async def main() -> None:
    conn = AsyncConnection(await open_stdio(), name="aio-peer")
    loop_thread = threading.get_ident()

    def stream(params: Any, call: AsyncInboundCall) -> Any:
        notify = conn.notify
        for i in range(params["n"]):
            notify("chunk", {"i": i})
        return {"sent": params["n"]}

    async def callback(params: Any, call: AsyncInboundCall) -> Any:
        return {"parent said": await conn.request("parent/callback", params)}

    async def forever(params: Any, call: AsyncInboundCall) -> Any:
        try:
            await call.cancelled.wait()  # set at end of input: the peer may still answer
            return {"ended": "cancelled flag"}
        except asyncio.CancelledError:
            conn.notify("peer/handler_cancelled", {"id": call.id, "flag": call.is_cancelled})
            raise

    def blocking(params: Any, call: AsyncInboundCall) -> Any:
        return {"on_loop_thread": threading.get_ident() == loop_thread}

    conn.on_request("echo", lambda params, call: params)
    conn.on_request("stream", stream)
    conn.on_request("callback", callback)
    conn.on_request("forever", forever)
    conn.on_request("blocking", conn.blocking(blocking))
    conn.on_notification("exit", lambda params: os._exit(3))
    conn.start()
    await conn.wait_closed()
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
