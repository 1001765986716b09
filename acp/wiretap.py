"""Wire taps: see every line a connection reads and writes, for debugging.

A tap is any callable ``tap(direction, line)`` with direction ``"in"`` or ``"out"``. Taps run on
the thread that reads or writes the line, so keep them quick. :class:`JsonlWireTap` writes a
transcript, one JSON object per line: ``{"t": <seconds since the tap opened>, "dir": "in",
"msg": <the message>}`` (``"raw"`` holds the text instead when a line is not valid JSON).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

import msgspec

_log = logging.getLogger("acp.wiretap")

__all__ = ["JsonlWireTap", "WireTap", "encode_entry", "open_tap", "tap_lines", "tap_read"]

WireTap = Callable[[str, bytes], None]
"""Receives ("in" | "out", line) for every line, for debugging."""


class _Entry(msgspec.Struct, omit_defaults=True):
    t: float
    dir: str
    msg: msgspec.Raw = msgspec.Raw()
    raw: str | None = None


_encoder = msgspec.json.Encoder()


def encode_entry(seconds: float, direction: str, line: bytes) -> bytes:
    """One transcript line (with its newline) for ``line`` (without its line ending) seen
    ``seconds`` after the recording began: embedded as JSON when valid, else as ``raw`` text."""
    entry = _Entry(round(seconds, 6), direction)
    try:
        msgspec.json.decode(line)  # only a valid line is embedded as JSON
        entry.msg = msgspec.Raw(line)
    except msgspec.DecodeError:
        entry.raw = line.decode("utf-8", "replace")
    return _encoder.encode(entry) + b"\n"


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

    def __call__(self, direction: str, line: bytes) -> None:
        # rstrip: the entry must stay on one line
        data = encode_entry(time.monotonic() - self._start, direction, line.rstrip(b"\r\n"))
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


def open_tap(
    wire_tap: WireTap | str | os.PathLike[str] | None,
) -> tuple[WireTap | None, Callable[[], None] | None]:
    """A connection's ``wire_tap=`` option as a tap, and the close function of the file it
    opened (a path names a :class:`JsonlWireTap` the connection owns; None otherwise)."""
    if isinstance(wire_tap, (str, os.PathLike)):
        tap = JsonlWireTap(wire_tap)
        return tap, tap.close
    return wire_tap, None


def tap_read(tap: WireTap, scheduler: Any, data: bytes) -> list[Any]:
    """What ``scheduler.decode_read(data)`` gives (an :class:`acp.rpc.Scheduler`), each line
    the read completes handed to ``tap`` first: a tapped runtime's read."""
    lines = scheduler.frame(data)
    tap_lines(tap, "in", lines)
    return scheduler.decode_lines(lines)  # type: ignore[no-any-return]


def tap_lines(tap: WireTap, direction: str, data: bytes | bytearray | Iterable[Any]) -> None:
    """Hand ``tap`` each line of ``data``: written bytes (whole lines, each ending with a
    newline) or the items a framer read (lines; anything else is skipped). A failing tap is
    logged and never stops the connection."""
    if isinstance(data, bytearray):  # a big batch, handed over uncopied: the tap gets bytes
        data = bytes(data)
    lines = data.split(b"\n")[:-1] if isinstance(data, bytes) else data
    for line in lines:
        if type(line) is bytes:
            try:
                tap(direction, line)
            except Exception:
                _log.exception("wire tap failed")
