"""The yardstick: the prototype engine's bench pair in ``../shared/yardstick``, run as two more
columns (presets ``cork`` and ``lf``).

It is outside the project and follows its own CLI contract (``client.py --scenario S --n N
-- AGENT_CMD...``, one JSON line ``{"per_sec", "ok", "c_cpu_us", "a_cpu_us", ...}``), so it is
only ever run as subprocesses, never imported; this module maps our scenarios and figures onto
that contract. Where the directory is absent its columns are skipped with a line saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import installed
from .pinning import pinned
from .scenarios import Scenario

# ../shared/yardstick next to the project root; ACP_YARDSTICK points elsewhere (or nowhere)
DEFAULT_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "yardstick"
PRESETS = ("cork", "lf")
TIMEOUT = 300.0
# the yardstick directory is read-only: its bytecode goes here, so that no run (startup above
# all) pays for compiling it from source while every other implementation has its caches
PYCACHE = Path(tempfile.gettempdir()) / "acp-bench-yardstick-pycache"

# our scenario -> the yardstick's (same N, same unit of work); concurrent, memory and import have
# no counterpart in its contract, so those cells stay n/a
SCENARIOS = {"rtt": "rtt", "stream": "stream", "read": "read", "sessions": "sessions", "startup": "startup"}
# the yardstick's result keys for our metric names (the throughput comes from ``per_sec``)
CPU_KEYS = {"client_cpu_us": "c_cpu_us", "agent_cpu_us": "a_cpu_us"}


def directory() -> Path:
    return Path(os.environ.get("ACP_YARDSTICK") or DEFAULT_DIR)


def missing() -> str | None:
    """Why the yardstick cannot run here (None: it can)."""
    where = directory()
    absent = [name for name in ("client.py", "agent.py") if not (where / name).is_file()]
    if absent:
        return f"yardstick skipped: {where} has no {' / '.join(absent)} (../shared absent; ACP_YARDSTICK overrides)"
    return None


def command(preset: str, scenario: str, n: int) -> list[str]:
    """The yardstick client's argv for one run, on the interpreter our rows use (it needs only
    msgspec; like for like, see the bare row in implementations.py)."""
    where = directory()
    python = str(installed.python())
    return [python, str(where / "client.py"), "--scenario", SCENARIOS[scenario], "--n", str(n),
            "--impl", f"yardstick-{preset}", "--", python, str(where / "agent.py")]


def parse(scenario: Scenario, n: int, line: str) -> tuple[dict[str, float], str | None]:
    """Our metrics from the yardstick's result line, or an error."""
    record = json.loads(line)
    if not record.get("ok"):
        return {}, f"yardstick reported ok=false: {line.strip()}"
    if record.get("n") != n:
        return {}, f"yardstick ran n={record.get('n')}, expected {n}"
    metrics: dict[str, float] = {}
    for metric in scenario.metrics:
        if metric.name == "startup_ms":
            key = "ms_median"
        elif metric.name in CPU_KEYS:
            key = CPU_KEYS[metric.name]
        else:
            key = "per_sec"
        if record.get(key) is None:
            return {}, f"yardstick printed no {key!r}: {line.strip()}"
        metrics[metric.name] = float(record[key])
    return metrics, None


def warm_up(env: dict[str, str]) -> None:
    """Compile the yardstick's modules into PYCACHE before anything is timed."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(directory())], env=_env(env, "cork"),
                   capture_output=True, check=True, timeout=TIMEOUT)


def _env(env: dict[str, str], preset: str) -> dict[str, str]:
    return {**env, "PROTO_VARIANT": preset, "PYTHONPYCACHEPREFIX": str(PYCACHE)}


def run(preset: str, scenario: Scenario, n: int, env: dict[str, str]) -> tuple[dict[str, float], str | None]:
    """Run the yardstick pair once; (metrics, None) or ({}, why it failed).

    The preset goes in PROTO_VARIANT, which the client's engine reads and its agent inherits.
    """
    try:
        proc = subprocess.run(pinned(command(preset, scenario.name, n)), capture_output=True, text=True,
                              env=_env(env, preset), cwd=tempfile.gettempdir(), timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return {}, f"timed out after {TIMEOUT:.0f} s"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = " | ".join(proc.stderr.strip().splitlines()[-8:]) or "(no stderr)"
        return {}, f"exit {proc.returncode}: {tail}"
    try:
        return parse(scenario, n, lines[-1])
    except ValueError:
        return {}, f"bad output {lines[-1]!r}"
