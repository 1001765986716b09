"""Tests of reads of updates decoded in one go (``OnePass.decode_read``): the lines such a read
holds, and a way to see which reads took that path."""

from __future__ import annotations

import json
from typing import Any

from acp import rpc


def update_line(session: str, body: dict[str, Any]) -> bytes:
    """A ``session/update`` line as our encoder (and the TypeScript SDK) writes it."""
    params = {"sessionId": session, "update": body}
    return b'{"jsonrpc":"2.0","method":"session/update","params":' + json.dumps(params, separators=(",", ":")).encode() + b"}\n"


def chunk_line(session: str, text: str) -> bytes:
    """An ``agent_message_chunk`` update line."""
    return update_line(session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def lenient_line(session: str) -> bytes:
    """An update only the lenient rebuild accepts (a tool call with a bad ``status``)."""
    return update_line(session, {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x", "status": 7})


def count_reads_in_one_go(endpoint: rpc.Endpoint) -> list[int]:
    """Watch ``endpoint``'s one-pass decoder (a typed ``session/update`` handler must be
    registered): the list returned gets the number of updates of every read decoded in one go."""
    one_pass = endpoint.one_pass
    assert one_pass is not None
    one_pass._build()
    whole = one_pass.decode_lines
    taken: list[int] = []

    def counting(lines: list[Any]) -> Any:
        out = whole(lines)
        if out is not rpc.MISS:
            taken.append(len(out))
        return out

    one_pass.decode_lines = counting
    return taken
