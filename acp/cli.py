"""``python -m acp`` / ``acp``: the command line.

Subcommands:

``acp demo``
    Spawn the bundled scenario agent and drive it through one full turn with
    :class:`~acp.client.SyncClient`: streamed text, a plan, a tool call with a diff, a permission
    request answered by :class:`~acp.client.PermissionPolicy`, a file written and read in a
    temporary folder (:class:`~acp.client.LocalFiles`), a command run in a terminal
    (:class:`~acp.client.LocalTerminals`) and a form elicitation. No network, no dependencies.

``acp chat [--record FILE] [--cwd DIR] [--auth-method ID] [--url URL | -- AGENT COMMAND...]``
    An interactive terminal client for any ACP agent (the bundled echo agent by default; see
    :mod:`acp.chat_cli`). Ctrl-C during a turn sends ``session/cancel`` (a second one quits);
    ``/quit`` or end of input exits; ``/help`` lists the other commands (``/auth``, ``/mode``,
    ``/config``, ``/model``, ``/sessions``, ``/load``, ``/resume``, ``/close``, ``/new``).

``acp exec [options] [--url URL | -- AGENT COMMAND...]``
    One non-interactive turn for scripts and CI (see :mod:`acp.exec_cli`).

``acp check [--cancel-prompt TEXT] [--auth-method ID] [--json FILE] [--timeout S] [--url URL | -- AGENT COMMAND...]``
    A conformance check of any agent (see :mod:`acp.conformance`); exits 0 when the agent
    conforms, 1 when it does not or could not be checked (agent not found, connection refused),
    2 on a usage error.

``acp tap [--out PATH] -- AGENT COMMAND...``
    A transparent recording proxy to launch in place of an agent (see :mod:`acp.tap`).

``acp trace FILE [--html OUT] [--validate] | acp trace --diff A B``
    What happened in a recording: messages, turns, latencies (see :mod:`acp.trace_cli`).

``acp replay RECORDING | acp replay --client RECORDING -- AGENT COMMAND...``
    A recording played back as an agent on stdio, or as a client (see :mod:`acp.replay_cli`).

``chat`` and ``check`` take the agent from the environment (:mod:`acp.client.settings`: ``ACP_AGENT_COMMAND`` or
``ACP_AGENT_URL``...) when neither ``--url`` nor a command is given. ``--url`` still takes
``ACP_AGENT_HEADERS`` / ``ACP_AGENT_TOKEN`` from the environment (a token is better kept off
the command line); an explicit command ignores the environment.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, Union

from . import __version__, schema
from .chat_cli import _as_settings, run_chat
from .turn_printer import TurnPrinter

if TYPE_CHECKING:
    from .client.settings import AgentSettings

__all__ = ["main", "TurnPrinter", "run_demo", "run_chat", "run_check"]

_log = logging.getLogger("acp.cli")

def _describe_client_caps(caps: schema.ClientCapabilities) -> str:
    offered = [name for name, on in (
        ("fs.readTextFile", caps.fs.read_text_file),
        ("fs.writeTextFile", caps.fs.write_text_file),
        ("terminal", caps.terminal),
        ("elicitation", caps.elicitation is not None),
        ("session.notices", caps.session is not None and caps.session.notices is not None),
        ("session.compaction", caps.session is not None and caps.session.compaction is not None),
    ) if on]
    return ", ".join(offered) or "nothing optional"


def _describe_agent(client: Any) -> str:
    caps = client.capabilities
    offered = [name for name, on in (
        ("session/load", caps.supports_load_session()),
        ("session/list", caps.supports_list_sessions()),
        ("session/resume", caps.supports_resume_session()),
        ("session/close", caps.supports_close_session()),
        ("session/delete", caps.supports_delete_session()),
    ) if on]
    return ", ".join(offered) or "the basics"


# ---------------------------------------------------------------------------------- demo


def run_demo(out: IO[str]) -> int:
    """``acp demo``: one full turn of the scenario agent, printed to ``out``; the exit status."""
    import acp

    printer = TurnPrinter(out)
    policy = acp.PermissionPolicy(allow={"read", "edit"}, reject={"delete"})

    def permission(request: schema.RequestPermissionRequest, ctx: Any) -> schema.RequestPermissionResponse:
        answer = policy(request, ctx)
        outcome = answer.outcome
        chosen = outcome.option_id if isinstance(outcome, schema.SelectedPermissionOutcome) else "cancelled"
        printer.line(
            f"[permission] {request.tool_call.title!r} ({request.tool_call.kind}): "
            f"the policy chose {chosen!r}"
        )
        return answer

    def elicitation(request: schema.CreateElicitationRequest, ctx: Any) -> schema.CreateElicitationResponse:
        message = getattr(request, "message", "?")
        printer.line(f"[elicitation] {message!r}: answering name='Ada', colour='blue'")
        return schema.CreateElicitationResponseAccept(content={"name": "Ada", "colour": "blue"})

    with tempfile.TemporaryDirectory(prefix="acp-demo-") as tmp:
        folder = os.path.realpath(tmp)
        files = acp.LocalFiles([folder])

        def read(request: schema.ReadTextFileRequest, ctx: Any) -> schema.ReadTextFileResponse:
            response = files.read_text_file(request, ctx)
            printer.line(f"[client] fs/read_text_file {_short(request.path, folder)}: {len(response.content)} chars")
            return response

        def write(request: schema.WriteTextFileRequest, ctx: Any) -> schema.WriteTextFileResponse:
            response = files.write_text_file(request, ctx)
            printer.line(f"[client] fs/write_text_file {_short(request.path, folder)}: {len(request.content)} chars")
            return response

        with acp.LocalTerminals(allowed_cwd_roots=[folder]) as terminals:
            builder = (
                acp.SyncClient.builder()
                .agent_process(sys.executable, "-m", "acp.examples.scenario_agent")
                .client_info("acp-demo", __version__)
                .session_update_handler(printer)
                .request_permission_handler(permission)
                .read_text_file_handler(read)
                .write_text_file_handler(write)
                .terminal_handlers(terminals)
                .create_elicitation_handler(elicitation)
            )
            with builder.build() as client:
                init = client.initialize()
                info = init.agent_info
                process = client.process
                out.write("acp demo: one full turn between SyncClient and the scenario agent\n")
                out.write(
                    f"  agent:   {info.name if info else '?'} {info.version if info else ''}"
                    f" (pid {process.pid if process else '?'}), protocol version {init.protocol_version}\n"
                )
                out.write(f"  agent offers:  {_describe_agent(client)}\n")
                out.write(f"  client offers: {_describe_client_caps(client.client_capabilities)}\n")
                session = client.new_session(cwd=folder)
                out.write(f"  session: {session.session_id} in {folder}\n\n")
                out.write("you> full\n")
                out.flush()
                response = client.prompt(session.session_id, "full")
                printer.end()
                out.write(
                    f"\nturn ended: {response.stop_reason} "
                    f"({printer.updates} updates, {printer.tool_calls} tool calls)\n"
                )
                out.flush()
    return 0 if response.stop_reason == schema.StopReasons.END_TURN else 1


def _short(path: str, folder: str) -> str:
    return os.path.relpath(path, folder) if path.startswith(folder + os.sep) else path


# ---------------------------------------------------------------------------------- check


def run_check(
    agent_argv: Union[Sequence[str], AgentSettings],
    *,
    cancel_prompt: str | None,
    prompt: str,
    timeout: float,
    out: IO[str],
    auth_method: str | None = None,
    json_file: str | None = None,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
) -> int:
    """``acp check``: print each check as it runs, the counts by tier, the agent's stderr tail
    when something failed or could not be checked, and the verdict; the exit status (0
    conforming, 1 not conforming, 3 not checked, 2 when the JSON report cannot be written). The
    agent is a command, or :class:`~acp.client.settings.AgentSettings`. ``json_file``: also
    write the machine-readable report there (:meth:`acp.conformance.Report.to_json`); ``"-"``:
    to ``out``, the text then going to stderr. ``only`` / ``skip``: check ids or patterns."""
    from ._text import safe
    from .conformance import run_checks

    settings = _as_settings(agent_argv)
    text = sys.stderr if json_file == "-" else out
    text.write(f"acp check: {safe(settings.describe())}\n")
    text.flush()
    report = run_checks(
        settings, cancel_prompt=cancel_prompt, prompt=prompt, timeout=timeout, auth_method=auth_method, out=text,
        only=only, skip=skip,
    )
    text.write(report.tier_summary() + "\n")
    if report.stderr.strip() and not report.conforming:
        text.write("the agent's stderr (last lines):\n")
        text.writelines(f"  {safe(line)}\n" for line in report.stderr.rstrip("\n").splitlines())
    text.write(report.verdict() + "\n")
    text.flush()
    if json_file == "-":
        report.dump_json(out)
        out.flush()
    elif json_file is not None:
        try:
            report.write_json(json_file)
        except OSError as exc:
            text.write(f"acp check: cannot write {json_file}: {exc}\n")
            return 2
    return report.exit_code


# ---------------------------------------------------------------------------------- agent


def _url_arg(text: str) -> str:
    """argparse ``type`` of ``--url``: the same check as ``ACP_AGENT_URL``."""
    from .client.settings import _check_url

    try:
        return _check_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _agent_settings(
    command: list[str], url: str | None, env: Mapping[str, str]
) -> AgentSettings | None:
    """The agent of ``acp chat`` / ``acp check``: the command after ``--``, else ``--url`` (with
    the environment's headers and token), else the environment's settings; None when the
    environment sets no ``ACP_AGENT_*`` key at all. Raises ``AgentSettingsError``."""
    from .client import settings as keys

    if command:
        return keys.AgentSettings(command=tuple(command))
    if url is not None:
        chosen = {k: v for k, v in env.items() if k in (keys.ACP_AGENT_HEADERS, keys.ACP_AGENT_TOKEN)}
        chosen[keys.ACP_AGENT_URL] = url
        return keys.AgentSettings.from_mapping(chosen)
    if not any(env.get(k, "").strip() for k in keys.SETTINGS_KEYS):
        return None
    return keys.AgentSettings.from_mapping(env)


# ---------------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp", description="The acp SDK's command line: a demo, a chat client, a conformance checker."
    )
    parser.add_argument("--version", action="version", version=f"acp {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("demo", help="drive the bundled scenario agent through one full turn")
    env_note = (
        "Without --url or a command, the agent comes from the environment: ACP_AGENT_COMMAND "
        "(and ACP_AGENT_CWD) or ACP_AGENT_URL (and ACP_AGENT_HEADERS, ACP_AGENT_TOKEN)."
    )
    chat = sub.add_parser(
        "chat",
        usage="acp chat [options] [--url URL | -- AGENT COMMAND...]",
        help="chat with an agent: acp chat [options] [--url URL | -- AGENT COMMAND...] (default: the echo agent)",
        description="An interactive client for any ACP agent. " + env_note
        + " Without any of them: the bundled echo agent.",
    )
    chat.add_argument("--record", metavar="FILE", help="append the wire transcript to FILE (JSONL)")
    chat.add_argument("--cwd", metavar="DIR", help="the session folder (default: the current folder)")
    chat.add_argument("--url", metavar="URL", type=_url_arg, help="a remote agent (ws://, wss://, http://, https://)")
    chat.add_argument(
        "--auth-method", metavar="ID", help="authenticate with the agent's method ID before the first session"
    )
    chat.add_argument(
        "--sign-in-timeout", metavar="S", type=float, default=300.0,
        help="how long to wait for an agent's sign-in (authenticate) to finish (default: %(default)g s; "
        "Ctrl-C gives up sooner)",
    )
    chat.add_argument(
        "--hide-stderr", action="store_true",
        help="do not show what the agent writes to stderr (shown by default, escaped, as [agent stderr] lines)",
    )
    check = sub.add_parser(
        "check",
        usage="acp check [options] [--url URL | -- AGENT COMMAND...]",
        help="check an agent's conformance: acp check [options] [--url URL | -- AGENT COMMAND...]",
        description="A conformance check of any ACP agent: the command after -- is spawned and spoken "
        "to over stdio. " + env_note,
        epilog="Each check cites the spec sentence it enforces and takes its tier from the spec's word "
        "(the tiers of the official ACP TCK): mandatory (MUST), capability:NAME (MUSTs that apply when the "
        "agent advertises NAME), advisory (SHOULD: reported as WARN, never decides), informational (MAY: "
        "reported as INFO). A check the agent's refusal for lack of credentials or network kept from "
        "running is NOT CHECKED. Exit status: 0 conforming, 1 not conforming, 2 usage error, 3 not "
        "checked (the agent could not be started or reached, or refused before a mandatory check could run).",
    )
    check.add_argument("--url", metavar="URL", type=_url_arg, help="a remote agent (ws://, wss://, http://, https://)")
    check.add_argument(
        "--cancel-prompt", metavar="TEXT",
        help="a prompt that keeps the agent busy, for prompt.cancel and close.cancels_turn (default: none, they are skipped)",
    )
    check.add_argument("--prompt", metavar="TEXT", default="hello", help="the text of ordinary prompts (default: %(default)s)")
    check.add_argument(
        "--auth-method", metavar="ID",
        help="sign in with the agent's method ID after initialize (authenticate; an env_var method's variables "
        "must be set in the environment; a terminal method is run by you first), to check behind the login",
    )
    check.add_argument(
        "--json", metavar="FILE", dest="json_file",
        help="also write a machine-readable report to FILE ('-': to stdout, the text going to stderr), "
        "with each failing check's spec sentence and wire transcript",
    )
    check.add_argument(
        "--only", metavar="ID", action="append", default=[],
        help="report only this check (an id or a pattern such as 'prompt.*'); repeatable",
    )
    check.add_argument(
        "--skip", metavar="ID", action="append", default=[],
        help="do not report this check (an id or a pattern); repeatable",
    )
    check.add_argument(
        "--timeout", metavar="S", type=float, default=10.0, help="seconds to wait per answer (default: %(default)s)"
    )
    tap = sub.add_parser(
        "tap",
        help="record an editor's session with an agent: acp tap [--out FILE] -- AGENT COMMAND...",
        description="A transparent recording proxy: launch it in place of the agent. It forwards stdin "
        "and stdout byte for byte, passes stderr and the exit status through, and records every line "
        "to a JSONL file for acp trace.",
    )
    tap.add_argument(
        "--out", metavar="PATH",
        help="the recording (a file, or a folder for one new file per run; "
        "default: a new file under ~/.cache/acp/taps/)",
    )
    from .trace_cli import add_arguments as add_trace_arguments

    add_trace_arguments(sub.add_parser(
        "trace",
        help="show what happened in a recording: acp trace FILE [--html OUT] [--validate] [--diff A B]",
        description="Read a recording (acp tap, acp chat --record, a wire tap's JSONL, plain JSON-RPC NDJSON) "
        "and show each message, each turn in wire order and the latencies; or check it against the schema "
        "(--validate), or compare two (--diff A B).",
    ))
    from .exec_cli import add_exec_arguments

    add_exec_arguments(sub.add_parser(
        "exec",
        usage="acp exec [options] [--url URL | -- AGENT COMMAND...]",
        help="one prompt turn, non-interactive: acp exec -p TEXT [options] [--url URL | -- AGENT COMMAND...]",
        description="Send one prompt (-p TEXT, --prompt-file FILE, or stdin) to an agent, print the turn "
        "and exit with a status that tells how it ended. For CI jobs and shell scripts. " + env_note,
        epilog="Exit status: 0 end_turn, 1 the agent failed (an error answer, it exited, unreachable), "
        "2 usage error, 3 refusal, 4 max_tokens, 5 max_turn_requests, 6 authentication required, "
        "7 another stop reason, 124 --timeout expired, 126/127 the agent command cannot be run / "
        "was not found, 130 Ctrl-C, 143 SIGTERM.",
    ), url_type=_url_arg)
    from .replay_cli import add_arguments as add_replay_arguments

    add_replay_arguments(sub.add_parser(
        "replay", help="play a recording back: as an agent on stdio, or with --client against an agent",
        description="Serve a recorded agent on stdio (acp replay RECORDING), or drive an agent with a "
        "recorded client (acp replay --client RECORDING -- AGENT...); exit status 1 when the peer diverged.",
    ))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if "--" in args_in:
        split = args_in.index("--")
        args_in, agent = args_in[:split], args_in[split + 1 :]
    else:
        agent = []
    parser = _parser()
    args = parser.parse_args(args_in)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(parser, args, agent, sys.stdout)
    except KeyboardInterrupt:
        # Ctrl-C outside a turn (starting, signing in, checking): stop, without a traceback.
        sys.stderr.write(f"\nacp {args.command or ''}: interrupted\n".replace("  ", " "))
        return 130
    except BrokenPipeError:
        # The reader of our output went away (`acp demo | head`): exit quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, agent: list[str], out: IO[str]) -> int:
    if args.command == "demo":
        if agent:
            parser.error("demo takes no agent command")
        return run_demo(out)
    settings: AgentSettings | None = None
    if args.command in ("chat", "check", "exec"):
        from .client.settings import AgentSettingsError

        if agent and args.url is not None:
            parser.error(f"{args.command}: give --url or an agent command after --, not both")
        try:
            settings = _agent_settings(agent, args.url, os.environ)
        except AgentSettingsError as exc:
            parser.error(f"{args.command}: {exc}")
    if args.command == "chat":
        cwd = os.path.realpath(args.cwd or os.getcwd())
        chosen = settings or [sys.executable, "-m", "acp.examples.echo_agent"]
        return run_chat(
            chosen, record=args.record, cwd=cwd, out=out, auth_method=args.auth_method,
            sign_in_timeout=args.sign_in_timeout, show_stderr=not args.hide_stderr,
        )
    if args.command == "check":
        if settings is None:
            parser.error(
                "check needs the agent's command after --, e.g. acp check -- my-agent --stdio "
                "(or --url URL, or ACP_AGENT_COMMAND / ACP_AGENT_URL in the environment)"
            )
        return run_check(
            settings, cancel_prompt=args.cancel_prompt, prompt=args.prompt, timeout=args.timeout, out=out,
            auth_method=args.auth_method, json_file=args.json_file, only=args.only, skip=args.skip,
        )
    if args.command == "exec":
        from .exec_cli import run_exec

        return run_exec(args, settings, out, progress=TurnPrinter(sys.stderr))
    if args.command == "tap":
        if not agent:
            parser.error("tap needs the agent's command after --, e.g. acp tap -- my-agent --stdio")
        from .tap import run_tap

        return run_tap(agent, out=args.out)
    if args.command == "trace":
        if agent:
            parser.error("trace takes no agent command")
        from .trace_cli import run as run_trace

        return run_trace(args, out)
    if args.command == "replay":
        from .replay_cli import run as run_replay

        return run_replay(args, agent, out)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
