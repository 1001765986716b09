"""Line framing for newline-delimited JSON-RPC: bytes in, whole lines out.

The framer never holds more than ``max_line_bytes`` of one line: when a line grows past the cap,
what was buffered is dropped at once and the rest of that line is skipped as it arrives, so a
peer cannot make us buffer a huge line whole. The skipped line is reported as a
:class:`LineTooLong` item in the output, in its place among the other lines.
"""

from __future__ import annotations

import msgspec

__all__ = ["DEFAULT_MAX_LINE_BYTES", "LineFramer", "LineTooLong"]

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024


# A msgspec Struct, not a dataclass: defining a dataclass costs ~0.35 ms of import time.
class LineTooLong(msgspec.Struct, frozen=True):
    """A line longer than the cap was discarded; ``size`` is how many bytes it had."""

    size: int


class LineFramer:
    """Splits a byte stream into lines.

    ``feed(data)`` returns the complete lines found so far, without their ``\\n`` (and without a
    trailing ``\\r``); blank lines are skipped. ``end()`` returns the last line when the stream
    ended without a final newline. ``whole_max`` is the longest read a reader may take as one
    whole line without feeding it (when it is one): ``max_line_bytes`` while no part of a line
    is held or being skipped, else 0.
    """

    __slots__ = ("max_line_bytes", "whole_max", "_parts", "_pending", "_skipping")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes <= 0:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes = max_line_bytes
        # The incomplete last line, kept as chunks so that a line arriving in many small reads
        # is joined once (not copied on every read).
        self._parts: list[bytes] = []
        self._pending = 0
        # While > 0, we are inside an over-long line and this many bytes were dropped so far.
        self._skipping = 0
        self.whole_max = max_line_bytes

    def feed(self, data: bytes) -> list[bytes | LineTooLong]:
        """Add bytes; return the lines they complete (and LineTooLong markers)."""
        newline = data.find(b"\n")
        out: list[bytes | LineTooLong] = []
        if newline < 0:
            self._hold(data)
            self.whole_max = 0
            return out
        if self._skipping:
            out.append(LineTooLong(self._skipping + newline))
            self._skipping = 0
            data = data[newline + 1 :]
        elif self._parts:
            self._parts.append(data[:newline])
            self._emit(b"".join(self._parts), out)
            self._parts = []
            self._pending = 0
            data = data[newline + 1 :]
        lines = data.split(b"\n")
        rest = lines.pop()
        if len(data) <= self.max_line_bytes and b"\r" not in data:
            # The common case, without a method call per line: no line can be over the cap.
            if len(lines) == 1:  # one line per read (a request/answer round trip): no comprehension call
                line = lines[0]
                if line and not line.isspace():
                    out.append(line)
            else:
                out += [line for line in lines if line and not line.isspace()]
        else:
            for line in lines:
                self._emit(line, out)
        if rest:
            self._hold(rest)
        self.whole_max = 0 if self._parts or self._skipping else self.max_line_bytes
        return out

    def end(self) -> list[bytes | LineTooLong]:
        """The stream ended: return the unterminated last line, if any."""
        out: list[bytes | LineTooLong] = []
        if self._skipping:
            out.append(LineTooLong(self._skipping))
            self._skipping = 0
        elif self._parts:
            self._emit(b"".join(self._parts), out)
        self._parts = []
        self._pending = 0
        self.whole_max = self.max_line_bytes
        return out

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete line (for tests and diagnostics)."""
        return self._pending

    def _hold(self, data: bytes) -> None:
        if self._skipping:
            self._skipping += len(data)
            return
        self._pending += len(data)
        if self._pending > self.max_line_bytes:
            self._skipping = self._pending
            self._parts = []
            self._pending = 0
        else:
            self._parts.append(data)

    def _emit(self, line: bytes, out: list[bytes | LineTooLong]) -> None:
        if line[-1:] == b"\r":
            line = line[:-1]
        if len(line) > self.max_line_bytes:
            out.append(LineTooLong(len(line)))
        elif line and not line.isspace():
            out.append(line)
