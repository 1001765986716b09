"""Medians, ratios, the printed table and the JSON written to benchmarks/results/."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from .implementations import BY_NAME as IMPLEMENTATIONS
from .measure import Outcome
from .scenarios import SCENARIOS, Scenario

# (numerator, denominator) pairs shown as ratio columns
RATIOS = (("ours", "official"), ("ours-async", "official"), ("ours", "ours-baseline"), ("ours-session", "ours"),
          ("ours-async-session", "ours-async"), ("ours", "bare"), ("ours-async", "bare-async"),
          ("bare-async", "official"),
          ("conn", "official"), ("conn", "bare"),
          # engine and facade apart: what each facade adds, how far each engine is from its floor
          ("ours", "conn"), ("ours-async", "aconn"), ("aconn", "bare-async"),
          ("conn", "yardstick-cork"), ("conn", "yardstick-lf"), ("ours", "yardstick-cork"), ("ours", "yardstick-lf"))


class Results:
    """Every outcome of a run, by scenario, metric and implementation."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.samples: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        self.unavailable: dict[str, str] = {}
        self.errors: list[str] = []

    def add(self, scenario: Scenario, impl: str, outcome: Outcome) -> None:
        if outcome.unavailable is not None:
            self.unavailable[impl] = outcome.unavailable
        elif outcome.error is not None:
            self.errors.append(f"{scenario.name}/{impl}: {outcome.error}")
        elif scenario.runs_in_client and outcome.count != self.sizes[scenario.name]:
            self.errors.append(
                f"{scenario.name}/{impl}: checked {outcome.count} operations, expected {self.sizes[scenario.name]}"
            )
        elif absent := [m.name for m in scenario.metrics if m.name not in outcome.metrics]:
            self.errors.append(f"{scenario.name}/{impl}: no figure for {', '.join(absent)}")
        else:
            for metric in scenario.metrics:
                self.samples[scenario.name, metric.name, impl].append(outcome.metrics[metric.name])

    def median(self, scenario: str, metric: str, impl: str) -> float | None:
        values = self.samples.get((scenario, metric, impl))
        return statistics.median(values) if values else None

    def to_json(self, meta: dict[str, Any]) -> dict[str, Any]:
        scenarios: dict[str, Any] = {}
        for scenario in SCENARIOS:
            if scenario.name not in self.sizes:
                continue
            for metric in scenario.metrics:
                medians = {i: self.median(scenario.name, metric.name, i) for i in IMPLEMENTATIONS}
                scenarios.setdefault(scenario.name, {"n": self.sizes[scenario.name],
                                                     "description": scenario.description})
                scenarios[scenario.name][metric.name] = {
                    "unit": metric.unit,
                    "higher_is_better": metric.higher_is_better,
                    "median": medians,
                    "samples": {i: self.samples.get((scenario.name, metric.name, i), []) for i in IMPLEMENTATIONS},
                    "ratios": {f"{a}/{b}": _ratio(medians[a], medians[b]) for a, b in RATIOS},
                }
        return {"meta": meta, "scenarios": scenarios, "unavailable": self.unavailable, "errors": self.errors}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _figure(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def table(results: Results) -> str:
    """The side-by-side table: absolute medians, then ratios (ratio > 1: ours is bigger).

    Each throughput row is followed by the CPU each side (client, agent) spent per operation
    over the same timed part, so a gain or a loss can be attributed to a side.
    """
    measured = {key[2] for key in results.samples}
    # The baseline's column (and its ratio) only when `--baseline REF` measured one.
    impls = [i for i in IMPLEMENTATIONS.values() if not i.baseline or i.name in measured]
    shown = {i.name for i in impls}
    ratio_pairs = [(a, b) for a, b in RATIOS if a in shown and b in shown]
    header = ["scenario", "N", "unit", *(i.label for i in impls), *(f"{a}/{b}" for a, b in ratio_pairs)]
    rows = [header]
    for scenario in SCENARIOS:
        if scenario.name not in results.sizes:
            continue
        for metric in scenario.metrics:
            medians = {i.name: results.median(scenario.name, metric.name, i.name) for i in impls}
            name = f"{scenario.name} {metric.label}".strip()
            arrow = "higher" if metric.higher_is_better else "lower"
            ratios = [_ratio(medians[a], medians[b]) for a, b in ratio_pairs]
            rows.append([
                name, str(results.sizes[scenario.name]) if metric.sized else "", f"{metric.unit} ({arrow})", *(_figure(medians[i.name]) for i in impls),
                *("n/a" if r is None else f"{r:.2f}x" for r in ratios),
            ])
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    left = (0, 2)  # the scenario and unit columns; figures are right-aligned
    lines = [
        "  ".join(cell.ljust(w) if c in left else cell.rjust(w) for c, (cell, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    by_reason: dict[str, list[str]] = defaultdict(list)  # one line for both yardstick columns
    for name, why in results.unavailable.items():
        by_reason[why].append(name)
    notes = [f"{', '.join(names)}: not measured ({why})" for why, names in by_reason.items()]
    unsupported = defaultdict(list)
    for impl in impls:
        if impl.name not in results.unavailable:
            lacking = [s for s in results.sizes if not impl.supports(s)]
            if lacking:
                unsupported[", ".join(lacking)].append(impl.name)
    notes += [f"{', '.join(names)}: n/a for {lacking} (no such scenario in its contract)"
              for lacking, names in unsupported.items()]
    notes += [f"error: {e}" for e in results.errors]
    return "\n".join(lines + notes)


def write_json(path: Path, results: Results, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results.to_json(meta), indent=2) + "\n")
