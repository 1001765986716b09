"""The official Python SDK (PyPI ``agent-client-protocol``) in its own venv.

Its import name is also ``acp``, so it can never share an interpreter with ours.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

SPEC = "agent-client-protocol==0.12.1"
VENV = Path(__file__).resolve().parent.parent / ".venv-official"
PYTHON = VENV / "bin" / "python"
_STAMP = VENV / ".installed"


def installed() -> bool:
    return PYTHON.exists() and _STAMP.exists() and _STAMP.read_text().strip() == SPEC


def ensure() -> Path:
    """Create the venv and install the official SDK unless already done; return its python."""
    if installed():
        return PYTHON
    print(f"setting up {VENV} with {SPEC} ...", file=sys.stderr, flush=True)
    if VENV.exists():
        shutil.rmtree(VENV)
    venv.EnvBuilder(with_pip=True).create(VENV)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER")}
    subprocess.run(
        [str(PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check", SPEC],
        check=True,
        env=env,
    )
    _STAMP.write_text(SPEC + "\n")
    return PYTHON


def version() -> str | None:
    """The installed version of the official SDK, or None when its venv is absent."""
    if not installed():
        return None
    code = "import importlib.metadata as m; print(m.version('agent-client-protocol'))"
    out = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()
