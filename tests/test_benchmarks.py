"""The benchmark harness (benchmarks/run.py) cannot rot: every scenario runs once per
implementation with a tiny size through the same code paths, and must complete with the
right counts. Nothing here is timed or compared.

The official SDK's rows are skipped when its venv (`make bench-setup`) is absent; the bare
pipe and the connection-level rows always run; our SyncAgent/SyncClient rows xfail only while
``acp.SyncAgent`` / ``acp.SyncClient`` do not exist yet.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from acpbench import measure, report  # noqa: E402
from acpbench.implementations import BY_NAME as IMPLEMENTATIONS  # noqa: E402
from acpbench.scenarios import SCENARIOS, Scenario  # noqa: E402

import acp  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def _run(scenario: Scenario, impl: str) -> measure.Outcome:
    implementation = IMPLEMENTATIONS[impl]
    if scenario.runs_in_client:
        return measure.run_client(implementation, scenario, scenario.n_test)
    return measure.import_time(implementation)


@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_scenario_completes(scenario: Scenario, impl: str) -> None:
    if impl == "official" and IMPLEMENTATIONS[impl].missing():
        pytest.skip("official SDK venv absent (make bench-setup)")
    if impl == "ours" and not (hasattr(acp, "SyncAgent") and hasattr(acp, "SyncClient")):
        pytest.xfail("acp.SyncAgent / acp.SyncClient not available yet")
    outcome = _run(scenario, impl)
    assert outcome.unavailable is None, outcome.unavailable
    assert outcome.error is None, outcome.error
    expected = scenario.n_test if scenario.runs_in_client else 1
    assert outcome.count == expected
    for metric in scenario.metrics:
        assert outcome.metrics[metric.name] > 0


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
    for value in (1.0, 3.0, 2.0):
        results.add(rtt, "bare", measure.Outcome(metrics={"prompts_per_s": value * 10}, count=10))
        results.add(rtt, "conn", measure.Outcome(metrics={"prompts_per_s": value}, count=10))
    results.add(rtt, "official", measure.Outcome(metrics={"prompts_per_s": 1.0}, count=9))  # miscounted
    results.add(rtt, "ours", measure.Outcome(unavailable="not yet"))

    assert results.median("rtt", "prompts_per_s", "bare") == 20.0
    assert results.median("rtt", "prompts_per_s", "official") is None
    assert results.errors == ["rtt/official: checked 9 operations, expected 10"]
    text = report.table(results)
    assert "0.10x" in text and "ours: not measured (not yet)" in text
    report.write_json(tmp_path / "r.json", results, {"runs": 3})
    data = (tmp_path / "r.json").read_text()
    assert '"conn/bare": 0.1' in data
