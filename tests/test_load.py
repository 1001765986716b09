"""Load (issue 7, part 3): many sessions prompting at once, over real agent processes.

* one SyncClient, one SyncAgent subprocess (tests/helpers/fault_agent.py), 1,000 sessions
  prompted from 32 client threads that start together;
* 10 SyncAgent subprocesses with 100 sessions each, driven from this one process.

Every answer is checked (stop reason, and exactly the session's own updates, in order: nothing
lost, nothing from another session). Latency percentiles (p50/p90/p99/max) are printed (see
them with ``pytest -s``) and written to ``benchmarks/results/load-*.json`` (git-ignored).
``make test`` runs reduced sizes (200 sessions; 3 agents x 30); ``make test-load``
(``ACP_LOAD=full``) the full ones.
"""

from __future__ import annotations

import json
import platform
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from acp import schema
from acp.client import SyncClient

from .conftest import helper_argv
from .helpers.fault_support import LOAD_FULL, WAIT, percentiles, size

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
THREADS = 32
UPDATES_PER_PROMPT = 5
ROUNDS = 2  # each session is prompted this many times


class Collector:
    """Every agent_message_chunk text, by session (one consumer per client)."""

    def __init__(self) -> None:
        self.by_session: dict[str, list[str]] = defaultdict(list)
        self.total = 0
        self._lock = threading.Lock()

    def __call__(self, note: schema.SessionNotification) -> None:
        update = note.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(update.content, schema.TextContent):
            with self._lock:
                self.by_session[note.session_id].append(update.content.text)
                self.total += 1


def _client(collector: Collector) -> SyncClient:
    client = (
        SyncClient.builder()
        .agent_process(*helper_argv("fault_agent"))
        .session_update_handler(collector)
        .request_timeout(WAIT * 6)
        .prompt_timeout(WAIT * 6)
        .build()
    )
    client.initialize()
    return client


def _prompt_all(jobs: list[tuple[SyncClient, Collector, str]], threads: int) -> tuple[list[float], float, list[str]]:
    """Prompt every (client, session) ROUNDS times from ``threads`` threads that start together.
    Returns (latencies, elapsed seconds, problems)."""
    latencies: list[float] = []
    problems: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)
    slices = [jobs[k::threads] for k in range(threads)]

    def work(mine: list[tuple[SyncClient, Collector, str]]) -> None:
        barrier.wait(WAIT)
        local: list[float] = []
        for _ in range(ROUNDS):
            for client, _collector, sid in mine:
                started = time.perf_counter()
                try:
                    response = client.prompt(sid, f"load {UPDATES_PER_PROMPT}")
                except Exception as exc:  # noqa: BLE001 - reported below
                    with lock:
                        problems.append(f"{sid}: {exc!r}")
                    continue
                local.append(time.perf_counter() - started)
                if response.stop_reason != "end_turn":
                    with lock:
                        problems.append(f"{sid}: stop reason {response.stop_reason}")
        with lock:
            latencies.extend(local)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads, thread_name_prefix="load") as pool:
        for future in [pool.submit(work, mine) for mine in slices]:
            future.result(WAIT * 30)
    return latencies, time.perf_counter() - started, problems


def _check_updates(jobs: list[tuple[SyncClient, Collector, str]]) -> int:
    """Every session got exactly its own updates, in order, ROUNDS times; returns how many were
    lost or out of place (must be 0)."""
    expected_one = [f"{{sid}}:{i}" for i in range(UPDATES_PER_PROMPT)]
    wrong = 0
    for _, collector, sid in jobs:
        expected = [t.format(sid=sid) for t in expected_one] * ROUNDS
        got = collector.by_session.get(sid, [])
        if got != expected:
            wrong += max(1, abs(len(expected) - len(got)))
    return wrong


def _record(name: str, sizes: dict[str, Any], latencies: list[float], elapsed: float, lost: int) -> dict[str, Any]:
    stats = percentiles(latencies)
    result = {
        "test": name,
        "mode": "full" if LOAD_FULL else "reduced",
        **sizes,
        "prompts": len(latencies),
        "elapsed_s": round(elapsed, 3),
        "prompts_per_s": round(len(latencies) / elapsed, 1) if elapsed else None,
        "latency_ms": {k: round(v, 3) for k, v in stats.items() if k != "count"},
        "lost_updates": lost,
        "python": platform.python_version(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    latency = result["latency_ms"]
    print(
        f"\n{name}: {sizes} -> {len(latencies)} prompts in {elapsed:.2f} s "
        f"({result['prompts_per_s']}/s); latency ms p50 {latency['p50_ms']:.2f} p90 {latency['p90_ms']:.2f} "
        f"p99 {latency['p99_ms']:.2f} max {latency['max_ms']:.2f}; lost {lost}"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def test_load_one_agent_many_sessions(no_thread_leak: None) -> None:
    n_sessions = size(200, 1_000)
    collector = Collector()
    client = _client(collector)
    try:
        with ThreadPoolExecutor(THREADS, thread_name_prefix="new") as pool:
            sids = list(pool.map(lambda _: client.new_session(cwd="/tmp").session_id, range(n_sessions)))
        assert len(set(sids)) == n_sessions  # all held at once, each distinct
        jobs = [(client, collector, sid) for sid in sids]
        latencies, elapsed, problems = _prompt_all(jobs, THREADS)
        assert problems == []
        assert len(latencies) == n_sessions * ROUNDS
        lost = _check_updates(jobs)
        assert collector.total == n_sessions * ROUNDS * UPDATES_PER_PROMPT
        _record(
            "load-one-agent",
            {"agents": 1, "sessions": n_sessions, "threads": THREADS, "rounds": ROUNDS, "updates_per_prompt": UPDATES_PER_PROMPT},
            latencies,
            elapsed,
            lost,
        )
        assert lost == 0
    finally:
        client.close()


def test_load_many_agents(no_thread_leak: None) -> None:
    n_agents = size(3, 10)
    per_agent = size(30, 100)
    collectors = [Collector() for _ in range(n_agents)]
    clients: list[SyncClient] = []
    try:
        with ThreadPoolExecutor(n_agents, thread_name_prefix="spawn") as pool:
            clients.extend(pool.map(_client, collectors))
        jobs: list[tuple[SyncClient, Collector, str]] = []
        for client, collector in zip(clients, collectors, strict=True):
            sids = [client.new_session(cwd="/tmp").session_id for _ in range(per_agent)]
            assert len(set(sids)) == per_agent
            jobs.extend((client, collector, sid) for sid in sids)
        # Interleave agents so that every thread drives all of them.
        jobs.sort(key=lambda job: (job[2], id(job[0])))
        latencies, elapsed, problems = _prompt_all(jobs, THREADS)
        assert problems == []
        assert len(latencies) == n_agents * per_agent * ROUNDS
        lost = _check_updates(jobs)
        for collector in collectors:
            assert collector.total == per_agent * ROUNDS * UPDATES_PER_PROMPT
        _record(
            "load-many-agents",
            {"agents": n_agents, "sessions_per_agent": per_agent, "threads": THREADS, "rounds": ROUNDS, "updates_per_prompt": UPDATES_PER_PROMPT},
            latencies,
            elapsed,
            lost,
        )
        assert lost == 0
    finally:
        for client in clients:
            client.close()
