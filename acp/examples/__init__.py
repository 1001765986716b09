"""Runnable example agents, small enough to read and complete enough to test against.

* :mod:`acp.examples.echo_agent` — the smallest correct agent: streams the prompt back.
* :mod:`acp.examples.async_echo_agent` — the same on asyncio (:class:`acp.AsyncAgent`).
* :mod:`acp.examples.scenario_agent` — a deterministic agent whose prompt picks a scenario
  (streaming, tool calls, permission, files, terminals, plans, elicitation, cancellation,
  errors), with in-memory sessions that can be loaded, listed, resumed, closed and deleted.
* :mod:`acp.examples.session_service` — an agent *service* (WebSocket or Streamable HTTP)
  whose sessions live in a directory shared by several backend processes, so they outlive
  connections; ``docs/deployment.md`` runs two of them behind nginx.

Run the first two over stdio::

    python -m acp.examples.echo_agent
    python -m acp.examples.async_echo_agent
    python -m acp.examples.scenario_agent

``python -m acp chat`` talks to the echo agent by default; ``python -m acp demo`` drives the
scenario agent through one full turn.
"""
