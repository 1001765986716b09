"""The package as a user gets it: the wheel `make dist` builds, installed into a clean venv
with no development extras, runs the README's client and agent."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(600)


def readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with only the wheel (and its two runtime dependencies) installed."""
    where = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(where / "dist"), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (where / "dist").glob("acp_sync-*.whl")
    venv.create(where / "venv", with_pip=True)
    python = where / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER")}
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True, timeout=300, env=env)
    return python


def run(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, cwd=cwd, env=env)


def test_the_wheel_has_the_licence_and_the_type_marker(installed: Path, tmp_path: Path) -> None:
    proc = run(installed, "import importlib.metadata as m, acp, pathlib\n"
                          "d = m.distribution('acp-sync')\n"
                          "print(any(str(f).endswith('LICENSE') for f in d.files))\n"
                          "print((pathlib.Path(acp.__file__).parent / 'py.typed').exists())\n"
                          "print(sorted(r.split(';')[0].split('>')[0] for r in d.requires if 'extra' not in r))\n"
                          "print(d.metadata['License-Expression'])", tmp_path)
    assert proc.stdout.split("\n")[:4] == ["True", "True", "['msgspec', 'typing-extensions']", "Apache-2.0"], proc.stderr
    assert "/site-packages/" in run(installed, "import acp; print(acp.__file__)", tmp_path).stdout


def test_the_readme_client_runs_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    client = readme_blocks()[0]
    proc = run(installed, client, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "end_turn"


def test_the_readme_agent_runs_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    agent = next(b for b in readme_blocks() if "SyncAgent.builder()" in b)
    (tmp_path / "agent.py").write_text(agent)
    driver = (
        "import sys, acp\n"
        "seen = []\n"
        "with (acp.SyncClient.builder().agent_process(sys.executable, 'agent.py')\n"
        "        .session_update_handler(lambda n: seen.append(n.update.content.text)).build()) as client:\n"
        "    client.initialize()\n"
        "    session = client.new_session(cwd='/tmp')\n"
        "    print(client.prompt(session.session_id, 'Hi').stop_reason, seen)\n"
    )
    proc = run(installed, driver, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith('end_turn ["You said something.')
