"""Connection-level benchmark: acp.connection against a bare msgspec pipe, same run.

    python benchmarks/bench_connection.py [--rtt N] [--stream N] [--runs K] [--ordering session]

Both sides are real processes joined by pipes. `rtt` is sequential request round trips per
second; `stream` is notifications per second (one request whose answer follows N notifications,
each decoded by the client and checked in order). Reported: medians of K interleaved runs, and
the ratio ours / bare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).parent


def bare_client(rtt: int, stream: int) -> dict[str, float]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "bare_peer.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    reader = open(stdout.fileno(), "rb", buffering=65536, closefd=False)
    encode, decode = msgspec.json.encode, msgspec.json.decode
    stdin.write(encode({"jsonrpc": "2.0", "id": 0, "method": "echo", "params": {}}) + b"\n")
    decode(reader.readline())
    start = time.perf_counter()
    for i in range(1, rtt + 1):
        stdin.write(encode({"jsonrpc": "2.0", "id": i, "method": "echo", "params": {"i": i}}) + b"\n")
        answer = decode(reader.readline())
        assert answer["id"] == i
    rtt_rate = rtt / (time.perf_counter() - start)
    start = time.perf_counter()
    stdin.write(encode({"jsonrpc": "2.0", "id": -1, "method": "stream", "params": {"n": stream}}) + b"\n")
    expected = 0
    while True:
        msg = decode(reader.readline())
        if "method" in msg:
            assert msg["params"]["i"] == expected
            expected += 1
        else:
            break
    assert expected == stream
    stream_rate = stream / (time.perf_counter() - start)
    stdin.close()
    proc.wait()
    return {"rtt": rtt_rate, "stream": stream_rate}


def acp_client(rtt: int, stream: int, ordering: str = "connection") -> dict[str, float]:
    from acp.connection import Connection
    from acp.transport import ProcessTransport

    conn = Connection(
        ProcessTransport([sys.executable, str(HERE / "conn_peer.py")]), name="bench", ordering=ordering  # type: ignore[arg-type]
    )
    counter = [0]

    def on_chunk(params: Any) -> None:
        assert params["i"] == counter[0]
        counter[0] += 1

    conn.on_notification("chunk", on_chunk)
    conn.start()
    request = conn.request
    request("echo", {})
    start = time.perf_counter()
    for i in range(1, rtt + 1):
        assert request("echo", {"i": i})["i"] == i
    rtt_rate = rtt / (time.perf_counter() - start)
    start = time.perf_counter()
    request("stream", {"n": stream})
    assert counter[0] == stream
    stream_rate = stream / (time.perf_counter() - start)
    conn.close()
    return {"rtt": rtt_rate, "stream": stream_rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rtt", type=int, default=5000)
    parser.add_argument("--stream", type=int, default=50000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ordering", choices=("connection", "session"), default="connection",
                        help="the acp client's ordering mode (the stream's chunks name one session)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"bare": [], "acp": []}
    for _ in range(args.runs):  # interleaved, so drift on a noisy machine hits both alike
        results["bare"].append(bare_client(args.rtt, args.stream))
        results["acp"].append(acp_client(args.rtt, args.stream, args.ordering))
    table: dict[str, dict[str, float]] = {}
    for scenario in ("rtt", "stream"):
        bare = statistics.median(r[scenario] for r in results["bare"])
        ours = statistics.median(r[scenario] for r in results["acp"])
        table[scenario] = {"bare": bare, "acp": ours, "ratio": ours / bare}
    print(f"{'scenario':<10}{'bare msgspec /s':>18}{'acp.connection /s':>20}{'ratio':>8}")
    for scenario, row in table.items():
        print(f"{scenario:<10}{row['bare']:>18,.0f}{row['acp']:>20,.0f}{row['ratio']:>8.2f}x")
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
