"""An agent-like child that speaks through acp.aio.transport.StdioTransport (the asyncio twin
of stdio_child.py).

    aio_stdio_child.py close     end with close(): print() goes to the real stdout afterwards
    aio_stdio_child.py half      end with close_write() then close(): stdout stays on stderr
    aio_stdio_child.py pending   close() while a read waits; report on the real stdout
    aio_stdio_child.py burst N   write N lines of 100 bytes at once, then close() at once

close / half: protocol lines it writes, in order, stray output in between (print, a C-level
write to fd 1, a child process inheriting fd 1) and an attempt to steal stdin:
    {"hello":1}
    {"second":"refused"}     a second StdioTransport (async, then sync) was refused
    {"stdin":"devnull"}      sys.stdin read EOF at once instead of protocol bytes
    {"nonblocking":[R,W]}    whether the transport made its stdin / stdout fds non-blocking
    <every line it reads, echoed (awaiting drain() after each chunk)>
    {"eof":true}             after read() returned b""
then, after close(), print("after close blocking=<fd 0 blocking>,<fd 1 blocking>").

pending: one line of JSON on the real stdout after close(): what the pending read returned,
the error of a write after close, and the tasks left running.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from acp import transport as sync_transport
from acp.aio.transport import StdioTransport
from acp.errors import ConnectionClosedError


async def echo(mode: str) -> None:
    t = StdioTransport()
    t.write(b'{"hello":1}\n')
    print("stray print")
    os.write(1, b"stray fd1\n")
    subprocess.run([sys.executable, "-c", "print('stray grandchild')"], check=True)
    refused = 0
    for other in (StdioTransport, sync_transport.StdioTransport):
        try:
            other()
        except RuntimeError:
            refused += 1
    if refused == 2:
        t.write(b'{"second":"refused"}\n')
    if sys.stdin.buffer.read() == b"":
        t.write(b'{"stdin":"devnull"}\n')
    flags = [not os.get_blocking(fd) for fd in (t._read_fd, t._write_fd) if fd is not None]
    t.write(json.dumps({"nonblocking": flags}, separators=(",", ":")).encode() + b"\n")
    buf = b""
    while chunk := await t.read():
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            t.write(line + b"\n")
        await t.drain()
    t.write(b'{"eof":true}\n')
    if mode == "half":
        t.close_write()
    await t.close()
    print(f"after close blocking={os.get_blocking(0)},{os.get_blocking(1)}", flush=True)


async def pending() -> None:
    t = StdioTransport()
    reader = asyncio.ensure_future(t.read())
    await asyncio.sleep(0)  # the reader now waits for input that never comes
    waiting = not reader.done()
    await t.close()
    result = await reader
    try:
        t.write(b"late\n")
        error = ""
    except ConnectionClosedError as exc:
        error = str(exc)
    left = [repr(task) for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    report = {"waiting": waiting, "read": result.decode(), "write": error, "tasks": left}
    print(json.dumps(report), flush=True)


async def burst(lines: int) -> None:
    t = StdioTransport()
    t.write(b"".join(b"%099d\n" % i for i in range(lines)))
    await t.close()  # waits until the peer has taken it all


def main() -> None:
    mode = sys.argv[1]
    if mode == "burst":
        asyncio.run(burst(int(sys.argv[2])))
    else:
        asyncio.run(pending() if mode == "pending" else echo(mode))


if __name__ == "__main__":
    main()
