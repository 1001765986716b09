"""Node.js plumbing for the TypeScript SDK interop tests (tests/test_interop_ts.py).

The pinned SDK lives in tests/interop (package.json + package-lock.json); ``make interop-setup``
installs it, and :func:`require_node` does the same on first use when it is missing or stale.
Without node/npm the tests are skipped locally, but under CI (env ``CI`` set) they fail: a CI
machine without Node must never turn the interop suite into a silent skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

INTEROP_DIR = Path(__file__).resolve().parent.parent / "interop"
TS_SDK_PACKAGE = "@agentclientprotocol/sdk"
TS_SDK_VERSION = "2.4.0"  # must match tests/interop/package.json (checked below)
MIN_NODE_MAJOR = 18
NPM_INSTALL_TIMEOUT = 300.0


def under_ci() -> bool:
    """True when the environment says this is a CI run (``CI`` set and not false/0)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str) -> None:
    if under_ci():
        pytest.fail(f"TypeScript interop tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"TypeScript interop tests skipped: {reason} (under CI this is a failure)")


def _stale(node_modules: Path, lock: Path) -> bool:
    marker = node_modules / ".package-lock.json"  # npm rewrites it on every install
    if not marker.exists():
        return True
    return lock.exists() and lock.stat().st_mtime > marker.stat().st_mtime


def _install(npm: str) -> None:
    lock = INTEROP_DIR / "package-lock.json"
    argv = [npm, "ci" if lock.exists() else "install", "--no-audit", "--no-fund"]
    proc = subprocess.run(
        argv, cwd=INTEROP_DIR, capture_output=True, text=True, timeout=NPM_INSTALL_TIMEOUT
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(argv)} failed in {INTEROP_DIR} ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}",
            pytrace=False,
        )


def require_node() -> str:
    """The node executable, with the pinned SDK installed; skips (locally) or fails (CI)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(name for name, path in (("node", node), ("npm", npm)) if path is None)
        _unavailable(f"{missing} not found on PATH")
    assert node is not None and npm is not None
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    major = int(version.lstrip("v").split(".")[0]) if version.startswith("v") else 0
    if major < MIN_NODE_MAJOR:
        _unavailable(f"node {version or '?'} is older than {MIN_NODE_MAJOR}")
    pinned = json.loads((INTEROP_DIR / "package.json").read_text())["dependencies"][TS_SDK_PACKAGE]
    assert pinned == TS_SDK_VERSION, f"package.json pins {TS_SDK_PACKAGE}@{pinned}, tests expect {TS_SDK_VERSION}"
    node_modules = INTEROP_DIR / "node_modules"
    if _stale(node_modules, INTEROP_DIR / "package-lock.json"):
        _install(npm)
    installed = json.loads((node_modules / TS_SDK_PACKAGE / "package.json").read_text())["version"]
    assert installed == TS_SDK_VERSION, f"installed {TS_SDK_PACKAGE} is {installed}, expected {TS_SDK_VERSION}"
    return node


def run_ts_client(
    node: str, agent_argv: list[str], config: dict[str, Any], timeout: float = 60.0
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """Run tests/interop/client.mjs against ``agent_argv``; its JSON summary and the process."""
    argv = [node, str(INTEROP_DIR / "client.mjs"), "--config", json.dumps(config), "--", *agent_argv]
    proc = subprocess.run(argv, cwd=INTEROP_DIR, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"the TS client printed no summary (exit {proc.returncode}); stderr:\n{proc.stderr}"
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary, proc


def texts(updates: list[dict[str, Any]], kind: str = "agent_message_chunk") -> list[str]:
    """The text of every ``kind`` update (wire form, as the TS SDK delivered it), in order."""
    return [u["content"]["text"] for u in updates if u["sessionUpdate"] == kind and u["content"]["type"] == "text"]
