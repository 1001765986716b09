"""A SyncAgent process that reports what its handlers saw of fields and variants it does not
know, for the forward-compatibility tests.

``session/new`` answers ``_meta`` = {"servers": the class name of each MCP server,
"extra": extra_fields(request), "reencoded": the request encoded again}, with claude-code's
``models`` added to the typed answer through ``with_extra_fields``.
"""

from __future__ import annotations

import json

import acp
from acp import schema

MODELS = {"currentModelId": "m1", "availableModels": []}


def new_session(req: schema.NewSessionRequest, ctx: acp.AgentRequestContext) -> schema.NewSessionResponse:
    meta = {
        "servers": [type(server).__name__ for server in req.mcp_servers],
        "extra": schema.extra_fields(req),
        "reencoded": json.loads(schema.encode(req)),
    }
    answer = schema.NewSessionResponse(session_id="s1", field_meta=meta)
    return schema.with_extra_fields(answer, {"models": MODELS})


if __name__ == "__main__":
    (acp.SyncAgent.builder()
        .agent_info(name="forward-compat", version="1.0")
        .new_session_handler(new_session)
        .prompt_handler(lambda req, ctx: "end_turn")
        .build()
        .serve_stdio())
