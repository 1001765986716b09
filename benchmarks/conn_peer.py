"""The same peer as bare_peer.py, built on acp.connection over stdio."""

from __future__ import annotations

from typing import Any

from acp.connection import Connection, InboundCall
from acp.transport import StdioTransport


def main() -> None:
    conn = Connection(StdioTransport(), name="bench-peer")

    def stream(params: Any, call: InboundCall) -> Any:
        notify = conn.notify
        for i in range(params["n"]):
            notify("chunk", {"sessionId": "s", "i": i})
        return {"sent": params["n"]}

    conn.on_request("echo", lambda params, call: params)
    conn.on_request("stream", stream)
    conn.start()
    conn.wait_closed()
    conn.close()


if __name__ == "__main__":
    main()
