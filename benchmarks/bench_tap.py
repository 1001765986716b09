"""How much latency `acp tap` adds: round trips straight to a peer vs through the tap.

    .venv/bin/python benchmarks/bench_tap.py [--lines N] [--prompts N] [--runs R]

Two measurements, each interleaved (direct, tap, direct, tap...) and reported as medians:

* ``lines``: one JSON line (about 300 bytes) written, the peer echoes it, read back; the peer is a
  tiny line echo, so nearly all the time is pipes and the tap. A round trip crosses the tap
  twice, so the added time per message is half the added time per round trip.
* ``prompts``: real ACP, ``SyncClient.prompt`` against the bundled echo agent (each turn is a
  request, one session/update and an answer: three messages through the tap).

The recording is written for real (to a temporary folder), as in normal use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ECHO_PEER = (
    "import sys\n"
    "out = sys.stdout.buffer\n"
    "for line in sys.stdin.buffer:\n"
    "    out.write(line); out.flush()\n"
)
LINE = (json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
    "sessionId": "s-1", "update": {"sessionUpdate": "agent_message_chunk",
                                   "content": {"type": "text", "text": "x" * 200}}}}) + "\n").encode()


def tapped(argv: list[str], folder: str) -> list[str]:
    return [sys.executable, "-m", "acp", "tap", "--out", folder, "--", *argv]


def line_round_trips(argv: list[str], count: int) -> float:
    """Seconds per round trip."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    for _ in range(50):  # warm up
        proc.stdin.write(LINE)
        proc.stdin.flush()
        proc.stdout.readline()
    start = time.perf_counter()
    for _ in range(count):
        proc.stdin.write(LINE)
        proc.stdin.flush()
        if proc.stdout.readline() != LINE:
            raise RuntimeError("the peer answered something else")
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(30)
    return elapsed / count


def prompt_round_trips(argv: list[str], count: int) -> float:
    """Seconds per prompt turn."""
    import acp

    with acp.SyncClient.builder().agent_process(*argv).build() as client:
        client.initialize()
        session = client.new_session(cwd=os.getcwd()).session_id
        for _ in range(20):
            client.prompt(session, "warm up")
        start = time.perf_counter()
        for n in range(count):
            client.prompt(session, f"prompt {n}")
        return (time.perf_counter() - start) / count


def compare(name: str, measure, argv: list[str], count: int, runs: int, messages: int, folder: str) -> dict:
    direct, via_tap = [], []
    for _ in range(runs):
        direct.append(measure(argv, count))
        via_tap.append(measure(tapped(argv, folder), count))
    d, t = statistics.median(direct), statistics.median(via_tap)
    result = {
        "scenario": name, "n": count, "runs": runs,
        "direct_us": round(d * 1e6, 1), "tap_us": round(t * 1e6, 1), "ratio": round(t / d, 2),
        "added_us_per_message": round((t - d) * 1e6 / messages, 1),
    }
    print(f"{name:8} direct {result['direct_us']:8.1f} µs   via tap {result['tap_us']:8.1f} µs   "
          f"ratio {result['ratio']:.2f}   added {result['added_us_per_message']:.1f} µs per message "
          f"({messages} messages through the tap per round trip)")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=5000, help="line round trips per run")
    parser.add_argument("--prompts", type=int, default=500, help="prompt turns per run")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs (the median is reported)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="acp-bench-tap-") as folder:
        results = [
            compare("lines", line_round_trips, [sys.executable, "-c", ECHO_PEER], args.lines, args.runs, 2, folder),
            compare("prompts", prompt_round_trips, [sys.executable, "-m", "acp.examples.echo_agent"],
                    args.prompts, args.runs, 3, folder),
        ]
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
