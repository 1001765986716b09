"""An agent-like child that speaks through acp.transport.StdioTransport.

    stdio_child.py close   end with close(): print() goes to the real stdout again afterwards
    stdio_child.py half    end with close_write() then close(): stdout stays on stderr

It writes protocol lines only through the transport and, in between, tries every way of
polluting stdout (print, a C-level write to fd 1, a child process inheriting fd 1) and of
stealing stdin (reading sys.stdin). Protocol lines it writes, in order:
    {"hello":1}
    {"second":"refused"}     a second StdioTransport was refused
    {"stdin":"devnull"}      sys.stdin read EOF at once instead of protocol bytes
    <every line it reads, echoed>
    {"eof":true}             after read() returned b""
"""

from __future__ import annotations

import os
import subprocess
import sys

from acp.transport import StdioTransport


def main() -> None:
    mode = sys.argv[1]
    t = StdioTransport()
    t.write(b'{"hello":1}\n')
    print("stray print")
    os.write(1, b"stray fd1\n")
    subprocess.run([sys.executable, "-c", "print('stray grandchild')"], check=True)
    try:
        StdioTransport()
    except RuntimeError:
        t.write(b'{"second":"refused"}\n')
    if sys.stdin.buffer.read() == b"":
        t.write(b'{"stdin":"devnull"}\n')
    buf = b""
    while True:
        chunk = t.read()
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            t.write(line + b"\n")
    t.write(b'{"eof":true}\n')
    if mode == "half":
        t.close_write()
    t.close()
    print("after close", flush=True)


if __name__ == "__main__":
    main()
