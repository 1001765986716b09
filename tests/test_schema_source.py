"""Where the schema comes from (tools/schema_source.py): ../shared/acp-schema or the TypeScript
SDK's npm copy, whose missing meta files are derived from the schema's x-method / x-side."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import generate_schema as generator
import pytest
import schema_source
from schema_source import derive_meta, find_schema, method_key, read_meta

from tests.helpers.schema_files import require_schema

TOOL = Path(schema_source.__file__)
has_shared = pytest.mark.skipif(
    not (schema_source.SHARED_DIR / "v1" / "meta.json").is_file(),
    reason=f"{schema_source.SHARED_DIR} (with meta*.json) is absent: nothing to compare the derivation with",
)


def _schema_only_copy(source: Path, dest: Path) -> Path:
    """``dest`` with v1/ holding only the two schema files, as the npm package ships them."""
    (dest / "v1").mkdir(parents=True)
    for name in ("schema.json", "schema.unstable.json"):
        shutil.copyfile(source / "v1" / name, dest / "v1" / name)
    return dest


def _fake_schema(dest: Path) -> Path:
    """A folder ``find_schema`` accepts (it only looks for the two files)."""
    (dest / "v1").mkdir(parents=True)
    for name in ("schema.json", "schema.unstable.json"):
        (dest / "v1" / name).write_text('{"$defs": {}}')
    return dest


def test_method_keys() -> None:
    assert method_key("session/set_mode") == "session_set_mode"
    assert method_key("$/cancel_request") == "cancel_request"
    assert method_key("auth/status_update") == "auth_status_update"
    assert method_key("someVendor/doThing") == "some_vendor_do_thing"


def test_derive_meta_groups_by_side_in_defs_order() -> None:
    defs = {
        "B": {"x-method": "b/go", "x-side": "client"},
        "Plain": {"type": "string"},
        "A": {"x-method": "a/go", "x-side": "agent"},
        "AResponse": {"x-method": "a/go", "x-side": "agent"},
        "Both": {"x-method": "mcp/message", "x-side": "agent"},
        "BothBack": {"x-method": "mcp/message", "x-side": "client"},
        "C": {"x-method": "$/cancel_request", "x-side": "protocol"},
    }
    assert derive_meta({"$defs": defs}, 3) == {
        "version": 3,
        "agentMethods": {"a_go": "a/go", "mcp_message": "mcp/message"},
        "clientMethods": {"b_go": "b/go", "mcp_message": "mcp/message"},
        "protocolMethods": {"cancel_request": "$/cancel_request"},
    }
    with pytest.raises(ValueError, match="X: x-method 'x/y' has x-side 'editor'"):
        derive_meta({"$defs": {"X": {"x-method": "x/y", "x-side": "editor"}}}, 1)


@has_shared
@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("schema_name", ["schema.json", "schema.unstable.json"])
def test_derived_meta_equals_the_vendored_meta(version: str, schema_name: str) -> None:
    folder = schema_source.SHARED_DIR / version
    vendored = json.loads((folder / schema_name.replace("schema", "meta")).read_text(encoding="utf-8"))
    derived = derive_meta(json.loads((folder / schema_name).read_text(encoding="utf-8")), int(version[1:]))
    # Same groups, keys and values in the same order (the order of the generated method tables).
    assert json.dumps(derived) == json.dumps(vendored)


@has_shared
def test_generated_output_is_identical_without_meta_files(tmp_path: Path) -> None:
    bare = _schema_only_copy(schema_source.SHARED_DIR, tmp_path / "bare")
    assert read_meta(bare / "v1", "schema.json") == read_meta(schema_source.SHARED_DIR / "v1", "schema.json")
    assert generator.generate(bare) == generator.generate(schema_source.SHARED_DIR)


@has_shared
@pytest.mark.skipif(not schema_source.NPM_DIR.is_dir(), reason="the TypeScript SDK is not installed (make interop-setup)")
def test_npm_copy_generates_what_shared_generates(tmp_path: Path) -> None:
    for name, source in (("shared", schema_source.SHARED_DIR), ("npm", schema_source.NPM_DIR)):
        list(generator.write(generator.generate(source), tmp_path / name))
    files = sorted(p.name for p in (tmp_path / "shared").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "npm").iterdir()) and len(files) == 3
    for name in files:
        assert (tmp_path / "npm" / name).read_bytes() == (tmp_path / "shared" / name).read_bytes(), name


def test_find_schema_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = _fake_schema(tmp_path / "shared")
    npm = _fake_schema(tmp_path / "npm")
    (shared / "v1" / "meta.json").write_text("{}")
    (shared / "v1" / "meta.unstable.json").write_text("{}")
    monkeypatch.setattr(schema_source, "SHARED_DIR", shared)
    monkeypatch.setattr(schema_source, "NPM_DIR", npm)
    monkeypatch.delenv("ACP_SCHEMA_DIR", raising=False)
    assert find_schema() == schema_source.SchemaSource(shared, has_meta=True)
    shutil.rmtree(shared)
    assert find_schema() == schema_source.SchemaSource(npm, has_meta=False)
    other = _fake_schema(tmp_path / "other")
    monkeypatch.setenv("ACP_SCHEMA_DIR", str(other))
    assert find_schema() == schema_source.SchemaSource(other, has_meta=False)
    assert find_schema(npm).path == npm  # an explicit folder beats the env var
    # A folder named on purpose that holds no schema is an error, not a fallback.
    monkeypatch.setenv("ACP_SCHEMA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="nowhere has no v1/schema.json"):
        find_schema()
    monkeypatch.delenv("ACP_SCHEMA_DIR")
    shutil.rmtree(npm)
    assert find_schema() is None


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_schema_skips_locally_and_fails_under_ci(
    ci: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema_source, "SHARED_DIR", tmp_path / "shared")
    monkeypatch.setattr(schema_source, "NPM_DIR", tmp_path / "npm")
    monkeypatch.delenv("ACP_SCHEMA_DIR", raising=False)
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="no ACP JSON Schema.*make interop-setup") as info:
        require_schema()
    assert ("cannot run under CI" in str(info.value)) == bool(ci)


def test_cli_prints_the_folder_or_says_how_to_get_one(tmp_path: Path) -> None:
    source = _fake_schema(tmp_path / "schema")
    env = {**os.environ, "ACP_SCHEMA_DIR": str(source)}
    found = subprocess.run([sys.executable, str(TOOL)], env=env, capture_output=True, text=True, timeout=30)
    assert (found.returncode, found.stdout) == (0, f"{source}\n")
    env["ACP_SCHEMA_DIR"] = str(tmp_path / "empty")
    bad = subprocess.run([sys.executable, str(TOOL)], env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and f"schema: error: {tmp_path / 'empty'} has no v1/schema.json" in bad.stderr
