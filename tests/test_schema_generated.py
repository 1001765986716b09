"""The committed acp/schema matches the generator and covers every schema type."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
from schema_source import read_meta

import acp.schema
import acp.schema.unstable
from tests.helpers.schema_files import require_schema

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def schema_dir() -> Path:
    """../shared/acp-schema or the TypeScript SDK's copy; skips without one (fails under CI)."""
    return require_schema()


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_schema", REPO / "tools" / "generate_schema.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _defs(schema_dir: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((schema_dir / "v1" / name).read_text(encoding="utf-8"))
    return data["$defs"]  # type: ignore[no-any-return]


def test_committed_output_is_up_to_date(schema_dir: Path, tmp_path: Path) -> None:
    generator = _load_generator()
    list(generator.write(generator.generate(schema_dir), tmp_path))
    committed = REPO / "acp" / "schema"
    stale = [
        p.name
        for p in sorted(tmp_path.glob("*.py"))
        if p.read_text(encoding="utf-8") != (committed / p.name).read_text(encoding="utf-8")
    ]
    assert not stale, f"acp/schema is stale ({stale}): run `make schema`"


def test_generator_is_deterministic(schema_dir: Path) -> None:
    generator = _load_generator()
    assert generator.generate(schema_dir) == generator.generate(schema_dir)


def test_every_stable_def_is_in_acp_schema(schema_dir: Path) -> None:
    missing = [name for name in _defs(schema_dir, "schema.json") if not hasattr(acp.schema, name)]
    assert not missing
    assert set(_defs(schema_dir, "schema.json")) <= set(acp.schema.__all__)


def test_every_unstable_only_def_is_exported(schema_dir: Path) -> None:
    stable = _defs(schema_dir, "schema.json")
    only = [n for n in _defs(schema_dir, "schema.unstable.json") if n not in stable]
    assert len(only) > 50
    missing = [n for n in only if not (hasattr(acp.schema.unstable, n) or hasattr(acp.schema, n))]
    assert not missing
    # Unstable-only types are not part of the stable public namespace's __all__.
    assert not set(only) & set(acp.schema.__all__)


def test_wire_names_match_schema_properties(schema_dir: Path) -> None:
    """Every field's wire name is a property of the schema type, and `_meta` is `field_meta`."""
    defs = _defs(schema_dir, "schema.unstable.json")
    checked = 0
    for name, schema in defs.items():
        cls = getattr(acp.schema, name, None) or getattr(acp.schema.unstable, name, None)
        if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
            continue
        props = set(schema.get("properties", {}))
        for info in msgspec.structs.fields(cls):
            if props and info.encode_name in props:
                checked += 1
            if info.encode_name == "_meta":
                assert info.name == "field_meta"
        assert props <= {f.encode_name for f in msgspec.structs.fields(cls)} | {"type"}, name
    assert checked > 300


def test_open_enums_are_strings_with_constants() -> None:
    assert acp.schema.StopReason is str
    assert acp.schema.StopReasons.END_TURN == "end_turn"
    assert acp.schema.ToolKinds.SWITCH_MODE == "switch_mode"
    assert acp.schema.ErrorCodes.PARSE_ERROR == -32700
    assert acp.schema.PROTOCOL_VERSION == 1


def test_unstable_markers() -> None:
    assert ("PromptResponse", "usage") in acp.schema.UNSTABLE_FIELDS
    assert "Usage" in acp.schema.UNSTABLE_TYPES
    assert acp.schema.unstable.Usage.__doc__ and acp.schema.unstable.Usage.__doc__.startswith(
        "Unstable:"
    )
    assert "PromptResponse" not in acp.schema.UNSTABLE_TYPES
    # A field only the unstable schema has is optional, so stable messages never need it.
    assert (
        acp.schema.decoder(acp.schema.PromptResponse).decode(b'{"stopReason":"end_turn"}').usage
        is None
    )


def test_messages_are_not_tracked_by_the_cycle_collector() -> None:
    """gc=False on every generated type: decoded updates waiting in a reader's queue must not set
    off the collector (benchmarks/README.md, "Fourth pass")."""
    import gc

    structs = [
        value
        for module in (acp.schema, acp.schema.unstable)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, acp.schema._generated._Struct)
    ]
    assert len(structs) > 200
    assert [cls.__name__ for cls in structs if cls.__struct_config__.gc] == []
    wire = (
        b'{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk",'
        b'"content":{"type":"text","text":"hi"},"_meta":{"i":[1,2]}}}'
    )
    note = acp.schema.decoder(acp.schema.SessionNotification).decode(wire)
    assert not gc.is_tracked(note) and not gc.is_tracked(note.update)
    assert gc.is_tracked(note.update.field_meta)  # what it holds is still the collector's


def test_method_tables() -> None:
    agent, client = acp.schema.AGENT_METHODS, acp.schema.CLIENT_METHODS
    prompt = agent["session/prompt"]
    assert (prompt.params_type, prompt.result_type, prompt.unstable) == (
        acp.schema.PromptRequest,
        acp.schema.PromptResponse,
        False,
    )
    assert agent["session/cancel"].result_type is None
    assert client["session/update"].params_type is acp.schema.SessionNotification
    assert client["session/update"].is_notification
    for table in (agent, client):
        assert table["$/cancel_request"].params_type is acp.schema.CancelRequestNotification
    assert (
        agent["session/fork"].unstable
        and agent["session/fork"].params_type.__name__ == "ForkSessionRequest"
    )
    assert "session/fork" not in acp.schema.STABLE_AGENT_METHODS
    with pytest.raises(AttributeError):
        prompt.unstable = True  # type: ignore[misc]


def test_method_tables_cover_meta(schema_dir: Path) -> None:
    meta = read_meta(schema_dir / "v1", "schema.unstable.json")  # the file, or derived (npm copy)
    stable_meta = read_meta(schema_dir / "v1", "schema.json")
    protocol = set(meta["protocolMethods"].values())
    proxy = set(meta["proxyMethods"].values())
    assert set(acp.schema.AGENT_METHODS) == set(meta["agentMethods"].values()) | protocol | proxy
    assert set(acp.schema.CLIENT_METHODS) == set(meta["clientMethods"].values()) | protocol | {
        "proxy/successor"
    }
    flagged = {
        name
        for t in (acp.schema.AGENT_METHODS, acp.schema.CLIENT_METHODS)
        for name, s in t.items()
        if s.proxy
    }
    assert flagged == proxy
    stable = (
        set(stable_meta["agentMethods"].values())
        | set(stable_meta["clientMethods"].values())
        | protocol
    )
    for table in (acp.schema.AGENT_METHODS, acp.schema.CLIENT_METHODS):
        for name, spec in table.items():
            assert spec.name == name
            assert spec.unstable == (name not in stable)


def test_import_does_not_load_unstable_module() -> None:
    code = "import sys, acp.schema; assert 'acp.schema.unstable' not in sys.modules; acp.schema.PromptRequest"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
