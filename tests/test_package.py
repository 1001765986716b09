"""The package's public surface: lazy top-level names, docstrings, cheap import."""

from __future__ import annotations

import subprocess
import sys

import acp


def test_every_public_name_resolves_and_has_a_docstring() -> None:
    assert set(acp.__all__) - {"__version__"} == set(acp._LAZY)
    for name in acp._LAZY:
        value = getattr(acp, name)
        assert value.__doc__, f"acp.{name} has no docstring"


def test_unknown_attribute_raises() -> None:
    try:
        acp.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_import_acp_loads_no_heavy_module() -> None:
    code = (
        "import sys, acp; "
        "print(','.join(m for m in ('subprocess', 'acp.schema', 'acp.connection', 'msgspec') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_using_the_client_does_not_import_the_unstable_schema() -> None:
    code = "import sys, acp; acp.SyncClient; acp.SyncAgent; print('acp.schema.unstable' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_api_loads_no_network_or_event_loop_module() -> None:
    # The remote transports' stdlib needs (cookies, urllib, ssl, asyncio) load only when used.
    code = (
        "import sys, acp; acp.SyncClient.builder().connect('http://h/acp'); acp.SyncAgent; "
        "import acp.transport, acp.client.settings; "
        "print(','.join(m for m in ('http.cookiejar', 'urllib.request', 'ssl', 'asyncio', 'email', "
        "'httpx', 'websockets', 'uvicorn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
