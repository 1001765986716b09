"""The benchmark harness (benchmarks/run.py) cannot rot: every scenario runs once per
implementation with a tiny size through the same code paths, and must complete with the
right counts. Nothing here is timed or compared.

The official SDK's rows are skipped when its venv (`make bench-setup`) is absent, the
yardstick's (the prototype pair in ../shared/yardstick, run through its own CLI) when that
directory is absent; the bare pipe and the connection-level rows always run; our
SyncAgent/SyncClient rows xfail only while ``acp.SyncAgent`` / ``acp.SyncClient`` do not exist yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
sys.path.insert(0, str(BENCHMARKS / "peers"))

from _common import CpuMeter  # noqa: E402
from acpbench import measure, report, yardstick  # noqa: E402
from acpbench.implementations import BY_NAME as IMPLEMENTATIONS  # noqa: E402
from acpbench.scenarios import SCENARIOS, Scenario  # noqa: E402

import acp  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def _run(scenario: Scenario, impl: str) -> measure.Outcome:
    implementation = IMPLEMENTATIONS[impl]
    if scenario.runs_in_client:
        return measure.run_client(implementation, scenario, scenario.n_test)
    return measure.import_time(implementation)


# Every (scenario, implementation) pair that exists: the yardstick has no concurrent, import or
# memory scenario, so those pairs are not generated (rather than skipped).
PAIRS = [
    pytest.param(scenario, impl, id=f"{scenario.name}-{impl}")
    for impl in IMPLEMENTATIONS
    for scenario in SCENARIOS
    if IMPLEMENTATIONS[impl].supports(scenario.name) and scenario.n_test > 0
]


@pytest.mark.parametrize(("scenario", "impl"), PAIRS)
def test_scenario_completes(scenario: Scenario, impl: str) -> None:
    if IMPLEMENTATIONS[impl].baseline and IMPLEMENTATIONS[impl].missing():
        pytest.skip("no baseline installed (benchmarks/run.py --baseline REF)")
    if impl == "official" and IMPLEMENTATIONS[impl].missing():
        pytest.skip("official SDK venv absent (make bench-setup)")
    if IMPLEMENTATIONS[impl].preset is not None:
        if yardstick.missing():
            pytest.skip(str(yardstick.missing()))
    if impl == "ours" and not (hasattr(acp, "SyncAgent") and hasattr(acp, "SyncClient")):
        pytest.xfail("acp.SyncAgent / acp.SyncClient not available yet")
    if impl == "ours-async" and not (hasattr(acp, "AsyncAgent") and hasattr(acp, "AsyncClient")):
        pytest.xfail("acp.AsyncAgent / acp.AsyncClient not available yet")
    outcome = _run(scenario, impl)
    assert outcome.unavailable is None, outcome.unavailable
    assert outcome.error is None, outcome.error
    expected = scenario.n_test if scenario.runs_in_client else 1
    assert outcome.count == expected
    for metric in scenario.metrics:
        # a peak RSS may not grow at all (memory freed earlier is reused); nothing else is 0
        assert outcome.metrics[metric.name] > 0 or (metric.unit == "x msg" and outcome.metrics[metric.name] == 0)
    if any(metric.name == "client_cpu_us" for metric in scenario.metrics):
        # CPU on each side over the timed part: at most the timed wall time on every core (plus
        # 2 ms for the reads of the clocks just outside it), so not the process's whole life
        wall_us = scenario.n_test / outcome.metrics[scenario.metrics[0].name] * 1e6
        for side in ("client_cpu_us", "agent_cpu_us"):
            assert outcome.metrics[side] * scenario.n_test < (wall_us + 2000) * (os.cpu_count() or 1)


def test_cpu_meter_attributes_cpu_to_the_side_that_spent_it() -> None:
    """The agent burns about 0.2 s of CPU while the client blocks on its pipe: the agent's side
    gets it, the client's stays near zero."""
    burn = "import sys, time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\n" \
           "print('done', flush=True)\nsys.stdin.read()\n"
    agent = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None
        meter = CpuMeter(agent.pid)
        meter.start()
        assert agent.stdout.readline() == "done\n"
        cpu = meter.stop(1)
    finally:
        agent.communicate("", timeout=10)
    assert 150_000 < cpu["agent_cpu_us"] < 1_000_000
    assert cpu["client_cpu_us"] < 50_000


def test_yardstick_result_line_maps_onto_our_metrics() -> None:
    by_name = {s.name: s for s in SCENARIOS}
    line = json.dumps({"impl": "yardstick-cork", "scenario": "rtt", "n": 10, "seconds": 0.001, "per_sec": 10000.0,
                       "ok": True, "c_cpu_us": 21.5, "a_cpu_us": 19.25, "c_csw": 2.0, "a_csw": 2.0})
    metrics, error = yardstick.parse(by_name["rtt"], 10, line)
    assert error is None
    assert metrics == {"prompts_per_s": 10000.0, "client_cpu_us": 21.5, "agent_cpu_us": 19.25}
    startup = json.dumps({"impl": "x", "scenario": "startup", "n": 1, "seconds": 0.03, "per_sec": 33.3, "ok": True,
                          "ms_median": 30.5, "ms_samples": [30.5]})
    assert yardstick.parse(by_name["startup"], 1, startup) == ({"startup_ms": 30.5}, None)
    assert "ok=false" in str(yardstick.parse(by_name["rtt"], 10, line.replace("true", "false"))[1])
    assert "n=10, expected 11" in str(yardstick.parse(by_name["rtt"], 11, line)[1])
    no_cpu = json.dumps({"n": 10, "per_sec": 1.0, "ok": True})  # an agent that does not answer _bench/stats
    assert "no 'c_cpu_us'" in str(yardstick.parse(by_name["rtt"], 10, no_cpu)[1])


def test_bench_without_the_yardstick_says_it_skipped_it(tmp_path: Path) -> None:
    """run.py end to end with ../shared absent: one line says why both yardstick columns are
    empty, the other columns are measured, and the JSON says the same."""
    out = tmp_path / "latest.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["ACP_YARDSTICK"] = str(tmp_path / "no-shared" / "yardstick")
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run.py"), "--only", "rtt", "--impl", "bare", "--impl", "yardstick-cork",
         "--impl", "yardstick-lf", "-n", "5", "--runs", "1", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert time.perf_counter() - started < 60
    skipped = [line for line in proc.stdout.splitlines() if "yardstick" in line and "not measured" in line]
    assert skipped == [f"yardstick-cork, yardstick-lf: not measured (yardstick skipped: {tmp_path}/no-shared/yardstick "
                       "has no client.py / agent.py (../shared absent; ACP_YARDSTICK overrides))"]
    data = json.loads(out.read_text())
    rtt = data["scenarios"]["rtt"]
    assert rtt["prompts_per_s"]["median"]["bare"] > 0
    assert rtt["agent_cpu_us"]["median"]["bare"] > 0
    assert rtt["prompts_per_s"]["median"]["yardstick-cork"] is None
    assert rtt["prompts_per_s"]["ratios"]["ours/yardstick-lf"] is None
    assert set(data["unavailable"]) == {"yardstick-cork", "yardstick-lf"}


def test_cumulative_import_time_sums_top_level_entries() -> None:
    log = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:        50 |         50 |   _io",
        "import time:       100 |        300 | site",
        "import time:        20 |         20 |     acp.rpc",
        "import time:        10 |        500 |   acp",
        "import time:       200 |       2000 | acp.connection",
    ])
    assert measure.cumulative_us(log, ("acp.connection",)) == 2000
    assert measure.cumulative_us(log, ("site",)) == 300
    with pytest.raises(ValueError):
        measure.cumulative_us(log, ("msgspec",))


def test_report_medians_ratios_and_errors(tmp_path: Path) -> None:
    rtt = next(s for s in SCENARIOS if s.name == "rtt")
    results = report.Results({"rtt": 10})
    cpu = {"client_cpu_us": 10.0, "agent_cpu_us": 10.0}
    for value in (1.0, 3.0, 2.0):
        results.add(rtt, "bare", measure.Outcome(metrics={"prompts_per_s": value * 10, **cpu}, count=10))
        results.add(rtt, "conn", measure.Outcome(metrics={"prompts_per_s": value, **cpu}, count=10))
    results.add(rtt, "official", measure.Outcome(metrics={"prompts_per_s": 1.0, **cpu}, count=9))  # miscounted
    results.add(rtt, "official", measure.Outcome(metrics={"prompts_per_s": 1.0}, count=10))  # no CPU figures
    results.add(rtt, "ours", measure.Outcome(unavailable="not yet"))

    assert results.median("rtt", "prompts_per_s", "bare") == 20.0
    assert results.median("rtt", "prompts_per_s", "official") is None
    assert results.errors == ["rtt/official: checked 9 operations, expected 10",
                              "rtt/official: no figure for client_cpu_us, agent_cpu_us"]
    text = report.table(results)
    assert "0.10x" in text and "ours: not measured (not yet)" in text
    report.write_json(tmp_path / "r.json", results, {"runs": 3})
    data = (tmp_path / "r.json").read_text()
    assert '"conn/bare": 0.1' in data


def test_report_yardstick_ratios_and_cpu_rows(tmp_path: Path) -> None:
    rtt = next(s for s in SCENARIOS if s.name == "rtt")
    concurrent = next(s for s in SCENARIOS if s.name == "concurrent")
    results = report.Results({"rtt": 10, "concurrent": 16})
    figures = {"ours": (5000.0, 30.0, 20.0), "conn": (8000.0, 25.0, 18.0), "yardstick-cork": (10000.0, 20.0, 20.0),
               "yardstick-lf": (8000.0, 15.0, 40.0)}
    for impl, (rate, client, agent) in figures.items():
        metrics = {"prompts_per_s": rate, "client_cpu_us": client, "agent_cpu_us": agent}
        results.add(rtt, impl, measure.Outcome(metrics=metrics, count=10))
    results.add(concurrent, "ours", measure.Outcome(metrics={"prompts_per_s": 1.0, "client_cpu_us": 1.0,
                                                             "agent_cpu_us": 1.0}, count=16))
    lines = report.table(results).splitlines()
    header = lines[0].split()
    assert header[-2:] == ["ours/yardstick-cork", "ours/yardstick-lf"]
    client_row = next(line for line in lines if line.startswith("rtt client CPU"))
    agent_row = next(line for line in lines if line.startswith("rtt agent CPU"))
    assert client_row.split()[-2:] == ["1.50x", "2.00x"]  # ours spends more client CPU per prompt
    assert agent_row.split()[-2:] == ["1.00x", "0.50x"]
    assert "yardstick-cork, yardstick-lf: n/a for concurrent (no such scenario in its contract)" in lines
    report.write_json(tmp_path / "r.json", results, {})
    ratios = json.loads((tmp_path / "r.json").read_text())["scenarios"]["rtt"]["prompts_per_s"]["ratios"]
    assert ratios["ours/yardstick-cork"] == 0.5 and ratios["ours/yardstick-lf"] == 0.625
    # the engine alone against the same floor, and what the facade adds to it
    assert ratios["conn/yardstick-lf"] == 1.0 and ratios["ours/conn"] == 0.625


@pytest.mark.parametrize("scenario", ["rtt", "read"])
def test_our_peers_pair_with_the_yardstick_both_ways(scenario: str) -> None:
    """The cross pairs of benchmarks/README.md ("Fifth pass"): our client spawns the yardstick's
    lf agent (ACP_BENCH_AGENT), and the yardstick's client drives our agent; both complete with
    every read answered with the 1 KiB the other side expects."""
    if yardstick.missing():
        pytest.skip(str(yardstick.missing()))
    where = yardstick.directory()
    env = dict(os.environ, PROTO_VARIANT="lf", PYTHONDONTWRITEBYTECODE="1")
    lf_agent = f"{sys.executable} -B {where / 'agent.py'}"
    ours = subprocess.run(
        [sys.executable, str(BENCHMARKS / "peers" / "ours_client.py"), scenario, "30"],
        capture_output=True, text=True, timeout=120, env=dict(env, ACP_BENCH_AGENT=lf_agent),
    )
    assert ours.returncode == 0, ours.stderr[-2000:]
    assert json.loads(ours.stdout.splitlines()[-1])["count"] == 30
    theirs = subprocess.run(
        [sys.executable, "-B", str(where / "client.py"), "--scenario", scenario, "--n", "30", "--",
         sys.executable, str(BENCHMARKS / "peers" / "ours_agent.py")],
        capture_output=True, text=True, timeout=120, env=env, cwd=str(where),
    )
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    result = json.loads(theirs.stdout.splitlines()[-1])
    assert result["ok"] is True and result["n"] == 30
