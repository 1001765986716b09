"""`make bench`: our SDK vs the official Python SDK vs a bare msgspec pipe (and the yardstick
prototype of ../shared/yardstick where present), in one run.

    python benchmarks/run.py [--quick] [--only SCENARIO ...] [--runs K] [--setup]

Every scenario is measured for each implementation (see benchmarks/acpbench/implementations.py)
with the agent and the client in separate processes joined by stdio pipes. Runs are
interleaved (run 1 of every scenario and implementation, then run 2, ...), so drift on a noisy
machine hits all alike; the table shows medians and ratios, and the JSON (all samples too)
goes to benchmarks/results/latest.json.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from acpbench import installed, measure, official_venv, pinning, report, yardstick
from acpbench.implementations import BY_NAME as IMPLEMENTATIONS
from acpbench.scenarios import BY_NAME as SCENARIOS
from acpbench.scenarios import Scenario

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run")
    parser.add_argument("--only", action="append", choices=list(SCENARIOS), metavar="SCENARIO",
                        help=f"run only this scenario (repeatable): {', '.join(SCENARIOS)}")
    parser.add_argument("--impl", action="append", choices=list(IMPLEMENTATIONS),
                        help="measure only this implementation (repeatable)")
    parser.add_argument("--runs", type=int, help="interleaved runs per scenario (default 5; --quick 1)")
    parser.add_argument("-n", type=int, help="override every scenario's size")
    parser.add_argument("--setup", action="store_true",
                        help="install the official SDK's venv if missing, and this checkout (non-editable) in "
                             "benchmarks/.venv-installed if missing or stale")
    parser.add_argument("--setup-only", action="store_true", help="do what --setup does, and exit")
    parser.add_argument("--baseline", metavar="REF",
                        help="also measure SyncAgent/SyncClient as of git commit REF (installed non-editable in "
                             "benchmarks/.venv-baseline), as the ours-baseline rows with an ours/ours-baseline ratio")
    parser.add_argument("--cpus", metavar="LIST",
                        help="run every client and its agent under `taskset -c LIST` (e.g. 0: both processes "
                             "on one CPU, where a thread wake-up cannot hide Python work)")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"where to write the results ({RESULTS})")
    return parser.parse_args()


def measure_once(scenario: Scenario, impl: str, n: int) -> measure.Outcome:
    implementation = IMPLEMENTATIONS[impl]
    if scenario.runs_in_client:
        return measure.run_client(implementation, scenario, n)
    return measure.import_time(implementation)


def warm_up(impls: list[str]) -> None:
    """Import every SDK once so that bytecode caches exist before anything is timed."""
    for impl in impls:
        measure.warm_up(IMPLEMENTATIONS[impl])


def main() -> None:
    args = parse_args()
    if args.setup or args.setup_only:
        official_venv.ensure()
        installed.ensure()
        if args.setup_only:
            return
    if args.cpus:
        if shutil.which("taskset") is None:
            sys.exit("--cpus needs taskset (util-linux)")
        pinning.PIN[:] = ["taskset", "-c", args.cpus]
    scenarios = [SCENARIOS[name] for name in args.only] if args.only else list(SCENARIOS.values())
    if args.baseline:
        installed.ensure_baseline(args.baseline)
    impls = args.impl or [name for name, impl in IMPLEMENTATIONS.items() if not impl.baseline or args.baseline]
    runs = args.runs or (1 if args.quick else 5)
    sizes = {s.name: args.n or (s.n_quick if args.quick else s.n) for s in scenarios}
    results = report.Results(sizes)
    skip: set[str] = set()

    started = time.perf_counter()
    warm_up(impls)
    for run in range(runs):
        rotated = impls[run % len(impls):] + impls[: run % len(impls)]  # no fixed first/last slot
        for scenario in scenarios:
            statuses = []
            for impl in rotated:
                if impl in skip or not IMPLEMENTATIONS[impl].supports(scenario.name):
                    continue
                outcome = measure_once(scenario, impl, sizes[scenario.name])
                results.add(scenario, impl, outcome)
                if outcome.unavailable is not None:
                    skip.add(impl)
                statuses.append(f"{impl} {_status(outcome)}")
            print(f"[run {run + 1}/{runs}] {scenario.name}: {', '.join(statuses)}", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - started
    print(report.table(results))
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "pinned": args.cpus,
        "runs": runs,
        "quick": args.quick,
        "official_sdk": official_venv.version(),
        "ours_install": installed.describe(),
        "baseline": installed.baseline_ref() if args.baseline else None,
        "implementations": {i: IMPLEMENTATIONS[i].label for i in impls},
        "yardstick": yardstick.missing() or str(yardstick.directory()),
        "cpu": "client_cpu_us / agent_cpu_us: user+sys CPU time (all threads) of each process over the "
               "timed part, per operation; read by our client scripts on the process CPU-time clocks "
               "(their own and clock_getcpuclockid(agent)); the yardstick's are its own c_cpu_us / a_cpu_us",
        "elapsed_s": round(elapsed, 1),
    }
    report.write_json(args.json, results, meta)
    pin = f"; every process pinned to CPU(s) {args.cpus}" if args.cpus else ""
    print(f"\n{runs} interleaved run(s) in {elapsed:.0f} s{pin}; medians shown; ours ran on the {installed.describe()}; "
          f"JSON: {args.json}")
    if results.errors:
        sys.exit(1)


def _status(outcome: measure.Outcome) -> str:
    return "n/a" if outcome.unavailable else "ERROR" if outcome.error else "ok"


if __name__ == "__main__":
    main()
