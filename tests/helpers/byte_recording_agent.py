"""The scenario agent over stdio, keeping every byte it reads and writes (for tests/test_tap.py).

byte_recording_agent.py FOLDER    writes FOLDER/agent-read.bin and FOLDER/agent-wrote.bin
"""

from __future__ import annotations

import os
import sys
import threading
from typing import IO

from acp.examples.scenario_agent import build_agent
from acp.transport import StdioTransport


class RecordingStdio(StdioTransport):
    """stdio, with a copy of the raw bytes in both directions."""

    def __init__(self, read_log: IO[bytes], write_log: IO[bytes]) -> None:
        super().__init__()
        self._read_log, self._write_log = read_log, write_log
        self._log_lock = threading.Lock()

    def read(self) -> bytes:
        data = super().read()
        with self._log_lock:
            self._read_log.write(data)
            self._read_log.flush()
        return data

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        with self._log_lock:
            self._write_log.write(bytes(data))
            self._write_log.flush()


def main() -> int:
    folder = sys.argv[1]
    with open(os.path.join(folder, "agent-read.bin"), "wb") as read_log, \
            open(os.path.join(folder, "agent-wrote.bin"), "wb") as write_log:
        build_agent().serve(RecordingStdio(read_log, write_log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
