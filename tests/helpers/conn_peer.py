"""A peer process built on acp.connection over stdio, for the engine's subprocess tests.

Methods it answers:
  echo(params)                 -> params
  stream({n, method})          -> sends n notifications `method` {"i": k} first, then {"sent": n}
  ask_back({method, params})   -> makes a request to the caller, returns its result
  wait_cancel({})              -> blocks until cancelled (answered -32800 by the engine)
  crash({})                    -> exits the process at once (no answer)
Notifications: `note` is counted; `report` answers nothing but makes the peer send `count`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from acp.connection import Connection, InboundCall
from acp.transport import StdioTransport


def main() -> None:
    conn = Connection(StdioTransport(), name="peer", request_timeout=30)
    notes: list[Any] = []

    def stream(params: Any, call: InboundCall) -> Any:
        for k in range(params["n"]):
            conn.notify(params.get("method", "chunk"), {"i": k})
        return {"sent": params["n"]}

    conn.on_request("echo", lambda params, call: params)
    conn.on_request("stream", stream)
    conn.on_request("ask_back", lambda p, call: conn.request(p["method"], p.get("params")))
    conn.on_request("wait_cancel", lambda p, call: call.cancelled.wait(30) and None)
    conn.on_request("crash", lambda p, call: os._exit(3))
    conn.on_notification("note", lambda p: notes.append(p))
    conn.on_notification("report", lambda p: conn.notify("count", {"n": len(notes)}))
    conn.start()
    conn.wait_closed()
    conn.close(graceful=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
