"""Micro-benchmark of the message codec: one ``session/update`` line carrying an
``agent_message_chunk``, decoded into its typed value and encoded back.

    .venv/bin/python benchmarks/bench_codec.py [--number N] [--repeat R]

Decode = ``acp.rpc.decode_line`` (envelope, params kept raw) + ``decoder(SessionNotification)``;
encode = ``acp.rpc.Encoder().notification(method, struct)``. Prints the best of R runs of N
messages, in microseconds per message.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from acp.rpc import Encoder, Notification, decode_line
from acp.schema import AgentMessageChunk, SessionNotification, TextContent, decoder

LINE = (
    b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess_0123456789",'
    b'"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text",'
    b'"text":"Looking at main.py to see how the parser handles empty input\\u2026"}}}}\n'
)


def best_us_per_call(fn: Callable[[], object], number: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    notes = decoder(SessionNotification)
    encoder = Encoder()

    def decode() -> SessionNotification:
        message = decode_line(LINE)
        assert isinstance(message, Notification)
        return notes.decode(message.params)

    value = decode()
    assert isinstance(value.update, AgentMessageChunk) and isinstance(value.update.content, TextContent)

    def encode() -> bytes:
        return encoder.notification("session/update", value)

    def both() -> bytes:
        return encoder.notification("session/update", decode())

    again = decode_line(encode())
    assert isinstance(again, Notification) and notes.decode(again.params) == value, "round trip"

    print(f"message: {len(LINE)} bytes (session/update, agent_message_chunk)")
    for label, fn in (("decode", decode), ("encode", encode), ("decode+encode", both)):
        print(f"{label:>14}: {best_us_per_call(fn, args.number, args.repeat):6.2f} us/message")


if __name__ == "__main__":
    main()
