"""Text that is safe to show on a terminal: what an agent or a recording says may hold control
characters (an escape that switches to the alternate screen, a bidi override that reorders the
line), and tools print it."""

from __future__ import annotations

import re

__all__ = ["safe"]

# C0 controls (but none of them is needed in one line of output), DEL, C1 controls, and the
# Unicode bidirectional overrides and isolates, which reorder what is displayed.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def safe(text: str) -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\u202e``):
    safe to print on a terminal."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                       text)
