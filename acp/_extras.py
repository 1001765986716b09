"""Optional dependencies that explain themselves: a remote transport used without its extra
raises an :class:`ImportError` that names the ``pip install`` line to run.

The extras are declared in pyproject.toml: ``ws`` (websockets) for WebSocket, ``http`` (httpx
for the client, uvicorn for ``serve_http``) for Streamable HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["EXTRAS", "MissingExtraError", "need"]

#: The distribution's extras and the top-level modules each brings.
EXTRAS = {"ws": ("websockets",), "http": ("httpx", "httpcore", "uvicorn", "h11", "anyio")}


class MissingExtraError(ImportError):
    """A feature needs an optional dependency that is not installed; the message says which
    extra to install (``pip install 'acp-sync[ws]'``)."""


@contextmanager
def need(extra: str, feature: str) -> Iterator[None]:
    """Import what ``feature`` needs inside this block: a module of ``extra`` that is missing
    raises :class:`MissingExtraError` naming the ``pip install`` line."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in EXTRAS[extra]:
            raise
        raise MissingExtraError(
            f"{feature} needs the optional dependency {missing!r}: pip install 'acp-sync[{extra}]'",
            name=missing,
        ) from exc
