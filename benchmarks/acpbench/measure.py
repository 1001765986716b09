"""Running one measurement: one client process for one scenario, or one import."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import yardstick
from .implementations import Implementation
from .pinning import pinned
from .scenarios import Scenario

CLIENT_TIMEOUT = 300.0


@dataclass
class Outcome:
    metrics: dict[str, float] = field(default_factory=dict)
    count: int = 0
    unavailable: str | None = None  # the implementation is not there (yet)
    error: str | None = None  # it is there and failed


def child_env() -> dict[str, str]:
    """The environment for every process the harness starts.

    Bytecode caches are allowed (PYTHONDONTWRITEBYTECODE dropped) so that no side pays for
    compiling from source; PYTHONPATH is dropped so each venv sees only its own ``acp``.
    """
    drop = ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")
    return {k: v for k, v in os.environ.items() if k not in drop}


def run_client(impl: Implementation, scenario: Scenario, n: int) -> Outcome:
    """Run ``impl``'s client script for ``scenario`` with size ``n``."""
    missing = impl.missing()
    if missing:
        return Outcome(unavailable=missing)
    if impl.preset is not None:
        metrics, error = yardstick.run(impl.preset, scenario, n, child_env())
        return Outcome(error=error) if error else Outcome(metrics=metrics, count=n)
    argv = [str(impl.python), str(impl.client), scenario.name, str(n)]
    try:
        proc = subprocess.run(
            pinned(argv), capture_output=True, text=True, env=child_env(), cwd=tempfile.gettempdir(),
            timeout=CLIENT_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return Outcome(error=f"timed out after {CLIENT_TIMEOUT:.0f} s")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return Outcome(error=f"exit {proc.returncode}: {_tail(proc.stderr)}")
    try:
        report = json.loads(lines[-1])
    except ValueError:
        return Outcome(error=f"bad output {lines[-1]!r}: {_tail(proc.stderr)}")
    if "unavailable" in report:
        return Outcome(unavailable=str(report["unavailable"]))
    return Outcome(metrics=report["metrics"], count=report["count"])


def warm_up(impl: Implementation) -> None:
    """Let ``impl`` write its bytecode caches before anything is timed."""
    if impl.missing():
        return
    if impl.preset is not None:
        yardstick.warm_up(child_env())
    else:
        import_time(impl)


def import_time(impl: Implementation) -> Outcome:
    """The import scenario's figures, from ``python -X importtime`` run in an empty directory
    (so that the working tree never shadows the interpreter's own packages):

    - ``import_us``: the cumulative microseconds of ``import <impl.imports>``;
    - ``import_ready_us``: of everything ``impl.ready`` imports beyond the interpreter's own
      startup (lazy attributes load modules as top-level imports of their own).
    """
    missing = impl.missing()
    if missing:
        return Outcome(unavailable=missing)
    plain = _importtime(impl.python, "import " + ", ".join(impl.imports))
    ready = _importtime(impl.python, impl.ready)
    for proc in (plain, ready):
        if proc.returncode != 0:
            if "AttributeError" in proc.stderr:  # a name of the API is not there (yet)
                return Outcome(unavailable=f"`{impl.ready}` failed: {_tail(proc.stderr, 1)}")
            return Outcome(error=f"exit {proc.returncode}: {_tail(proc.stderr)}")
    startup = _startup_modules(str(impl.python))
    metrics = {
        "import_us": float(cumulative_us(plain.stderr, impl.imports)),
        "import_ready_us": float(sum(us for name, us in top_level(ready.stderr) if name not in startup)),
    }
    return Outcome(metrics=metrics, count=1)


def top_level(importtime_log: str) -> list[tuple[str, int]]:
    """(module, cumulative us) of the top-level entries of an ``-X importtime`` log."""
    entries = []
    for line in importtime_log.splitlines():
        if line.startswith("import time:") and not line.endswith("imported package"):
            _, cumulative, name = line[len("import time:"):].split("|")
            if not name.startswith("  "):  # top level: one space; nested: more
                entries.append((name.strip(), int(cumulative)))
    return entries


def cumulative_us(importtime_log: str, modules: tuple[str, ...]) -> int:
    """Sum the cumulative times of the top-level entries for ``modules`` and their parents."""
    wanted = {".".join(m.split(".")[: i + 1]) for m in modules for i in range(m.count(".") + 1)}
    found = [us for name, us in top_level(importtime_log) if name in wanted]
    if not found:
        raise ValueError(f"no import of {modules} in the -X importtime output")
    return sum(found)


def _importtime(python: Path, statement: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as empty:
        return subprocess.run(
            [str(python), "-X", "importtime", "-c", statement],
            capture_output=True, text=True, env=child_env(), cwd=empty, timeout=CLIENT_TIMEOUT,
        )


@functools.cache
def _startup_modules(python: str) -> frozenset[str]:
    """The modules the interpreter imports before running any code."""
    return frozenset(name for name, _ in top_level(_importtime(Path(python), "pass").stderr))


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no stderr)"
