"""ours_async_client.py with ``ordering("session")`` on both sides (the ours-async-session rows)."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

os.environ["ACP_BENCH_ORDERING"] = "session"  # read by ours_async_client.py and the agent it spawns
runpy.run_path(str(Path(__file__).with_name("ours_async_client.py")), run_name="__main__")
