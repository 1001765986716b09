#!/usr/bin/env python3
"""Generate ``acp/schema`` (msgspec Structs, unions, enums, method tables) from the ACP JSON Schemas.

Usage::

    python tools/generate_schema.py --schema-dir ../shared/acp-schema --out acp/schema

Inputs are ``<schema-dir>/v1/{schema,schema.unstable,meta,meta.unstable}.json``; without the meta
files (the TypeScript SDK's npm copy has none) they are derived from the schema by
``tools/schema_source.py``, which also finds the folder for ``make schema``. The stable and the
unstable schema are *merged*: the unstable one is a superset (more types, more optional fields,
more union variants), so one set of classes serves both; whatever only the unstable schema has is
marked (``Unstable:`` docstrings, ``UNSTABLE_TYPES`` / ``UNSTABLE_FIELDS``), and a field that only
the unstable schema requires stays optional.

Outputs (all overwritten, deterministic):

* ``_generated.py``  every type, the union aliases, leniency tables and the method tables;
* ``unstable.py``    re-exports of the types only the unstable schema has;
* ``__init__.py``    the public ``acp.schema`` namespace (stable names + runtime API).

How JSON Schema shapes map to Python (see DESIGN.md section 7):

* object                          -> ``msgspec.Struct`` (kw_only, omit_defaults, camelCase wire names)
* string/int alias                -> ``SessionId = str``
* ``oneOf``/``anyOf`` of consts   -> open enum: the alias is ``str`` (or ``int``) at runtime, a
                                     ``Literal[...] | str`` for type checkers, plus a constants class
                                     (``StopReason`` -> ``StopReasons.END_TURN``)
* alternatives tagged by a const  -> msgspec tagged union (fast native decode); an unknown tag is
                                     turned into ``Unknown<Union>`` by the lenient slow path
* alternatives msgspec cannot tag -> "resolved" union (some variant has no tag, or two arrays):
  (McpServer stdio, AuthMethod agent…)  ``Annotated[Any, ResolvedUnion(...)]`` at runtime, turned
                                     into typed values by ``__post_init__``
* object + untagged ``anyOf``     -> one Struct whose extra properties are optional (flattening)
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import sys
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schema_source import read_meta  # tools/schema_source.py: the script's folder is on sys.path

Schema = dict[str, Any]

GENERATOR = "tools/generate_schema.py"

# Names for union variants that get their own class (the variant's body is shared with another
# use, so the tag cannot live on the $def itself). Everything else follows the default rule in
# `variant_class_name`. Keyed by (union name, tag value).
VARIANT_NAMES: dict[tuple[str, str], str] = {
    ("SessionUpdate", "user_message_chunk"): "UserMessageChunk",
    ("SessionUpdate", "agent_message_chunk"): "AgentMessageChunk",
    ("SessionUpdate", "agent_thought_chunk"): "AgentThoughtChunk",
    ("SessionUpdate", "tool_call_update"): "ToolCallProgress",
    ("RequestPermissionOutcome", "cancelled"): "CancelledPermissionOutcome",
}

# Python names that annotations use; a field with one of these names would shadow it inside the
# class body (for mypy and for annotation evaluation), so such fields get a trailing underscore.
ANNOTATION_NAMES = {"list", "dict", "str", "int", "float", "bool", "Any", "None"}


# --------------------------------------------------------------------------------------------
# Loading and merging


@dataclass
class Inputs:
    stable: dict[str, Schema]
    unstable: dict[str, Schema]
    meta: Schema
    meta_unstable: Schema
    root_unstable: Schema  # the unstable schema's top level (holds the protocol-level messages)


def load_inputs(schema_dir: Path) -> Inputs:
    v1 = schema_dir / "v1"

    def read(name: str) -> Schema:
        data: Schema = json.loads((v1 / name).read_text(encoding="utf-8"))
        return data

    stable, unstable = read("schema.json"), read("schema.unstable.json")
    return Inputs(
        stable=stable["$defs"],
        unstable=unstable["$defs"],
        meta=read_meta(v1, "schema.json"),  # the meta file, or derived from the schema (npm copy)
        meta_unstable=read_meta(v1, "schema.unstable.json"),
        root_unstable=unstable,
    )


def merged_defs(inputs: Inputs) -> dict[str, Schema]:
    """One schema per type: the unstable version (a superset), with `required` narrowed to what
    every schema that has the type requires, so stable messages never need unstable fields."""
    names = list(inputs.stable) + [n for n in inputs.unstable if n not in inputs.stable]
    out: dict[str, Schema] = {}
    for name in names:
        schema = dict(inputs.unstable.get(name) or inputs.stable[name])
        if name in inputs.stable:
            stable = inputs.stable[name]
            if "description" in stable:
                schema["description"] = stable["description"]
            if "required" in schema:
                keep = set(stable.get("required", []))
                schema["required"] = [r for r in schema["required"] if r in keep]
        out[name] = schema
    return out


# --------------------------------------------------------------------------------------------
# Small helpers


def ref_name(schema: Schema) -> str | None:
    """The $def a schema is (a bare $ref or an allOf with one $ref), else None."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).rsplit("/", 1)[-1]
    return None


def snake(name: str) -> str:
    if name == "_meta":
        return "field_meta"
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"[^0-9a-zA-Z_]", "_", s).lower()
    if keyword.iskeyword(s):
        s += "_"
    return s


def camel(snake_name: str) -> str:
    """What msgspec's rename="camel" makes of an attribute name."""
    head, *rest = snake_name.rstrip("_").split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def pascal(value: str) -> str:
    parts = re.split(r"[^0-9a-zA-Z]+", value)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


def const_name(value: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", value)
    s = re.sub(r"[^0-9a-zA-Z]+", "_", s).strip("_").upper()
    return s if s and not s[0].isdigit() else f"V_{s}"


def plural(name: str) -> str:
    if name.endswith(("s", "x")):
        return name + "es"
    if name.endswith("y") and name[-2:-1] not in "aeiou":
        return name[:-1] + "ies"
    return name + "s"


def first_paragraph(text: str | None) -> str:
    if not text:
        return ""
    # Unstable types open with two boilerplate paragraphs; "Unstable:" replaces them.
    paras = [p for p in text.strip().split("\n\n") if p.strip()]
    while len(paras) > 1 and (
        paras[0].strip() == "**UNSTABLE**" or paras[0].startswith("This capability is not part")
    ):
        paras.pop(0)
    return " ".join(line.strip() for line in paras[0].splitlines())


def docstring(text: str, indent: str) -> list[str]:
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"').strip()
    if text.endswith('"'):
        text += " "
    lines = textwrap.wrap(text, 96 - len(indent), break_long_words=False, break_on_hyphens=False)
    if len(lines) <= 1:
        return [f'{indent}"""{text}"""']
    return [f'{indent}"""{lines[0]}', *(f"{indent}{ln}" for ln in lines[1:]), f'{indent}"""']


def py_literal(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


# --------------------------------------------------------------------------------------------
# Model


@dataclass
class FieldSpec:
    attr: str
    wire: str
    annotation: str
    default: str | None  # Python source of the default; None = required
    lenient: bool = False  # x-deserialize-default-on-error
    skip_invalid: bool = False  # x-deserialize-skip-invalid-items
    unstable: bool = False


@dataclass
class StructSpec:
    name: str
    doc: str
    fields: list[FieldSpec] = field(default_factory=list)
    base: str = "_Struct"
    tag_field: str | None = None
    tag: str | None = None
    unstable: bool = False
    resolves: bool = False  # has fields of resolved-union type (needs __post_init__)


@dataclass
class EnumSpec:
    name: str
    doc: str
    base: str  # "str" or "int"
    members: list[tuple[str, Any]]
    consts_class: str
    unstable: bool = False


@dataclass
class AliasSpec:
    name: str
    doc: str
    target: str
    unstable: bool = False


@dataclass
class UnionSpec:
    name: str
    doc: str
    tag_field: str | None
    tagged: list[tuple[str, str]]  # (tag, class name)
    untagged: list[str]  # type expressions of variants without a tag
    resolved: bool  # msgspec cannot decode it natively
    unknown: str | None
    unstable: bool = False
    # Titles of the untagged variants (McpServer "stdio", AuthMethod "agent"): a peer that spells
    # the default variant's tag out ({"type": "stdio", ...}) still gets that variant.
    implicit: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class MethodRow:
    wire: str
    params: str
    result: str | None
    unstable: bool
    proxy: bool = False


@dataclass
class Model:
    enums: list[EnumSpec] = field(default_factory=list)
    aliases: list[AliasSpec] = field(default_factory=list)
    structs: list[StructSpec] = field(default_factory=list)
    unions: list[UnionSpec] = field(default_factory=list)
    agent_methods: list[MethodRow] = field(default_factory=list)
    client_methods: list[MethodRow] = field(default_factory=list)
    stable_defs: list[str] = field(default_factory=list)
    unstable_defs: list[str] = field(default_factory=list)
    protocol_version: int = 1

    def taken(self) -> set[str]:
        names = {s.name for s in self.structs} | {a.name for a in self.aliases}
        names |= {e.name for e in self.enums} | {e.consts_class for e in self.enums}
        names |= {u.name for u in self.unions} | {u.unknown for u in self.unions if u.unknown}
        return names


# --------------------------------------------------------------------------------------------
# Classifying schemas


def is_const_alt(alt: Schema) -> bool:
    return "const" in alt and set(alt) <= {"const", "type", "title", "description", "format"}


def is_other_scalar_alt(alt: Schema) -> bool:
    """The open-enum catch-all: ``{"title": "other", "type": "string"}``."""
    return alt.get("type") in ("string", "integer") and "const" not in alt and "properties" not in alt


def alt_tag(alt: Schema) -> tuple[str, str] | None:
    """(field, value) when an object alternative is selected by a const property."""
    for prop, sub in alt.get("properties", {}).items():
        if isinstance(sub.get("const"), str) and prop in alt.get("required", []):
            return prop, sub["const"]
    return None


def is_catch_all(alt: Schema) -> bool:
    """The ``other`` alternative of an open tagged union (anything with an unknown tag)."""
    return "not" in alt


def alternatives(schema: Schema) -> list[Schema]:
    return list(schema.get("oneOf") or schema.get("anyOf") or [])


def is_open_enum(schema: Schema) -> bool:
    alts = alternatives(schema)
    return bool(alts) and "properties" not in schema and all(
        is_const_alt(a) or is_other_scalar_alt(a) for a in alts
    ) and any(is_const_alt(a) for a in alts)


def is_tagged_object_union(schema: Schema) -> bool:
    alts = alternatives(schema)
    return bool(alts) and all(alt_tag(a) or is_catch_all(a) for a in alts)


class Generator:
    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.defs = merged_defs(inputs)
        self.model = Model(protocol_version=int(inputs.meta["version"]))
        self.model.stable_defs = list(inputs.stable)
        self.model.unstable_defs = [n for n in inputs.unstable if n not in inputs.stable]
        self.ref_counts = self._count_refs()
        self.resolved_unions = {n for n, s in self.defs.items() if self._needs_resolution(n, s)}
        # A $def used once, as the body of one tagged-union variant, *is* that variant: it gets
        # the tag itself (TextContent, Diff, Plan…). Found before any class is emitted.
        self.tag_owner: dict[str, tuple[str, str, str]] = self._find_tag_owners()

    # ---- analysis --------------------------------------------------------------------------

    def _count_refs(self) -> dict[str, int]:
        counts: dict[str, int] = {}

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                if "$ref" in node:
                    name = str(node["$ref"]).rsplit("/", 1)[-1]
                    counts[name] = counts.get(name, 0) + 1
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        for schema in self.defs.values():
            if not schema.get("x-docs-ignore"):  # envelopes reference every message type
                walk(schema)
        return counts

    def _needs_resolution(self, name: str, schema: Schema) -> bool:
        """Unions msgspec cannot decode natively: a variant without a tag, or two array variants."""
        if "properties" in schema or is_open_enum(schema):
            return False
        alts = [a for a in alternatives(schema) if a.get("type") != "null"]
        if len(alts) < 2:
            return False
        untagged = [a for a in alts if not alt_tag(a) and not is_catch_all(a)]
        if any(ref_name(a) for a in untagged):
            return True
        return sum(1 for a in untagged if a.get("type") == "array") > 1

    def _is_plain_object(self, name: str) -> bool:
        schema = self.defs[name]
        return (
            schema.get("type") == "object" or "properties" in schema
        ) and not alternatives(schema)

    def _find_tag_owners(self) -> dict[str, tuple[str, str, str]]:
        owners: dict[str, tuple[str, str, str]] = {}
        for union, schema in self.defs.items():
            if "properties" in schema or not alternatives(schema):
                continue
            for alt in alternatives(schema):
                tag = alt_tag(alt)
                target = ref_name(alt)
                if not tag or not target or self.ref_counts.get(target) != 1:
                    continue
                if self._is_plain_object(target) and set(alt.get("properties", {})) == {tag[0]}:
                    owners[target] = (union, tag[0], tag[1])
        return owners

    def is_unstable(self, name: str) -> bool:
        return name not in self.inputs.stable

    def unstable_props(self, name: str) -> set[str]:
        if name not in self.inputs.stable:
            return set()
        stable_props = set(self.inputs.stable[name].get("properties", {}))
        return set(self.defs[name].get("properties", {})) - stable_props

    # ---- type expressions ------------------------------------------------------------------

    def type_expr(self, schema: Schema) -> str:
        target = ref_name(schema)
        if target:
            return target
        alts = alternatives(schema)
        if alts:
            non_null = [a for a in alts if a.get("type") != "null"]
            parts = [self.type_expr(a) for a in non_null]
            if any(a.get("anyOf") or a.get("oneOf") for a in non_null) or len(set(parts)) > 1:
                # An inline union of message types (envelope params): routing picks the type.
                return "Any"
            return parts[0] + (" | None" if len(non_null) < len(alts) else "")
        if "const" in schema or "enum" in schema:
            return "str"
        kind = schema.get("type")
        if isinstance(kind, list):
            non_null = [k for k in kind if k != "null"]
            inner = self.type_expr({**schema, "type": non_null[0]}) if non_null else "None"
            return inner + (" | None" if "null" in kind and inner != "Any" else "")
        if kind == "string":
            return "str"
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "boolean":
            return "bool"
        if kind == "null":
            return "None"
        if kind == "array":
            items = schema.get("items")
            return f"list[{self.type_expr(items) if items else 'Any'}]"
        if kind == "object":
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return f"dict[str, {self.type_expr(extra)}]"
            return "dict[str, Any]"
        return "Any"

    # ---- properties --------------------------------------------------------------------------

    def collect_props(self, schema: Schema) -> tuple[dict[str, Schema], list[str]]:
        """Properties of an object schema in wire order, with `allOf` bodies inlined and the
        properties of untagged `anyOf` alternatives merged in (optional unless every
        alternative requires them; a property several alternatives type differently gets the
        union of their types)."""
        props: dict[str, Schema] = dict(schema.get("properties", {}))
        required = list(schema.get("required", []))
        for part in schema.get("allOf", []):
            target = ref_name(part)
            sub = self.defs[target] if target else part
            sub_props, sub_req = self.collect_props(sub)
            props.update(sub_props)
            required += [r for r in sub_req if r not in required]
        alts = alternatives(schema)
        if alts and not is_tagged_object_union(schema):
            alt_props = [self.collect_props(self.defs[ref_name(a)] if ref_name(a) else a) for a in alts]
            for alt_p, _ in alt_props:
                for wire in alt_p:
                    if wire in props:
                        continue
                    variants = [p[wire] for p, _ in alt_props if wire in p]
                    exprs = list(dict.fromkeys(self.type_expr(v) for v in variants))
                    props[wire] = {**variants[0], "x-type": " | ".join(exprs)}
            for wire in props:
                if wire not in required and all(wire in r for _, r in alt_props):
                    required.append(wire)
        return props, required

    def field_spec(self, owner: str, wire: str, prop: Schema, required: bool) -> FieldSpec:
        annotation = prop.get("x-type") or self.type_expr(prop)
        if "const" in prop:  # a merged tag property (SetSessionConfigOptionRequest.type)
            annotation = "str"
        default: str | None = None
        if not required:
            default = self.default_source(prop, annotation)
            if default == "None" and annotation != "Any" and not annotation.endswith("| None"):
                annotation += " | None"
        return FieldSpec(
            attr=snake(wire),
            wire=wire,
            annotation=annotation,
            default=default,
            lenient=bool(prop.get("x-deserialize-default-on-error")),
            skip_invalid=bool(prop.get("x-deserialize-skip-invalid-items")),
            unstable=wire in self.unstable_props(owner),
        )

    def default_source(self, prop: Schema, annotation: str) -> str:
        if "default" not in prop:
            return "None"
        value = prop["default"]
        if value is None or isinstance(value, (bool, int, float, str)):
            return py_literal(value)
        if value == [] or (value == {} and annotation.startswith("dict[")):
            factory = "list" if value == [] else "dict"
            return f"msgspec.field(default_factory={factory})"
        target = ref_name(prop)
        if isinstance(value, dict) and target and target in self.defs:
            # Object defaults ({"fs": {...}, "terminal": false}) equal the Struct's own defaults.
            return f"msgspec.field(default_factory=lambda: {target}())"
        raise ValueError(f"unsupported default {value!r}")

    def fields_of(self, owner: str, props: dict[str, Schema], required: list[str]) -> list[FieldSpec]:
        fields = [self.field_spec(owner, w, p, w in required) for w, p in props.items()]
        # Required fields first is not needed (kw_only), but keep wire order for readability.
        used = {tok for f in fields for tok in re.findall(r"[A-Za-z_]\w*", f.annotation)}
        for f in fields:
            if f.attr in used or f.attr in ANNOTATION_NAMES:
                f.attr += "_"
        return fields

    # ---- emitting model entries --------------------------------------------------------------

    def build(self) -> Model:
        for name, schema in self.defs.items():
            self.add_def(name, schema)
        self.add_methods()
        taken: set[str] = set()
        for name in [s.name for s in self.model.structs] + [u.name for u in self.model.unions]:
            if name in taken:
                raise SystemExit(f"name clash: {name}")
            taken.add(name)
        return self.model

    def doc_of(self, name: str, schema: Schema) -> str:
        text = first_paragraph(schema.get("description")) or f"The `{name}` type."
        return f"Unstable: {text}" if self.is_unstable(name) else text

    def add_def(self, name: str, schema: Schema) -> None:
        doc = self.doc_of(name, schema)
        unstable = self.is_unstable(name)
        if is_open_enum(schema):
            self.add_enum(name, schema, doc, unstable)
        elif "properties" in schema or schema.get("type") == "object":
            if alternatives(schema) and is_tagged_object_union(schema):
                self.add_union(name, schema, doc, unstable, base=schema)
            else:
                self.add_struct(name, schema, doc, unstable)
        elif alternatives(schema) and all(
            alt_tag(a) or is_catch_all(a) or ref_name(a) for a in alternatives(schema)
        ) and any(alt_tag(a) or ref_name(a) for a in alternatives(schema)):
            if len(alternatives(schema)) == 1:  # AvailableCommandInput: one untagged variant
                self.model.aliases.append(AliasSpec(name, doc, self.type_expr(alternatives(schema)[0]), unstable))
            else:
                self.add_union(name, schema, doc, unstable, base=None)
        elif alternatives(schema) and name in self.resolved_unions:
            self.add_union(name, schema, doc, unstable, base=None)
        elif alternatives(schema) and all("properties" in a for a in alternatives(schema)):
            self.add_struct(name, schema, doc, unstable)  # envelope Result|Error: one merged Struct
        elif alternatives(schema):
            parts = [self.type_expr(a) for a in alternatives(schema) if a.get("type") != "null"]
            target = " | ".join(dict.fromkeys(parts))
            if any(a.get("type") == "null" for a in alternatives(schema)):
                target += " | None"
            self.model.aliases.append(AliasSpec(name, doc, target, unstable))
        else:
            self.model.aliases.append(AliasSpec(name, doc, self.type_expr(schema), unstable))

    def add_enum(self, name: str, schema: Schema, doc: str, unstable: bool) -> None:
        alts = alternatives(schema)
        consts = [a for a in alts if is_const_alt(a)]
        base = "int" if isinstance(consts[0]["const"], int) else "str"
        members = []
        for alt in consts:
            value = alt["const"]
            label = alt.get("title") if base == "int" else value
            members.append((const_name(str(label)), value))
        consts_class = plural(name)
        if consts_class in self.defs:
            consts_class = f"{name}Values"
        self.model.enums.append(EnumSpec(name, doc, base, members, consts_class, unstable))

    def add_struct(self, name: str, schema: Schema, doc: str, unstable: bool) -> None:
        props, required = self.collect_props(schema)
        if schema.get("x-docs-ignore"):
            # JSON-RPC envelopes: `params`/`result` depend on the method, so they stay untyped.
            props = {w: ({} if w in ("params", "result") else p) for w, p in props.items()}
        spec = StructSpec(name, doc, self.fields_of(name, props, required), unstable=unstable)
        if name in self.tag_owner:
            union, tag_field, tag = self.tag_owner[name]
            spec.tag_field, spec.tag = tag_field, tag
            spec.doc += f' Variant `{tag_field}="{tag}"` of `{union}`.'
        self.finish_struct(spec)

    def finish_struct(self, spec: StructSpec) -> None:
        spec.resolves = any(
            tok in self.resolved_unions
            for f in spec.fields
            for tok in re.findall(r"[A-Za-z_]\w*", f.annotation)
        )
        self.model.structs.append(spec)

    def variant_class_name(self, union: str, tag: str, has_base: bool) -> str:
        if (union, tag) in VARIANT_NAMES:
            return VARIANT_NAMES[(union, tag)]
        return f"{union}{pascal(tag)}"

    def add_union(self, name: str, schema: Schema, doc: str, unstable: bool, base: Schema | None) -> None:
        base_props, base_req = ({}, []) if base is None else self._base_props(base)
        tagged: list[tuple[str, str]] = []
        untagged: list[str] = []
        tag_field: str | None = None
        catch_all = False
        titles: list[tuple[str, str]] = []
        for alt in alternatives(schema):
            if is_catch_all(alt):
                catch_all = True
                continue
            tag = alt_tag(alt)
            if tag is None:
                untagged.append(self.type_expr(alt))
                if isinstance(alt.get("title"), str) and ref_name(alt):
                    titles.append((alt["title"], untagged[-1]))
                continue
            tag_field = tag[0]
            tagged.append((tag[1], self.add_variant(name, alt, tag, base_props, base_req, unstable)))
        resolved = name in self.resolved_unions
        unknown = f"Unknown{name}" if tag_field else None
        if unknown in self.defs:  # StateUpdate has a real variant named UnknownStateUpdate
            unknown += "Variant"
        if tagged and not resolved and not catch_all and len(tagged) < 2:
            raise SystemExit(f"{name}: a tagged union needs two variants")
        implicit = titles if tag_field and resolved else []
        self.model.unions.append(
            UnionSpec(name, doc, tag_field, tagged, untagged, resolved, unknown, unstable, implicit)
        )

    def _base_props(self, base: Schema) -> tuple[dict[str, Schema], list[str]]:
        own = {k: v for k, v in base.items() if k not in ("oneOf", "anyOf", "discriminator")}
        return self.collect_props(own)

    def add_variant(
        self,
        union: str,
        alt: Schema,
        tag: tuple[str, str],
        base_props: dict[str, Schema],
        base_req: list[str],
        union_unstable: bool,
    ) -> str:
        """The class for one tagged alternative: the $def itself when it owns the tag, a
        tagged subclass of the $def when the body is exactly one shared $def, else a Struct
        with the base properties plus the alternative's own."""
        target = ref_name(alt)
        if target and self.tag_owner.get(target) == (union, *tag):
            return target
        name = self.variant_class_name(union, tag[1], bool(base_props))
        unstable = union_unstable or bool(target and self.is_unstable(target))
        alt_doc = first_paragraph(alt.get("description")) or (
            first_paragraph(self.defs[target].get("description")) if target else ""
        )
        doc = f'{alt_doc} Variant `{tag[0]}="{tag[1]}"` of `{union}`.'.strip()
        if unstable:
            doc = f"Unstable: {doc}"
        only_tag = set(alt.get("properties", {})) == {tag[0]}
        if target and only_tag and not base_props and self._is_plain_object(target):
            # A tagged subclass: same fields, isinstance() of the shared $def still holds. The
            # fields are recorded (not rendered) for the leniency and unstable tables.
            spec = StructSpec(name, doc, base=target, tag_field=tag[0], tag=tag[1], unstable=unstable)
            spec.fields = self.fields_of(target, *self.collect_props(self.defs[target]))
            self.finish_struct(spec)
            return name
        body = {k: v for k, v in alt.items() if k not in ("description", "title")}
        body["properties"] = {k: v for k, v in alt.get("properties", {}).items() if k != tag[0]}
        body["required"] = [r for r in alt.get("required", []) if r != tag[0]]
        props, required = self.collect_props(body)
        all_props = {**base_props, **props}
        owner = target if target and target in self.defs else union
        spec = StructSpec(name, doc, tag_field=tag[0], tag=tag[1], unstable=unstable)
        spec.fields = self.fields_of(owner, all_props, base_req + required)
        self.finish_struct(spec)
        return name

    # ---- methods -------------------------------------------------------------------------------

    def add_methods(self) -> None:
        stable_names = set(self.inputs.meta["agentMethods"].values())
        stable_names |= set(self.inputs.meta["clientMethods"].values())
        stable_names |= set(self.inputs.meta["protocolMethods"].values())
        roles = self._envelope_roles()
        by_method: dict[str, dict[str, str]] = {}
        sides: dict[str, set[str]] = {}
        for name, schema in self.defs.items():
            method = schema.get("x-method")
            if not method:
                continue
            role = roles.get(name)
            if role is None:
                raise SystemExit(f"{name} has x-method but no envelope lists it")
            entry = by_method.setdefault(method, {})
            entry.setdefault(role, name)  # mcp/message: the request form wins over the notification
            sides.setdefault(method, set()).add(schema["x-side"])
        meta_u = self.inputs.meta_unstable
        # Proxy-chain methods (conductor <-> proxy) go into both tables, flagged `proxy`: a proxy
        # handles them on its agent side, and `proxy/successor` also arrives on the client side.
        proxy_names = list(meta_u.get("proxyMethods", {}).values())
        agent_names = list(meta_u["agentMethods"].values()) + list(meta_u["protocolMethods"].values())
        client_names = list(meta_u["clientMethods"].values()) + list(meta_u["protocolMethods"].values())
        for table, names, side in (
            (self.model.agent_methods, agent_names + proxy_names, "agent"),
            (self.model.client_methods, client_names + [m for m in proxy_names if m == "proxy/successor"], "client"),
        ):
            for method in names:
                entry = by_method[method]
                if not sides[method] & {side, "both", "protocol", "proxy"}:
                    raise SystemExit(f"{method}: x-side {sides[method]} does not match {side}")
                params = entry.get("request") or entry["notification"]
                result = entry.get("response") if "request" in entry else None
                table.append(
                    MethodRow(method, params, result, method not in stable_names, method in proxy_names)
                )

    def _envelope_roles(self) -> dict[str, str]:
        """Which x-method types are request params, results or notification params, read from
        the envelope definitions (AgentRequest, ClientResponse…) and the protocol-level root."""
        roles: dict[str, str] = {}

        def refs(node: Any) -> Iterator[str]:
            if isinstance(node, dict):
                target = ref_name(node) if ("$ref" in node or "allOf" in node) else None
                if target:
                    yield target
                for value in node.values():
                    yield from refs(value)
            elif isinstance(node, list):
                for value in node:
                    yield from refs(value)

        for env, role in (
            ("AgentRequest", "request"),
            ("ClientRequest", "request"),
            ("AgentResponse", "response"),
            ("ClientResponse", "response"),
            ("AgentNotification", "notification"),
            ("ClientNotification", "notification"),
            ("ProxyRequest", "request"),
            ("ProxyResponse", "response"),
            ("ProxyNotification", "notification"),
        ):
            if env not in self.defs:  # the proxy envelopes exist only in the unstable schema
                continue
            for target in refs(self.defs[env]):
                roles.setdefault(target, role)
        # Protocol-level notifications ($/cancel_request) are inlined at the schema root.
        for title_node in _walk_titles(self.inputs.root_unstable.get("anyOf", [])):
            if title_node in self.defs and self.defs[title_node].get("x-method"):
                roles.setdefault(title_node, "notification")
        return roles


def _walk_titles(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("title"), str):
            yield node["title"]
        for value in node.values():
            yield from _walk_titles(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk_titles(value)


# --------------------------------------------------------------------------------------------
# Rendering


HEADER = f'''# This file is GENERATED by {GENERATOR} from the ACP JSON Schemas
# (../shared/acp-schema/v1/schema.json and schema.unstable.json). Do not edit it by hand:
# change the generator and run `make schema`.'''


def tokens(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", text))


def dependencies(model: Model) -> dict[str, set[str]]:
    """Which generated names each generated name needs (annotations, bases, union members)."""
    deps: dict[str, set[str]] = {}
    for struct in model.structs:
        deps[struct.name] = {struct.base}.union(*(tokens(f.annotation) for f in struct.fields))
        deps[struct.name] |= {
            t for f in struct.fields if f.default for t in tokens(f.default)
        }
    for alias in model.aliases:
        deps[alias.name] = tokens(alias.target)
    for enum in model.enums:
        deps[enum.name] = {enum.consts_class}
        deps[enum.consts_class] = set()
    for union in model.unions:
        deps[union.name] = {cls for _, cls in union.tagged}.union(*(tokens(u) for u in union.untagged))
        if union.unknown:
            deps[union.name].add(union.unknown)
            deps[union.unknown] = set()
    return deps


def stable_closure(model: Model) -> set[str]:
    """Names reachable from the stable $defs: they must live in the eagerly imported module."""
    deps = dependencies(model)
    seen: set[str] = set()
    todo = list(model.stable_defs)
    while todo:
        name = todo.pop()
        if name in seen or name not in deps:
            continue
        seen.add(name)
        todo += deps[name]
    return seen


@dataclass
class ModuleView:
    """The part of the model one module defines."""

    model: Model
    names: set[str]

    def structs(self) -> list[StructSpec]:
        return [s for s in self.model.structs if s.name in self.names]

    def unions(self) -> list[UnionSpec]:
        return [u for u in self.model.unions if u.name in self.names]

    def enums(self) -> list[EnumSpec]:
        return [e for e in self.model.enums if e.name in self.names]

    def aliases(self) -> list[AliasSpec]:
        return [a for a in self.model.aliases if a.name in self.names]


def render_types(view: ModuleView) -> list[str]:
    model = view.model
    out: list[str] = ["# ---- scalar aliases and open enums (plain str/int at runtime) ----", ""]
    for alias in view.aliases():
        if _is_simple_alias(alias, model):
            out += [f"{alias.name}: TypeAlias = {alias.target}", *_comment_doc(alias.doc), ""]
    for enum in view.enums():
        out += render_enum(enum)
    out += ["", "# ---- message types ----", ""]
    # Tagged subclasses of a shared $def (UserMessageChunk(ContentChunk)) need their base first.
    for struct in sorted(view.structs(), key=lambda s: s.base != "_Struct"):
        out += render_struct(struct)
    out += ["# ---- values kept for union tags this SDK does not know ----", ""]
    for union in view.unions():
        if union.unknown:
            out += render_unknown(union)
    out += ["# ---- unions and aliases of message types ----", ""]
    out += render_unions(view)
    out += render_tables(view)
    return out


def render_generated(model: Model, names: set[str]) -> str:
    view = ModuleView(model, names)
    out: list[str] = [
        HEADER,
        '"""Typed ACP messages (generated). Import them from :mod:`acp.schema`."""',
        "",
        "from __future__ import annotations",
        "",
        "from types import MappingProxyType",
        "from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal, Union",
        "",
        "import msgspec",
        "from typing_extensions import TypeAlias",
        "",
        "from ._runtime import MethodSpec, ResolvedUnion, UnknownVariant, register_generated, resolve_fields",
        "",
        "",
        "# gc=False: instances are not tracked by the cycle collector. Messages are trees of plain",
        "# data; tracked, the updates a reader has decoded and queued set off the collector every",
        "# few hundred messages (measured: 0.25 us of a streamed chunk's 1.3 in the client).",
        "class _Struct(",
        '    msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", forbid_unknown_fields=True, gc=False',
        "):",
        '    """Base of every generated message type: keyword-only, camelCase on the wire.',
        "",
        "    A field this SDK does not know makes the native decode fail, so the lenient path keeps it",
        '    (see :func:`acp.schema.extra_fields`); a message without one never leaves the fast path.',
        "",
        "    Not tracked by the garbage collector (``gc=False``): a reference cycle through a message",
        '    (say, a message stored in its own ``field_meta``) would never be freed."""',
        "",
        "",
        *render_types(view),
        "",
        f"PROTOCOL_VERSION: Final = {model.protocol_version}",
        "",
        *render_unstable_sets(model),
        *render_all(public_names(view, extra=_GENERATED_EXTRA)),
    ]
    return "\n".join(out).rstrip() + "\n"


_GENERATED_EXTRA = ["PROTOCOL_VERSION", "UNSTABLE_TYPES", "UNSTABLE_FIELDS", "STABLE_AGENT_METHODS", "STABLE_CLIENT_METHODS"]
_UNSTABLE_EXTRA = ["UNSTABLE_AGENT_METHODS", "UNSTABLE_CLIENT_METHODS"]


def render_unstable(model: Model, names: set[str], eager: set[str]) -> str:
    view = ModuleView(model, names)
    needed = set().union(*(dependencies(model)[n] for n in names)) & eager
    needed |= {"_Struct"}
    exported = public_names(view, extra=_UNSTABLE_EXTRA)
    reexported = [n for n in public_names(ModuleView(model, eager)) if n in unstable_only_names(model)]
    out: list[str] = [
        HEADER,
        '"""Types only the unstable ACP schema has (opt-in: providers, NES, MCP-over-ACP, forks…).',
        "",
        "Importing this module is what loads them (``acp.schema`` does it lazily, on first use of",
        "``AGENT_METHODS`` / ``CLIENT_METHODS``). The unstable types that stable ones reference",
        "(``Usage`` in ``PromptResponse.usage``, ``PlanUpdate`` in ``SessionUpdate``…) are defined",
        "in ``acp.schema`` and re-exported here.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from types import MappingProxyType",
        "from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal, Union",
        "",
        "import msgspec",
        "from typing_extensions import TypeAlias",
        "",
        "from ._generated import (",
        *(f"    {n}," for n in isort_order(needed | set(reexported))),
        ")",
        "from ._runtime import MethodSpec, ResolvedUnion, UnknownVariant, resolve_fields",
        "",
        *render_types(view),
        *render_all(sorted(set(reexported)) + exported),
    ]
    return "\n".join(out).rstrip() + "\n"


def _is_simple_alias(alias: AliasSpec, model: Model) -> bool:
    """Aliases of builtins can come first; aliases of classes must follow the classes."""
    classes = {s.name for s in model.structs} | {u.name for u in model.unions}
    return not tokens(alias.target) & classes


def _comment_doc(doc: str) -> list[str]:
    return [f"# {line}" for line in textwrap.wrap(doc, 96)][:3]


def render_enum(enum: EnumSpec) -> list[str]:
    literals = ", ".join(py_literal(v) for _, v in enum.members)
    out = [
        "if TYPE_CHECKING:",
        f"    {enum.name}: TypeAlias = Union[Literal[{literals}], {enum.base}]",
        "else:",
        f"    {enum.name} = {enum.base}",
        *_comment_doc(f"{enum.doc} Open: unknown values are kept as plain {enum.base}s."),
        "",
        "",
        f"class {enum.consts_class}:",
        *docstring(f"Known values of `{enum.name}` (an open enum: other values may arrive).", "    "),
        "",
        "    __slots__ = ()",
    ]
    for const, value in enum.members:
        out.append(f"    {const}: Final = {py_literal(value)}")
    return out + ["", ""]


def render_struct(struct: StructSpec) -> list[str]:
    options = ", kw_only=True"  # not inherited: msgspec applies it to the class's own fields
    if struct.tag_field:
        options += f", tag_field={py_literal(struct.tag_field)}, tag={py_literal(struct.tag)}"
    out = [f"class {struct.name}({struct.base}{options}):", *docstring(struct.doc, "    ")]
    own_fields = struct.fields if struct.base == "_Struct" else []
    if own_fields:
        out.append("")
    for f in own_fields:
        default = f.default
        if f.wire != camel(f.attr) or f.attr.endswith("_"):
            inner = f"default={f.default}" if f.default and not f.default.startswith("msgspec.field(") else ""
            if f.default and f.default.startswith("msgspec.field("):
                inner = f.default[len("msgspec.field(") : -1]
            args = ", ".join(a for a in (inner, f"name={py_literal(f.wire)}") if a)
            default = f"msgspec.field({args})"
        line = f"    {f.attr}: {f.annotation}" + (f" = {default}" if default is not None else "")
        if f.unstable:
            line += "  # unstable"
        out.append(line)
    if struct.resolves and struct.base == "_Struct":
        out += ["", "    def __post_init__(self) -> None:", "        resolve_fields(self)"]
    return out + ["", ""]


def render_unknown(union: UnionSpec) -> list[str]:
    doc = (
        f"A `{union.name}` whose `{union.tag_field}` this SDK does not know: the raw JSON object "
        "(a dict), written back unchanged when encoded."
    )
    return [
        f"class {union.unknown}(UnknownVariant):",
        *docstring(doc, "    "),
        "",
        f"    TAG_FIELD: ClassVar[str] = {py_literal(union.tag_field)}",
        "",
        "",
    ]


def render_unions(view: ModuleView) -> list[str]:
    out: list[str] = []
    for alias in view.aliases():
        if not _is_simple_alias(alias, view.model):
            out += [f"{alias.name}: TypeAlias = {alias.target}", *_comment_doc(alias.doc), ""]
    for union in view.unions():
        variants = [cls for _, cls in union.tagged] + union.untagged
        checked = variants + ([union.unknown] if union.unknown else [])
        out += ["if TYPE_CHECKING:", f"    {union.name}: TypeAlias = Union[{', '.join(checked)}]", "else:"]
        if union.resolved:
            tagged = ", ".join(f"{py_literal(tag)}: {cls}" for tag, cls in union.tagged + union.implicit)
            untagged = "".join(f"{v}, " for v in union.untagged)
            out.append(
                f"    {union.name} = Annotated[Any, ResolvedUnion({py_literal(union.name)}, "
                f"{py_literal(union.tag_field) if union.tag_field else 'None'}, {{{tagged}}}, "
                f"({untagged}), {union.unknown or 'None'})]"
            )
        else:
            out.append(f"    {union.name} = Union[{', '.join(variants)}]")
        out += [*_comment_doc(union.doc), ""]
    return out


def render_tables(view: ModuleView) -> list[str]:
    """Per-module bookkeeping read by acp.schema._runtime, and this module's method rows."""
    out = ["", "# ---- bookkeeping used by acp.schema._runtime ----", ""]
    tagged = {u.name: u.unknown for u in view.unions() if u.unknown and not u.resolved}
    out.append("# Tagged unions decoded natively; an unknown tag falls back to the Unknown class.")
    out.append("_TAGGED_UNIONS: Final[dict[str, str]] = {")
    out += [f"    {py_literal(k)}: {py_literal(v)}," for k, v in tagged.items()]
    out += ["}", ""]
    for title, attr, name in (
        ("x-deserialize-default-on-error: a malformed value falls back to the default.", "lenient", "_LENIENT_FIELDS"),
        ("x-deserialize-skip-invalid-items: malformed array items are dropped.", "skip_invalid", "_SKIP_INVALID_ITEMS"),
    ):
        out.append(f"# {title}")
        out.append(f"{name}: Final[dict[str, tuple[str, ...]]] = {{")
        for struct in view.structs():
            attrs = [f.attr for f in struct.fields if getattr(f, attr)]
            if attrs:
                out.append(f"    {py_literal(struct.name)}: ({''.join(py_literal(a) + ', ' for a in attrs).rstrip()}),")
        out += ["}", ""]
    unstable_module = "_GENERATED" not in view.names
    prefix = "UNSTABLE" if unstable_module else "STABLE"
    for table, rows, doc in (
        ("AGENT_METHODS", view.model.agent_methods, "agent handles (the client calls them)"),
        ("CLIENT_METHODS", view.model.client_methods, "client handles (the agent calls them)"),
    ):
        kind = "unstable" if unstable_module else "stable"
        out.append(f"#: The {kind} methods an {doc}.")
        out.append(f"{prefix}_{table}: Final = MappingProxyType({{")
        for row in rows:
            if row.unstable != unstable_module:
                continue
            out.append(
                f"    {py_literal(row.wire)}: MethodSpec({py_literal(row.wire)}, {row.params}, "
                f"{row.result or 'None'}, {row.unstable}"
                + (", proxy=True" if row.proxy else "")
                + "),"
            )
        out += ["})", ""]
    if not unstable_module:
        out.append("# The runtime's lenient decode reads the tables above (handed over: it never imports this).")
        out.append("register_generated(globals())")
        out.append("")
    return out


def render_unstable_sets(model: Model) -> list[str]:
    out = []
    unstable_types = sorted(
        {s.name for s in model.structs if s.unstable}
        | {e.name for e in model.enums if e.unstable}
        | {a.name for a in model.aliases if a.unstable}
        | {u.name for u in model.unions if u.unstable}
    )
    out.append("#: Types (and union variants) that only the unstable schema has.")
    out.append("UNSTABLE_TYPES: Final[frozenset[str]] = frozenset({")
    out += [f"    {py_literal(n)}," for n in unstable_types]
    out += ["})", ""]
    out.append("#: (type, attribute) of optional fields that only the unstable schema adds to a type.")
    out.append("UNSTABLE_FIELDS: Final[frozenset[tuple[str, str]]] = frozenset({")
    for struct in model.structs:
        if struct.unstable:
            continue
        for f in struct.fields:
            if f.unstable:
                out.append(f"    ({py_literal(struct.name)}, {py_literal(f.attr)}),")
    out += ["})", ""]
    return out


def public_names(view: ModuleView, extra: Iterable[str] = ()) -> list[str]:
    """Every name a generated module exports, in definition order."""
    model = view.model
    names = [a.name for a in view.aliases() if _is_simple_alias(a, model)]
    for enum in view.enums():
        names += [enum.name, enum.consts_class]
    names += [s.name for s in view.structs()]
    names += [u.unknown for u in view.unions() if u.unknown]
    names += [a.name for a in view.aliases() if not _is_simple_alias(a, model)]
    names += [u.name for u in view.unions()]
    return names + list(extra)


def unstable_only_names(model: Model) -> set[str]:
    """Names that belong to acp.schema.unstable rather than acp.schema."""
    names = set(model.unstable_defs)
    names |= {s.name for s in model.structs if s.unstable}
    names |= {e.consts_class for e in model.enums if e.unstable}
    names |= {u.unknown for u in model.unions if u.unstable and u.unknown}
    return names


def render_all(names: list[str]) -> list[str]:
    return ["", "__all__ = [", *(f"    {py_literal(n)}," for n in names), "]"]


def isort_order(names: Iterable[str]) -> list[str]:
    """The order ruff's isort wants inside ``from x import (...)``: CONSTANTS, Classes, others."""

    def key(name: str) -> tuple[int, str, str]:
        kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
        return kind, name.lower(), name

    return sorted(names, key=key)


INIT_DOC = '''"""Typed ACP messages, generated from the official JSON Schemas.

Every ``$defs`` type of the stable schema has a class or alias of the same name here. Types
that only the unstable schema has live in :mod:`acp.schema.unstable` (imported on first use);
a few of them are also reachable from stable types (an optional field such as
``PromptResponse.usage``, an unstable ``SessionUpdate`` variant such as ``plan_update``) and
are listed in ``UNSTABLE_TYPES`` / ``UNSTABLE_FIELDS``.

Decode with ``decoder(tp).decode(data)`` (fast native path, then a lenient path that keeps
unknown union tags as ``Unknown…`` dicts and honours the schema's leniency hints); encode with
``encode(obj)`` or any plain ``msgspec.json.Encoder`` (no hook needed).

``AGENT_METHODS`` / ``CLIENT_METHODS`` (every method, unstable ones flagged) load the unstable
module on first access; ``STABLE_AGENT_METHODS`` / ``STABLE_CLIENT_METHODS`` do not.
"""'''


def render_init(model: Model, eager: set[str]) -> str:
    unstable = unstable_only_names(model)
    stable = [n for n in public_names(ModuleView(model, eager), _GENERATED_EXTRA) if n not in unstable]
    runtime = ["Decoder", "MethodSpec", "UnknownVariant", "decoder", "encode", "encoder", "extra_fields", "with_extra_fields"]
    lines = [
        HEADER,
        INIT_DOC,
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Mapping",
        "from typing import TYPE_CHECKING, Any",
        "",
        "from ._generated import (",
        *(f"    {n}," for n in isort_order(stable)),
        ")",
        "from ._runtime import (",
        *(f"    {n}," for n in isort_order(runtime)),
        ")",
        "",
        "if TYPE_CHECKING:",
        "    AGENT_METHODS: Mapping[str, MethodSpec]",
        "    CLIENT_METHODS: Mapping[str, MethodSpec]",
        "",
        "",
        "def __getattr__(name: str) -> Any:",
        '    # The full method tables need the unstable types: build them (once) on first use.',
        '    if name in ("AGENT_METHODS", "CLIENT_METHODS"):',
        "        from types import MappingProxyType",
        "",
        "        from . import unstable",
        "",
        '        stable = STABLE_AGENT_METHODS if name == "AGENT_METHODS" else STABLE_CLIENT_METHODS',
        '        extra = getattr(unstable, f"UNSTABLE_{name}")',
        "        table = MappingProxyType({**stable, **extra})",
        "        globals()[name] = table",
        "        return table",
        '    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")',
        "",
        "",
        "__all__ = [",
        *(f"    {py_literal(n)}," for n in sorted(stable + runtime + ["AGENT_METHODS", "CLIENT_METHODS"])),
        "]",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Entry point


def generate(schema_dir: Path) -> dict[str, str]:
    """Render every generated file; returns {file name: content}."""
    model = Generator(load_inputs(schema_dir)).build()
    eager = stable_closure(model) | {"_GENERATED"}
    lazy = set(dependencies(model)) - eager
    return {
        "_generated.py": render_generated(model, eager),
        "__init__.py": render_init(model, eager),
        "unstable.py": render_unstable(model, lazy, eager),
    }


def write(files: dict[str, str], out: Path) -> Iterable[Path]:
    out.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = out / name
        path.write_text(content, encoding="utf-8")
        yield path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--schema-dir", type=Path, required=True, help="folder holding v1/")
    parser.add_argument("--out", type=Path, required=True, help="output package folder")
    args = parser.parse_args(argv)
    for path in write(generate(args.schema_dir), args.out):
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
