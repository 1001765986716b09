"""Who is measured: each implementation is a client script (which spawns its agent), the
interpreter that runs it, and what its ``import`` scenario imports; or a yardstick preset
(the prototype pair of ../shared/yardstick, run through its own CLI: see ``yardstick``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import installed, official_venv, yardstick

PEERS = Path(__file__).resolve().parent.parent / "peers"


@dataclass(frozen=True)
class Implementation:
    name: str
    label: str
    interpreter: Callable[[], Path]  # looked up at each use: `make bench` may install ours first
    client: Path
    imports: tuple[str, ...]  # import scenario: `import <these>` (the -X importtime cumulative)
    ready: str  # import scenario: a statement that loads what an agent and a client need
    preset: str | None = None  # a yardstick pair with this PROTO_VARIANT
    baseline: bool = False  # measured only with --baseline REF
    scenarios: tuple[str, ...] | None = None  # only these (None: every scenario)

    @property
    def python(self) -> Path:
        return self.interpreter()

    def missing(self) -> str | None:
        """Why this implementation cannot run here (None: it can)."""
        if self.preset is not None:
            return yardstick.missing()
        if self.baseline and installed.baseline_ref() is None:
            return "no baseline installed (benchmarks/run.py --baseline REF)"
        if not self.python.exists():
            return f"{self.python} not found (run `make bench-setup`)"
        return None

    def supports(self, scenario: str) -> bool:
        """False where the implementation has no such scenario (its cells stay n/a)."""
        if self.scenarios is not None:
            return scenario in self.scenarios
        return self.preset is None or scenario in yardstick.SCENARIOS


def _this_python() -> Path:
    return Path(sys.executable)


def _yardstick(preset: str) -> Implementation:
    where = yardstick.directory()
    return Implementation(f"yardstick-{preset}", f"yardstick {preset}", _this_python, where / "client.py",
                          (), "", preset=preset)


def all_implementations() -> tuple[Implementation, ...]:
    ours = installed.python  # a regular install of this checkout when `make bench` set one up
    return (
        # The bare pipe runs on ours' interpreter too (the installed venv has msgspec): the dev
        # venv's editable-install path finder imports re, enum, pathlib, urllib... at startup, which
        # made its `import msgspec` look ~4 ms cheaper and its agent ~4 ms slower to start than ours.
        Implementation("bare", "bare msgspec", ours, PEERS / "bare_client.py", ("msgspec",),
                       "import msgspec"),
        # the asyncio floor: the same dicts on an event loop (add_reader + os.read), no SDK
        Implementation("bare-async", "bare asyncio", ours, PEERS / "bare_async_client.py",
                       ("msgspec", "asyncio"), "import msgspec, asyncio"),
        Implementation("official", "official SDK", lambda: official_venv.PYTHON, PEERS / "official_client.py",
                       ("acp",), "import acp; acp.run_agent, acp.connect_to_agent, acp.schema"),
        Implementation("conn", "acp.connection", ours, PEERS / "conn_client.py", ("acp.connection",),
                       "import acp.connection, acp.transport"),
        # the asyncio engine alone (acp.aio.AsyncConnection, dict params): with conn, it splits
        # each facade's cost (ours/conn, ours-async/aconn) from its engine's
        Implementation("aconn", "acp.aio", ours, PEERS / "aconn_client.py", ("acp.aio",),
                       "import acp.aio, asyncio"),
        Implementation("ours", "acp Sync*", ours, PEERS / "ours_client.py", ("acp",),
                       "import acp; acp.SyncAgent, acp.SyncClient, acp.PromptContext, acp.schema"),
        # the same pair with ordering("session") on both sides (ACP_BENCH_ORDERING)
        Implementation("ours-session", "acp Sync* by session", ours, PEERS / "ours_session_client.py", ("acp",),
                       "import acp; acp.SyncAgent, acp.SyncClient, acp.PromptContext, acp.schema",
                       scenarios=("rtt", "stream", "concurrent")),
        Implementation("ours-async", "acp Async*", ours, PEERS / "ours_async_client.py", ("acp",),
                       "import acp; acp.AsyncAgent, acp.AsyncClient, acp.AsyncPromptContext, acp.schema"),
        # the same pair with ordering("session") on both sides (ACP_BENCH_ORDERING)
        Implementation("ours-async-session", "acp Async* by session", ours, PEERS / "ours_async_session_client.py",
                       ("acp",), "import acp; acp.AsyncAgent, acp.AsyncClient, acp.AsyncPromptContext, acp.schema",
                       scenarios=("rtt", "stream", "concurrent")),
        # `--baseline REF`: SyncAgent / SyncClient as of commit REF, on the same peer scripts
        Implementation("ours-baseline", "acp Sync* baseline", lambda: installed.BASELINE_PYTHON,
                       PEERS / "ours_client.py", ("acp",),
                       "import acp; acp.SyncAgent, acp.SyncClient, acp.PromptContext, acp.schema", baseline=True),
        *(_yardstick(preset) for preset in yardstick.PRESETS),
    )


BY_NAME = {impl.name: impl for impl in all_implementations()}
NAMES = tuple(BY_NAME)
