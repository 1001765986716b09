"""Rate-limited logging of bad input: a misbehaving peer cannot flood the log.

Every bad inbound line is still answered as the spec says; only its WARNING is limited. The
first :data:`LOGGED_IN_FULL` of a connection are logged one by one; after that one summary
line each time the count reaches the next power of ten (100, 1,000, ...), and one more when the
connection ends. Counted, not timed: the core has no clock.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["LOGGED_IN_FULL", "BadInputLog"]

_log = logging.getLogger("acp.rpc")

#: Bad lines of one connection logged one by one before summaries take over.
LOGGED_IN_FULL = 10


class BadInputLog:
    """Counts one connection's bad inbound lines and logs them within the limit."""

    __slots__ = ("name", "count", "unlogged", "_next_summary")

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        """Bad lines seen in all."""
        self.unlogged = 0
        """Bad lines seen since the last line logged about them."""
        self._next_summary = 100

    def report(self, message: str, *args: Any) -> None:
        """One more bad line: ``message % args`` says what was wrong with it."""
        self.count += 1
        if self.count <= LOGGED_IN_FULL:
            _log.warning("%s: " + message, self.name, *args)
            return
        self.unlogged += 1
        if self.count == LOGGED_IN_FULL + 1:
            _log.warning("%s: more bad input from the peer; logging only a count from now on", self.name)
        if self.count >= self._next_summary:
            self._next_summary *= 10
            self.summary()

    def summary(self) -> None:
        """Log how many bad lines went unlogged since the last summary (at the end, say)."""
        if self.unlogged:
            _log.warning("%s: %d more bad input lines (%d in all)", self.name, self.unlogged, self.count)
            self.unlogged = 0
