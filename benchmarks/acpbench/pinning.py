"""``--cpus LIST``: every client (and so the agent it spawns, which inherits the affinity) runs
under ``taskset -c LIST``. Pinned to one CPU, a thread wake-up cannot hide Python work: both
processes and all their threads share that CPU."""

from __future__ import annotations

#: The prefix of every client's argv (empty: no pinning); set by ``run.py --cpus``.
PIN: list[str] = []


def pinned(argv: list[str]) -> list[str]:
    """``argv`` under the ``--cpus`` pinning, if any."""
    return [*PIN, *argv]
