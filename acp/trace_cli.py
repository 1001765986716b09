"""``acp trace``: read a recording and show it (terminal, ``--html``), check it against the
schema (``--validate``) or compare two (``--diff A B``).

This module only wires the command line to :mod:`acp.trace_text`, :mod:`acp.trace_html`,
:mod:`acp.trace_validate` and :mod:`acp.trace_diff`; each of them imports :mod:`acp.trace` and
nothing imports back.
"""

from __future__ import annotations

import argparse
import os
from typing import IO

__all__ = ["add_arguments", "run", "run_trace"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``acp trace`` (the command line's ``trace`` sub-parser)."""
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="the recording (acp tap JSONL, or JSON-RPC NDJSON); two with --diff")
    parser.add_argument("--html", metavar="OUT", help="also write a self-contained HTML page to OUT")
    parser.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto", help="colour errors (default: auto)"
    )
    parser.add_argument("--expand", action="store_true", help="one line per chunk (default: runs collapsed)")
    parser.add_argument(
        "--validate", action="store_true",
        help="check every message against the JSON Schema of the negotiated protocol version "
        "(exit status 1 when any violates it)",
    )
    parser.add_argument(
        "--schema", metavar="DIR",
        help="with --validate: the official ACP schema folder (holding v1/schema.json; default: $ACP_SCHEMA_DIR)",
    )
    parser.add_argument(
        "--diff", action="store_true",
        help="compare two recordings (acp trace --diff A B) by turn and message, ignoring ids and times",
    )


def run(args: argparse.Namespace, out: IO[str]) -> int:
    """Run ``acp trace`` with parsed ``args``; the exit status."""
    files: list[str] = args.files
    if args.diff:
        if len(files) != 2:
            out.write("acp trace --diff compares two recordings: acp trace --diff A B\n")
            return 2
        from .trace_diff import run_diff

        return run_diff(files[0], files[1], out)
    if len(files) != 1:
        out.write("acp trace reads one recording (two only with --diff)\n")
        return 2
    if args.validate:
        from .trace_validate import run_validate

        return run_validate(files[0], schema_dir=args.schema, out=out)
    return run_trace(files[0], html=args.html, color=args.color, out=out, expand=args.expand)


def run_trace(path: str, *, html: str | None, color: str, out: IO[str], expand: bool = False) -> int:
    """Print the recording at ``path`` (and write the HTML page to ``html``); the exit status
    (1 if the file cannot be read or the page cannot be written)."""
    from .trace import load_trace
    from .trace_text import write_trace

    try:
        trace = load_trace(path)
    except OSError as exc:
        out.write(f"acp trace: cannot read {path}: {exc.strerror or exc}\n")
        return 1
    use_color = color == "always" or (color == "auto" and _isatty(out) and "NO_COLOR" not in os.environ)
    write_trace(trace, out, color=use_color, expand=expand)
    if html is not None:
        from .trace_html import render_html

        try:
            with open(html, "w", encoding="utf-8") as file:
                file.write(render_html(trace))
        except OSError as exc:
            out.write(f"acp trace: cannot write {html}: {exc.strerror or exc}\n")
            return 1
        out.write(f"wrote {html}\n")
    out.flush()
    return 0


def _isatty(out: IO[str]) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
