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


def test_a_sync_agent_and_client_import_only_what_they_use() -> None:
    # What a sync script loads for SyncAgent/SyncClient (issue #15's footprint): no event loop,
    # no process spawning or signals (until a process is spawned), no URL parsing or HTTP (until
    # a remote agent or a server is used), no command running, settings parsing or file wire tap until used,
    # no dataclasses (~2.5 ms of import: NegotiatedCapabilities is a msgspec Struct).
    # Measured as what the import brings in: an editable install's path finder preloads urllib.
    lazy = (
        "asyncio", "subprocess", "signal", "urllib.parse", "ipaddress", "http", "ntpath", "dataclasses",
        "acp.transport.process", "acp.transport._child", "acp.transport._serving",
        "acp.transport.memory", "acp.agent.commands", "acp.client.settings", "acp.wiretap",
    )
    code = (
        "import sys; before = set(sys.modules); import acp; "
        "acp.SyncAgent, acp.SyncClient, acp.PromptContext, acp.schema; "
        "new = set(sys.modules) - before; "
        f"print(','.join(m for m in {lazy!r} if m in new))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_lazy_names_still_resolve() -> None:
    # The names made lazy for import speed are still importable the usual ways.
    code = (
        "from acp.transport import ProcessTransport, RefuseConnection, RemoteConnectionError, "
        "StdioTransport, FdTransport, memory_pair, Transport, READ_CHUNK; "
        "from acp.agent import CommandResult; from acp import CommandResult as C2; "
        "from acp.client import AgentSettings, AgentSettingsError; "
        "import acp.transport; assert 'ProcessTransport' in dir(acp.transport); "
        "assert CommandResult is C2; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
