"""The processes an agent started: its children, theirs, and so on.

An agent is often a launcher: ``npx``, or a node script that runs a native binary and waits for
it (npm's ``codex-acp``). Stopping the launcher does not stop what it started; an orphan that
ignores the end of its stdin would run on after ``close()``. So both process transports note
the agent's descendants while it runs and end those still running along with it.

Read from ``/proc`` (Linux). Where there is none (macOS, Windows) nothing is found, and only
the agent's own process is managed, as before. Each process is known by its pid and its start
time, so that a pid the system has given to another process since is never signalled.
"""

from __future__ import annotations

import logging
import os
import signal

from ._child import log

__all__ = ["TICK", "Descendants"]

_PROC = "/proc"
#: How often a close looks whether they have exited (they are not our children: no wait()).
TICK = 0.01


def _stat(pid: int) -> tuple[bytes, int, int] | None:
    """(state, parent pid, start time) of ``pid``, or None when it is gone (or unreadable)."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its end.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0], int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


class Descendants:
    """The descendants of process ``pid`` seen so far; :meth:`look` adds those running now.
    ``description`` names the agent in the log."""

    def __init__(self, pid: int, description: str) -> None:
        self._pid = pid
        self._description = description
        self._seen: dict[int, int] = {}  # pid -> start time

    def look(self) -> None:
        """Note every process below ``pid`` now (one pass over ``/proc``)."""
        try:
            names = os.listdir(_PROC)
        except OSError:
            return
        children: dict[int, list[tuple[int, int]]] = {}
        for name in names:
            if name.isdigit():
                stat = _stat(int(name))
                if stat is not None:
                    children.setdefault(stat[1], []).append((int(name), stat[2]))
        parents = [self._pid]
        while parents:
            for pid, started in children.pop(parents.pop(), ()):
                self._seen[pid] = started
                parents.append(pid)

    def running(self) -> list[int]:
        """The pids of those still running (a zombie has ended; a reused pid is not theirs)."""
        alive = []
        for pid, started in self._seen.items():
            stat = _stat(pid)
            if stat is not None and stat[2] == started and stat[0] != b"Z":
                alive.append(pid)
        return alive

    def signal(self, signum: int) -> None:
        """Send ``signum`` to each one still running (logged: an agent that leaves processes
        behind is worth knowing about)."""
        pids = self.running()
        if not pids:
            return
        level = logging.WARNING if signum == signal.SIGKILL else logging.INFO
        log.log(level, "%s: %d process(es) it started still running (%s); sending %s",
                self._description, len(pids), ", ".join(map(str, pids)), signal.Signals(signum).name)
        for pid in pids:
            try:
                os.kill(pid, signum)
            except OSError:  # gone meanwhile, or not ours to signal
                pass
