"""Engine-level benchmark of the asyncio runtime: acp.aio.AsyncConnection against the threaded
acp.connection.Connection and the official Python SDK, same run.

    python benchmarks/bench_aio_connection.py [--rtt N] [--stream N] [--runs K] [--json FILE]

Both sides are real processes joined by stdio pipes, driven by the client scripts of
``benchmarks/peers`` (one JSON line each): ``aconn`` (AsyncConnection on both sides, ``async
def`` handlers, plain dict params), ``conn`` (Connection on both sides, the same messages) and
``official`` (the official SDK's agent and client, in benchmarks/.venv-official; skipped when
that venv is missing). ``rtt`` is sequential session/prompt round trips per second, ``stream``
agent_message_chunk notifications per second within one prompt (checked in order). Reported:
medians of K interleaved runs, CPU per operation of each process, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
OFFICIAL_PYTHON = HERE / ".venv-official" / "bin" / "python"

IMPLEMENTATIONS = {
    "aconn": (Path(sys.executable), PEERS / "aconn_client.py"),
    "conn": (Path(sys.executable), PEERS / "conn_client.py"),
    "official": (OFFICIAL_PYTHON, PEERS / "official_client.py"),
}
RATE = {"rtt": "prompts_per_s", "stream": "chunks_per_s"}


def measure(impl: str, scenario: str, n: int) -> dict[str, float]:
    python, client = IMPLEMENTATIONS[impl]
    out = subprocess.run([str(python), str(client), scenario, str(n)], cwd=PEERS, capture_output=True,
                         text=True, timeout=600, check=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if result.get("count") != n:
        raise RuntimeError(f"{impl} {scenario}: checked {result.get('count')} of {n}")
    metrics: dict[str, float] = result["metrics"]
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rtt", type=int, default=5000)
    parser.add_argument("--stream", type=int, default=50000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the medians here")
    args = parser.parse_args()
    impls = [name for name, (python, _) in IMPLEMENTATIONS.items() if python.exists()]
    if "official" not in impls:
        print(f"official: not measured ({OFFICIAL_PYTHON} missing: run `make bench-setup`)", file=sys.stderr)
    sizes = {"rtt": args.rtt, "stream": args.stream}
    samples: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(args.runs):  # interleaved, so drift on a noisy machine hits all alike
        for scenario, n in sizes.items():
            for impl in impls:
                samples.setdefault((impl, scenario), []).append(measure(impl, scenario, n))
    table: dict[str, dict[str, dict[str, float]]] = {}
    for scenario in sizes:
        for impl in impls:
            runs = samples[(impl, scenario)]
            table.setdefault(scenario, {})[impl] = {
                key: statistics.median(r[key] for r in runs) for key in (RATE[scenario], "client_cpu_us", "agent_cpu_us")
            }
    head = f"{'scenario':<8}{'impl':<10}{'per s':>12}{'client us':>11}{'agent us':>10}"
    ratios = [other for other in ("conn", "official") if other in impls]
    print(head + "".join(f"{'vs ' + other:>12}" for other in ratios))
    for scenario, rows in table.items():
        for impl, row in rows.items():
            line = f"{scenario:<8}{impl:<10}{row[RATE[scenario]]:>12,.0f}{row['client_cpu_us']:>11.1f}{row['agent_cpu_us']:>10.1f}"
            if impl == "aconn":
                line += "".join(f"{row[RATE[scenario]] / rows[other][RATE[scenario]]:>11.2f}x" for other in ratios)
            print(line)
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
