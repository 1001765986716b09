#!/usr/bin/env python3
"""Where the official ACP JSON Schema comes from, for ``make schema`` and the schema tests.

A schema folder holds ``v1/schema.json`` and ``v1/schema.unstable.json`` (and maybe ``v2/``). The
first of these that has one wins:

1. an explicit folder (argument), else the env var ``ACP_SCHEMA_DIR``: an error when it has none;
2. ``../shared/acp-schema`` next to the repository (the vendored copy, with ``meta*.json``);
3. the pinned TypeScript SDK's own copy, ``tests/interop/node_modules/@agentclientprotocol/sdk/
   schema``, which ``make interop-setup`` (and so ``make test``) installs. It has no meta files.

The meta files only list the method names by the side that handles them; when a folder has none,
:func:`read_meta` derives them from the schema's ``x-method`` / ``x-side`` annotations, exactly as
the vendored ones were made (a test checks that they come out equal).

Run as a script, it prints the folder it found (``make schema`` uses that) or exits 1 saying why.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO.parent / "shared" / "acp-schema"
NPM_DIR = REPO / "tests" / "interop" / "node_modules" / "@agentclientprotocol" / "sdk" / "schema"
ENV_VAR = "ACP_SCHEMA_DIR"
HOW_TO_GET = f"run `make interop-setup` (installs the TypeScript SDK, which ships the schema) or set {ENV_VAR}"

# x-side -> the meta group listing the methods that side handles, in the meta files' order.
META_GROUPS = {"agent": "agentMethods", "client": "clientMethods", "protocol": "protocolMethods", "proxy": "proxyMethods"}


@dataclass(frozen=True)
class SchemaSource:
    path: Path  # the folder holding v1/
    has_meta: bool  # v1/meta.json and v1/meta.unstable.json exist (else read_meta derives them)


def _holds_schema(path: Path) -> bool:
    return (path / "v1" / "schema.json").is_file() and (path / "v1" / "schema.unstable.json").is_file()


def find_schema(explicit: str | Path | None = None) -> SchemaSource | None:
    """The schema folder to use (see the module docstring for the order), or None."""
    chosen = explicit or os.environ.get(ENV_VAR)
    if chosen:
        # A folder someone named on purpose must not silently give way to another one.
        if not _holds_schema(Path(chosen)):
            raise FileNotFoundError(f"{chosen} has no v1/schema.json and v1/schema.unstable.json")
        candidates = [Path(chosen)]
    else:
        candidates = [SHARED_DIR, NPM_DIR]
    for path in candidates:
        if _holds_schema(path):
            has_meta = all((path / "v1" / name).is_file() for name in ("meta.json", "meta.unstable.json"))
            return SchemaSource(path, has_meta)
    return None


def method_key(method: str) -> str:
    """The meta key of a method: ``session/set_mode`` -> ``session_set_mode``, ``$/cancel_request``
    -> ``cancel_request``."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", method).lower()
    return re.sub(r"[^a-z0-9]+", "_", snake).strip("_")


def derive_meta(schema: dict[str, Any], version: int) -> dict[str, Any]:
    """The meta file of a schema: method names grouped by ``x-side``, in ``$defs`` order."""
    groups: dict[str, dict[str, str]] = {group: {} for group in META_GROUPS.values()}
    for name, node in schema["$defs"].items():
        method = node.get("x-method")
        if not method:
            continue
        side = node.get("x-side")
        if side not in META_GROUPS:
            raise ValueError(f"{name}: x-method {method!r} has x-side {side!r}, not one of {sorted(META_GROUPS)}")
        groups[META_GROUPS[side]][method_key(method)] = method
    return {"version": version, **{group: methods for group, methods in groups.items() if methods}}


def read_meta(version_dir: Path, schema_name: str) -> dict[str, Any]:
    """``meta.json`` for ``schema.json`` (``meta.unstable.json`` for ``schema.unstable.json``) in
    ``version_dir`` (``…/v1``): the file when it exists, else derived from the schema."""
    meta_path = version_dir / schema_name.replace("schema", "meta", 1)
    if meta_path.is_file():
        data: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
        return data
    schema = json.loads((version_dir / schema_name).read_text(encoding="utf-8"))
    return derive_meta(schema, int(version_dir.name.lstrip("v")))


def main(argv: list[str]) -> int:
    try:
        source = find_schema(argv[0] if argv else None)
    except FileNotFoundError as exc:
        print(f"schema: error: {exc}", file=sys.stderr)
        return 1
    if source is None:
        print(f"schema: error: no ACP JSON Schema: neither {SHARED_DIR} nor {NPM_DIR} exists; {HOW_TO_GET}", file=sys.stderr)
        return 1
    print(source.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
