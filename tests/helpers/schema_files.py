"""The official ACP JSON Schema for the schema tests, found by tools/schema_source.py.

A fresh clone has no ``../shared/acp-schema``; the schema then comes from the pinned TypeScript SDK
that ``make test`` installs (``make interop-setup``). Without either, the tests are skipped
locally, but under CI (env ``CI`` set) they fail: a CI machine must never skip the schema tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from schema_source import HOW_TO_GET, NPM_DIR, SHARED_DIR, SchemaSource, find_schema

from tests.helpers.interop_node import under_ci

__all__ = ["NPM_DIR", "SHARED_DIR", "SchemaSource", "find_schema", "require_schema"]


def require_schema() -> Path:
    """The schema folder (holding ``v1/``); skips (locally) or fails (CI) without one. Call it
    at module level (it then skips or fails the whole module) or from a fixture."""
    source = find_schema()
    if source is not None:
        return source.path
    reason = f"no ACP JSON Schema: neither {SHARED_DIR} nor {NPM_DIR} exists; {HOW_TO_GET}"
    if under_ci():
        pytest.fail(f"schema tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"schema tests skipped: {reason} (under CI this is a failure)", allow_module_level=True)
