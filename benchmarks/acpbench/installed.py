"""Our SDK as a user installs it: a regular (non-editable) ``pip install`` of this checkout into
``benchmarks/.venv-installed``, bytecode compiled by pip, so that ``import`` and ``startup`` are
measured the way an installed user sees them (the dev venv's editable install resolves ``acp``
through a path hook and may compile from source on first use).

The venv is rebuilt when any file under ``acp/`` or ``pyproject.toml`` changed (a hash of their
contents is kept in a stamp file). Without it (tests, or before ``make bench`` set it up) our
rows run on the current interpreter, and the run's metadata says which one was used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / "benchmarks" / ".venv-installed"
PYTHON = VENV / "bin" / "python"
_STAMP = VENV / ".installed"


def source_hash() -> str:
    """A hash of everything that goes into the installed package."""
    digest = hashlib.sha256()
    files = sorted(p for p in (ROOT / "acp").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in [ROOT / "pyproject.toml", *files]:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def current() -> bool:
    """True when the installed venv holds this checkout as it is now."""
    return PYTHON.exists() and _STAMP.exists() and _STAMP.read_text().strip() == source_hash()


def python() -> Path:
    """The interpreter our rows run on: the installed venv's when current, else this one."""
    return PYTHON if current() else Path(sys.executable)


def ensure() -> Path:
    """(Re)build the installed venv unless it is current; return its python."""
    if current():
        return PYTHON
    print(f"installing this checkout (non-editable) into {VENV} ...", file=sys.stderr, flush=True)
    if VENV.exists():
        shutil.rmtree(VENV)
    venv.EnvBuilder(with_pip=True).create(VENV)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER", "PYTHONDONTWRITEBYTECODE")}
    subprocess.run(
        [str(PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--compile", str(ROOT)],
        check=True, env=env, cwd=VENV,
    )
    # pip builds in a temporary copy; nothing of the build stays next to the sources.
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    _STAMP.write_text(source_hash() + "\n")
    return PYTHON


BASELINE_VENV = ROOT / "benchmarks" / ".venv-baseline"
BASELINE_PYTHON = BASELINE_VENV / "bin" / "python"
_BASELINE_STAMP = BASELINE_VENV / ".installed"


def baseline_ref() -> str | None:
    """The commit installed as the baseline (``--baseline REF``), or None."""
    if BASELINE_PYTHON.exists() and _BASELINE_STAMP.exists():
        return _BASELINE_STAMP.read_text().strip() or None
    return None


def ensure_baseline(ref: str) -> Path:
    """Install commit ``ref`` of this repository (non-editable, like ours) as the baseline that
    the ``ours-baseline`` rows run on, unless it is installed already; return its python."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    if baseline_ref() == commit:
        return BASELINE_PYTHON
    print(f"installing {ref} ({commit[:10]}, non-editable) into {BASELINE_VENV} ...", file=sys.stderr, flush=True)
    if BASELINE_VENV.exists():
        shutil.rmtree(BASELINE_VENV)
    venv.EnvBuilder(with_pip=True).create(BASELINE_VENV)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER", "PYTHONDONTWRITEBYTECODE")}
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        subprocess.run(
            [str(BASELINE_PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--compile", tree],
            check=True, env=env, cwd=BASELINE_VENV,
        )
    _BASELINE_STAMP.write_text(commit + "\n")
    return BASELINE_PYTHON


def describe() -> str:
    """For the run's metadata: which install our rows ran on."""
    if current():
        return f"regular install of this checkout ({source_hash()}) in {VENV.name}"
    return f"the running interpreter's acp ({sys.executable}; the installed venv is absent or stale)"
