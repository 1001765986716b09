"""The ``rt`` fixture: each behaviour test runs on every runtime it applies to."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.behaviour.harness import RUNTIMES, RawPeer, Runtime, make_runtime


@pytest.fixture(params=list(RUNTIMES))
def runtime_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    marker = request.node.get_closest_marker("runtimes")
    if marker is not None and name not in marker.args:
        pytest.skip(f"not a promise of the {name} runtime (needs {', '.join(marker.args)})")
    return name


@pytest.fixture
def make(runtime_name: str) -> Iterator[Any]:
    """``make(**options)`` -> (runtime, peer), closed at the end; no thread outlives them."""
    before = set(threading.enumerate())
    made: list[tuple[Runtime, RawPeer]] = []

    def factory(**options: Any) -> tuple[Runtime, RawPeer]:
        pair = make_runtime(runtime_name, **options)
        made.append(pair)
        return pair

    yield factory
    for runtime, peer in made:
        runtime.close()
        peer.close()
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()
              and not t.name.startswith(("asyncio_", "ThreadPoolExecutor"))]
    for thread in leaked:
        thread.join(5)
    assert not [t.name for t in leaked if t.is_alive()], "threads outlived close()"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "runtimes(*names): the runtimes a behaviour test applies to")
