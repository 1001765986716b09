"""The scenario agent with one deliberate change, for the replay and diff tests.

    python changed_scenario_agent.py text    # "stream N": the second chunk says "chunk two"
    python changed_scenario_agent.py tool    # "permission": one extra tool call first
    python changed_scenario_agent.py stop    # "stream N": stop reason max_tokens
"""

from __future__ import annotations

import sys

from acp import schema
from acp.examples import scenario_agent
from acp.examples.scenario_agent import ScenarioAgent, build_agent

_original_stream = ScenarioAgent._stream
_original_permission = ScenarioAgent._permission


def _stream_text(agent: ScenarioAgent, turn: scenario_agent._Turn, rest: str) -> str:
    count = int(rest or "3")
    for i in range(1, count + 1):
        turn.say("chunk two\n" if i == 2 else f"chunk {i}/{count}\n")
    return schema.StopReasons.END_TURN


def _stream_stop(agent: ScenarioAgent, turn: scenario_agent._Turn, rest: str) -> str:
    _original_stream(agent, turn, rest)
    return schema.StopReasons.MAX_TOKENS


def _permission_tool(agent: ScenarioAgent, turn: scenario_agent._Turn, rest: str) -> str:
    call = turn.ctx.start_tool_call("Look around first", schema.ToolKinds.SEARCH)
    turn.ctx.update_tool_call(call, status=schema.ToolCallStatuses.COMPLETED)
    return _original_permission(agent, turn, rest)


CHANGES = {
    "text": ("stream", _stream_text),
    "stop": ("stream", _stream_stop),
    "tool": ("permission", _permission_tool),
}


if __name__ == "__main__":
    name, change = CHANGES[sys.argv[1]]
    scenario_agent._SCENARIOS[name] = change
    build_agent().serve_stdio()
