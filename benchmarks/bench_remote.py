"""ACP over WebSocket and Streamable HTTP next to stdio: prompts/s, streamed chunks/s, memory per
idle connection.

    .venv/bin/python benchmarks/bench_remote.py                 # defaults (~20 s)
    .venv/bin/python benchmarks/bench_remote.py --quick         # tiny sizes, for a smoke run

The agent is a separate process in every row (this file with ``--serve stdio|ws|http``): the
client spawns it and talks over its stdin/stdout, or connects to it on 127.0.0.1. Rows:

    stdio       SyncClient.agent_process(...)      SyncAgent.serve_stdio()
    ws          SyncClient.connect("ws://...")     SyncAgent.serve_websocket()
    ws+deflate  the same with permessage-deflate on both sides
    http        SyncClient.connect("http://...")   SyncAgent.serve_http() (uvicorn, HTTP/1.1)
    asgi-ws     SyncClient.connect("ws://...")     the WebSocket profile of SyncAgent.serve_http()

Scenarios: ``rtt`` sequential prompts without updates (prompts/s); ``stream`` one prompt
streaming N agent_message_chunk updates (chunks/s, every chunk counted); ``memory`` the agent
server's RSS and thread count before and after N idle initialized WebSocket connections.
Each timed figure is the median of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import acp
from acp import schema

# ----------------------------------------------------------------------------- agent side


def _prompt(request: schema.PromptRequest, ctx: acp.PromptContext) -> str:
    for _ in range(int(ctx.prompt_text or "0")):
        ctx.send_message("chunk of streamed text, about the size of a token or two")
    return "end_turn"


def _build_agent() -> acp.SyncAgent:
    return (
        acp.SyncAgent.builder()
        .agent_info("bench-remote", "1.0")
        .new_session_handler(lambda req, ctx: schema.NewSessionResponse(session_id="s1"))
        .prompt_handler(_prompt)
        .build()
    )


def serve(kind: str, compression: bool) -> None:
    """Run as the agent process."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    agent = _build_agent()
    if kind == "stdio":
        agent.serve_stdio()
        return
    if kind == "http":
        with agent, agent.serve_http(max_connections=100_000) as http_server:
            print(http_server.url, flush=True)
            sys.stdin.read()
        return
    with agent, agent.serve_websocket(compression=compression, max_connections=100_000) as server:
        print(server.url, flush=True)
        sys.stdin.read()


# ----------------------------------------------------------------------------- client side


def _argv(kind: str, compression: bool) -> list[str]:
    argv = [sys.executable, os.path.abspath(__file__), "--serve", kind]
    return argv + (["--compression"] if compression else [])


@contextmanager
def ws_server(compression: bool, kind: str = "ws") -> Iterator[tuple[str, subprocess.Popen[str]]]:
    proc = subprocess.Popen(_argv(kind, compression), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip(), proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, note: schema.SessionNotification) -> None:
        self.count += 1


def _measure(client: acp.SyncClient, counter: Counter, rtt_n: int, stream_n: int) -> tuple[float, float]:
    client.initialize()
    sid = client.new_session(cwd="/").session_id
    for _ in range(20):  # warm up
        client.prompt(sid, "1")
    start = time.perf_counter()
    for _ in range(rtt_n):
        client.prompt(sid, "0")
    prompts_per_s = rtt_n / (time.perf_counter() - start)
    counter.count = 0
    start = time.perf_counter()
    client.prompt(sid, str(stream_n))
    elapsed = time.perf_counter() - start
    assert counter.count == stream_n, (counter.count, stream_n)
    return prompts_per_s, stream_n / elapsed


def run_row(kind: str, compression: bool, rtt_n: int, stream_n: int) -> tuple[float, float]:
    counter = Counter()
    if kind == "stdio":
        builder = acp.SyncClient.builder().agent_process(*_argv("stdio", False))
        with builder.session_update_handler(counter).build() as client:
            return _measure(client, counter, rtt_n, stream_n)
    with ws_server(compression, "ws" if kind == "ws" else "http") as (url, _):
        builder = _connect(kind, url, compression)
        with builder.session_update_handler(counter).build() as client:
            return _measure(client, counter, rtt_n, stream_n)


def _connect(kind: str, url: str, compression: bool) -> acp.SyncClientBuilder:
    if kind == "http":
        return acp.SyncClient.builder().connect(url)
    if kind == "asgi-ws":
        return acp.SyncClient.builder().connect("ws" + url[4:])
    return acp.SyncClient.builder().connect(url, compression=compression)


def _status(pid: int) -> tuple[int, int]:
    """(VmRSS in KiB, thread count) of a process, from /proc."""
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


def memory(n: int, compression: bool, kind: str = "ws") -> dict[str, float]:
    with ws_server(compression, "ws" if kind == "ws" else "http") as (url, proc):
        clients: list[acp.SyncClient] = []
        try:
            warm = _connect(kind, url, compression).build()
            clients.append(warm)
            warm.initialize()
            warm.prompt(warm.new_session(cwd="/").session_id, "10")
            rss0, threads0 = _status(proc.pid)
            for _ in range(n):
                client = _connect(kind, url, compression).build()
                clients.append(client)
                client.initialize()
            # Every server connection answered initialize: its threads and buffers exist.
            rss1, threads1 = _status(proc.pid)
        finally:
            closers = [threading.Thread(target=c.close) for c in clients]
            for t in closers:
                t.start()
            for t in closers:
                t.join()
    return {
        "connections": n,
        "rss_kib_per_connection": (rss1 - rss0) / n,
        "threads_per_connection": (threads1 - threads0) / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", choices=["stdio", "ws", "http"], help=argparse.SUPPRESS)
    parser.add_argument("--compression", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rtt", type=int, default=2000, help="sequential prompts per run")
    parser.add_argument("--stream", type=int, default=50_000, help="chunks streamed per run")
    parser.add_argument("--connections", type=int, default=200, help="idle connections for memory")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.compression)
        return
    if args.quick:
        args.runs, args.rtt, args.stream, args.connections = 1, 50, 500, 10
    rows: dict[str, Any] = {}
    table = (
        ("stdio", "stdio", False),
        ("ws", "ws", False),
        ("ws+deflate", "ws", True),
        ("http", "http", False),
        ("asgi-ws", "asgi-ws", False),
    )
    for name, kind, compression in table:
        samples = [run_row(kind, compression, args.rtt, args.stream) for _ in range(args.runs)]
        rows[name] = (
            statistics.median(s[0] for s in samples),
            statistics.median(s[1] for s in samples),
        )
    base_rtt, base_stream = rows["stdio"]
    print(f"{'transport':<12} {'prompts/s':>10} {'vs stdio':>9} {'chunks/s':>10} {'vs stdio':>9}")
    for name, (rtt, stream) in rows.items():
        print(f"{name:<12} {rtt:>10.0f} {rtt / base_rtt:>8.2f}x {stream:>10.0f} {stream / base_stream:>8.2f}x")
    for label, kind, compression in (("ws", "ws", False), ("ws+deflate", "ws", True), ("http", "http", False)):
        m = memory(args.connections, compression, kind)
        print(
            f"{label}: {m['rss_kib_per_connection']:.0f} KiB RSS and "
            f"{m['threads_per_connection']:.1f} threads per idle connection "
            f"(agent server, {m['connections']} connections held)"
        )


if __name__ == "__main__":
    main()
