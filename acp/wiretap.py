"""Wire taps: see every line a connection reads and writes, for debugging.

A tap is any callable ``tap(direction, line)`` with direction ``"in"`` or ``"out"``. Taps run on
the thread that reads or writes the line, so keep them quick. :class:`JsonlWireTap` writes a
transcript, one JSON object per line: ``{"t": <seconds since the tap opened>, "dir": "in",
"msg": <the message>}`` (``"raw"`` holds the text instead when a line is not valid JSON).
"""

from __future__ import annotations

import os
import threading
import time
from typing import IO, Any

import msgspec

__all__ = ["JsonlWireTap"]


class _Entry(msgspec.Struct, omit_defaults=True):
    t: float
    dir: str
    msg: msgspec.Raw = msgspec.Raw()
    raw: str | None = None


class JsonlWireTap:
    """A tap that appends every line to a JSONL file (or an open binary stream)."""

    def __init__(self, target: str | os.PathLike[str] | IO[bytes]) -> None:
        if isinstance(target, (str, os.PathLike)):
            self._file: IO[bytes] = open(target, "ab")  # noqa: SIM115 - closed by close()
            self._owned = True
        else:
            self._file = target
            self._owned = False
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._encoder = msgspec.json.Encoder()

    def __call__(self, direction: str, line: bytes) -> None:
        entry = _Entry(round(time.monotonic() - self._start, 6), direction)
        line = line.rstrip(b"\r\n")  # the entry must stay on one line
        try:
            msgspec.json.decode(line)  # only a valid line is embedded as JSON
            entry.msg = msgspec.Raw(line)
        except msgspec.DecodeError:
            entry.raw = line.decode("utf-8", "replace")
        data = self._encoder.encode(entry) + b"\n"
        with self._lock:
            if not self._file.closed:
                self._file.write(data)
                self._file.flush()

    def close(self) -> None:
        """Close the file if the tap opened it."""
        with self._lock:
            if self._owned and not self._file.closed:
                self._file.close()

    def __enter__(self) -> JsonlWireTap:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
