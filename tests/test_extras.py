"""A remote transport used without its extra says which one to install, from the API and
from the command line (each case in a fresh interpreter where the module cannot be imported)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "ws client": ("websockets", "import acp; acp.SyncClient.builder().connect('ws://127.0.0.1:9/acp').build()", "ws"),
    "ws async client": ("websockets", "import acp.aio.transport.websocket", "ws"),
    "ws server": ("websockets", "import acp; acp.SyncAgent.builder().build().serve_websocket(port=0)", "ws"),
    "http client": ("httpx", "import acp; acp.SyncClient.builder().connect('http://127.0.0.1:9/acp').build()", "http"),
    "http async client": ("httpx", "import acp.aio.transport.http_client", "http"),
    "http server": ("uvicorn", "import acp; acp.SyncAgent.builder().build().serve_http(port=0)", "http"),
}


def run_without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys; sys.modules[{module!r}] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case", list(CASES))
def test_the_api_names_the_extra_to_install(case: str) -> None:
    module, code, extra = CASES[case]
    proc = run_without(module, code)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("acp._extras.MissingExtraError:"), proc.stderr
    assert f"pip install 'acp-sync[{extra}]'" in last and repr(module) in last


def test_the_error_is_an_import_error() -> None:
    proc = run_without("websockets", "from acp._extras import MissingExtraError\ntry:\n"
                       "    import acp.transport.websocket\nexcept ImportError as e:\n"
                       "    print(isinstance(e, MissingExtraError), e.name)")
    assert proc.stdout.split() == ["True", "websockets"]


@pytest.mark.parametrize(("module", "url", "extra"), [("websockets", "ws://127.0.0.1:9/acp", "ws"),
                                                     ("httpx", "http://127.0.0.1:9/acp", "http")])
def test_the_command_line_names_the_extra_too(module: str, url: str, extra: str) -> None:
    proc = run_without(module, f"import sys\nfrom acp.cli import main\nsys.exit(main(['chat', '--url', {url!r}]))")
    assert proc.returncode != 0
    assert f"pip install 'acp-sync[{extra}]'" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
