"""The scenarios and their figures."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str  # the key a client script reports
    unit: str
    higher_is_better: bool
    label: str = ""  # tells apart the figures of one scenario
    sized: bool = True  # False: the figure does not depend on the scenario's N


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    metrics: tuple[Metric, ...]
    n: int  # default size
    n_quick: int  # --quick
    n_test: int  # tests/test_benchmarks.py (0: not run there; another size covers it)
    runs_in_client: bool = True  # False: measured by the harness itself (import)


def _rate(name: str, unit: str, per: str) -> tuple[Metric, ...]:
    """A throughput, then the CPU each side spent per operation over the same timed part."""
    return (
        Metric(name, unit, higher_is_better=True),
        Metric("client_cpu_us", f"us/{per}", higher_is_better=False, label="client CPU"),
        Metric("agent_cpu_us", f"us/{per}", higher_is_better=False, label="agent CPU"),
    )


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("rtt", "N sequential session/prompt round trips, answered end_turn at once",
             _rate("prompts_per_s", "prompts/s", "prompt"), n=5000, n_quick=200, n_test=10),
    Scenario("stream", "one prompt streaming N agent_message_chunk updates, counted in order",
             _rate("chunks_per_s", "chunks/s", "chunk"), n=50000, n_quick=2000, n_test=50),
    Scenario("read", "one prompt making N sequential fs/read_text_file calls (1 KiB answers)",
             _rate("reads_per_s", "reads/s", "read"), n=3000, n_quick=200, n_test=10),
    Scenario("sessions", "N x (session/new, then one prompt)",
             _rate("sessions_per_s", "sessions/s", "session"), n=1000, n_quick=100, n_test=5),
    Scenario("concurrent", "8 sessions prompting at once from 8 client threads (or tasks), N prompts",
             _rate("prompts_per_s", "prompts/s", "prompt"), n=4000, n_quick=400, n_test=16),
    *(Scenario(f"large-{mib}", f"one fs/read_text_file answer of {mib} MiB, then one session/update of {mib} MiB; "
               "peak RSS growth of each side as a multiple of the message",
               (Metric("read_mib_s", "MiB/s", higher_is_better=True, label="read"),
                Metric("update_mib_s", "MiB/s", higher_is_better=True, label="update"),
                Metric("client_rss_x", "x msg", higher_is_better=False, label="client RSS", sized=False),
                Metric("agent_rss_x", "x msg", higher_is_better=False, label="agent RSS", sized=False)),
               n=mib, n_quick=1, n_test=1 if mib == 1 else 0)  # the tests run the code once, at 1 MiB
      for mib in (1, 10, 50)),
    Scenario("startup", "from spawning the agent to the initialize answer",
             (Metric("startup_ms", "ms", higher_is_better=False, sized=False),), n=1, n_quick=1, n_test=1),
    Scenario("import", "python -X importtime: `import acp` cumulative (bare: msgspec); ready: "
             "everything imported to reach the agent and client API, beyond the interpreter's startup",
             (Metric("import_us", "us", higher_is_better=False, sized=False),
              Metric("import_ready_us", "us", higher_is_better=False, label="ready", sized=False)),
             n=1, n_quick=1, n_test=1, runs_in_client=False),
    Scenario("memory", "agent peak RSS (VmHWM): idle after initialize + 1 session; holding N sessions",
             (Metric("rss_idle_mib", "MiB", higher_is_better=False, label="idle", sized=False),
              Metric("rss_sessions_mib", "MiB", higher_is_better=False, label="N sessions")),
             n=1000, n_quick=100, n_test=10),
)

BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
