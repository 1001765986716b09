"""Runtime support for the generated message types (hand-written, not generated).

Decoding has two paths:

* the **fast path** is a plain ``msgspec.json.Decoder(tp)``: tagged unions are native msgspec
  tagged unions of the known variants, so a well-formed message never touches Python code
  (except ``__post_init__`` of the few types holding a union msgspec cannot tag, see
  :class:`ResolvedUnion`);
* only when it raises :class:`msgspec.ValidationError`, the **lenient path** decodes the JSON
  to builtins and rebuilds the value field by field from the type hints: an unknown union tag
  becomes an ``Unknown…`` value (a dict of the raw fields), a field marked
  ``x-deserialize-default-on-error`` falls back to its default, an array marked
  ``x-deserialize-skip-invalid-items`` drops bad items. Any other problem raises
  :class:`msgspec.ValidationError` naming the path (``… - at `$.update.content```).

``Unknown…`` values are ``dict`` subclasses, so every msgspec encoder writes them back as the
raw object: no ``enc_hook`` is needed anywhere.

**Fields this SDK does not know** (a peer's extension, a newer schema) are kept, not dropped: the
generated Structs forbid unknown fields, so the native decode of such a message fails and the
lenient path rebuilds it as an instance of a subclass of the type that has one extra field per
unknown key (made once per type and key set with ``msgspec.defstruct``). It is still an instance
of the generated class, its extra fields are ordinary attributes (``response.models``), and any
msgspec encoder writes them back under their original names. :func:`extra_fields` lists them,
:func:`with_extra_fields` adds some to a value. A message without unknown fields never leaves the
fast path.
"""

from __future__ import annotations

import keyword
import logging
import re
import sys
import types
import typing
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Generic, TypeVar, Union, get_args, get_origin, overload

import msgspec

__all__ = [
    "Decoder",
    "extra_fields",
    "with_extra_fields",
    "MethodSpec",
    "ResolvedUnion",
    "UnknownVariant",
    "decoder",
    "encode",
    "encoder",
    "register_generated",
    "resolve_fields",
]

T = TypeVar("T")
_log = logging.getLogger("acp.schema")
_NoneType = type(None)
_UnionType = getattr(types, "UnionType", Union)


class UnknownVariant(dict[str, Any]):
    """Base of the ``Unknown<Union>`` values: the raw JSON object of a union variant whose tag
    this SDK does not know. It is a plain dict (so it encodes unchanged) with a ``tag`` helper."""

    TAG_FIELD: ClassVar[str] = ""

    @property
    def tag(self) -> Any:
        """The value of the discriminating field (``type``, ``sessionUpdate``…), if any."""
        return self.get(self.TAG_FIELD)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"


class ResolvedUnion:
    """Marker (in ``Annotated[Any, ...]``) for a union msgspec cannot decode natively: one of
    its variants has no tag (``McpServerStdio``, ``AuthMethodAgent``…) or it has two array
    variants. msgspec decodes such a field to builtins; ``__post_init__`` of the owning Struct
    then resolves it: a known tag selects its variant, otherwise the untagged variants are
    tried in order, and a leftover object with an unknown tag becomes the Unknown value."""

    __slots__ = ("name", "tag_field", "tagged", "untagged", "unknown")

    def __init__(
        self,
        name: str,
        tag_field: str | None,
        tagged: dict[str, Any],
        untagged: tuple[Any, ...],
        unknown: type[UnknownVariant] | None,
    ) -> None:
        self.name = name
        self.tag_field = tag_field
        self.tagged = tagged
        self.untagged = untagged
        self.unknown = unknown

    def __repr__(self) -> str:
        return f"ResolvedUnion({self.name!r})"


class MethodSpec(msgspec.Struct, frozen=True):
    """One row of ``AGENT_METHODS`` / ``CLIENT_METHODS``."""

    name: str
    """Wire method name (``session/prompt``)."""
    params_type: Any
    """Type of ``params`` (a Struct class, or a union alias)."""
    result_type: Any
    """Type of ``result``; None for a notification."""
    unstable: bool
    """True for methods only the unstable schema has (opt-in)."""
    proxy: bool = False
    """True for the proxy-chain methods (``proxy/initialize``, ``proxy/successor``): typed here,
    but no facade handles them (a conductor/proxy is not something this SDK builds yet)."""

    @property
    def is_notification(self) -> bool:
        return self.result_type is None


# ---------------------------------------------------------------------------------------------
# Encoding

encoder = msgspec.json.Encoder()
"""A shared encoder for every generated type (Unknown values are dicts: no hook needed)."""


def encode(obj: Any) -> bytes:
    """Encode a message (or any msgspec-encodable value) to compact JSON bytes."""
    return encoder.encode(obj)


# ---------------------------------------------------------------------------------------------
# Decoding


class Decoder(Generic[T]):
    """Decodes JSON into ``T``: native msgspec first, the lenient rebuild only on failure."""

    __slots__ = ("type", "native", "_fast", "_resolve")

    def __init__(self, tp: Any) -> None:
        self.type = tp
        self._fast: msgspec.json.Decoder[T] = msgspec.json.Decoder(tp)
        # A resolved union used directly (decoder(McpServer)) has no Struct whose
        # __post_init__ would resolve it: msgspec hands back builtins, resolve them here.
        self._resolve = not isinstance(tp, type) and _mentions_resolved(tp)
        #: msgspec's own decode, for callers on a hot path, when its value needs no rebuild
        #: (None otherwise): on ``ValidationError`` fall back to :meth:`decode` (the lenient one).
        self.native: Callable[[Any], T] | None = None if self._resolve else self._fast.decode

    def decode(self, data: bytes | bytearray | memoryview | msgspec.Raw | str) -> T:
        try:
            value: T = self._fast.decode(data)
            if not self._resolve:
                return value
            raw = value
        except msgspec.ValidationError:
            raw = msgspec.json.decode(data)
        built: T = _build(self.type, raw, "$")
        return built


_DECODERS: dict[Any, Decoder[Any]] = {}


@overload
def decoder(tp: type[T]) -> Decoder[T]: ...
@overload
def decoder(tp: Any) -> Decoder[Any]: ...
def decoder(tp: Any) -> Decoder[Any]:
    """The (cached) :class:`Decoder` for a message type or union alias, built on first use."""
    found = _DECODERS.get(tp)
    if found is None:
        found = _DECODERS.setdefault(tp, Decoder(tp))
    return found


def resolve_fields(obj: msgspec.Struct) -> None:
    """``__post_init__`` of Structs holding a :class:`ResolvedUnion` field: turn the builtins
    msgspec decoded into typed values (a no-op for values that already are)."""
    cls = type(obj)
    # A generated class is found at once; only a class made for unknown keys (``_extended``)
    # needs the weak lookup of what it extends (~150 ns, once per message of such a type).
    fields = _RESOLVED_FIELDS.get(cls)
    if fields is None:
        fields = _resolved_fields(_EXTRA_OF[cls][0] if cls in _EXTRA_OF else cls)
    for attr, hint, is_list in fields:
        value = getattr(obj, attr)
        # An empty list of a list field has nothing to rebuild (session/new's usual
        # mcpServers: []): skipped, ~9 calls less per session/new on each side.
        if value is not None and not (is_list and value == []):
            try:
                built = _build(hint, value, "$")
            except msgspec.ValidationError as exc:
                # msgspec turns ValueError from __post_init__ into a ValidationError with a path.
                raise ValueError(str(exc)) from None
            setattr(obj, attr, built)


# ---------------------------------------------------------------------------------------------
# The lenient rebuild


class _FieldPlan:
    __slots__ = ("attr", "wire", "hint", "required", "lenient", "skip_invalid", "is_list")

    def __init__(self, attr: str, wire: str, hint: Any, required: bool) -> None:
        self.attr = attr
        self.wire = wire
        self.hint = hint
        self.required = required
        self.lenient = False
        self.skip_invalid = False
        self.is_list = _list_item(hint) is not None


_PLANS: dict[type, list[_FieldPlan]] = {}
_RESOLVED_FIELDS: dict[type, list[tuple[str, Any, bool]]] = {}  # (attr, hint, hint is a list)
_UNKNOWN_BY_VARIANTS: dict[frozenset[Any], type[UnknownVariant]] = {}


# The generated module's namespace (its types and bookkeeping tables), handed over when it is
# imported: configuration flows from the generated code to this runtime, never back.
_GENERATED: dict[str, Any] = {}


def register_generated(namespace: dict[str, Any]) -> None:
    """Called by ``acp.schema._generated`` at the end of its import: its tables and types."""
    _GENERATED.update(namespace)


def _hints(cls: type) -> dict[str, Any]:
    module = sys.modules[cls.__module__]
    return typing.get_type_hints(cls, globalns=vars(module), include_extras=True)


def _plan(cls: type) -> list[_FieldPlan]:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = _hints(cls)
        lenient: set[str] = set()
        skip: set[str] = set()
        for klass in cls.__mro__:
            lenient.update(_GENERATED["_LENIENT_FIELDS"].get(klass.__name__, ()))
            skip.update(_GENERATED["_SKIP_INVALID_ITEMS"].get(klass.__name__, ()))
        plan = []
        for info in msgspec.structs.fields(cls):
            entry = _FieldPlan(info.name, info.encode_name, hints[info.name], info.required)
            entry.lenient = info.name in lenient
            entry.skip_invalid = info.name in skip
            plan.append(entry)
        _PLANS[cls] = plan
    return plan


def _resolved_fields(cls: type) -> list[tuple[str, Any, bool]]:
    found = _RESOLVED_FIELDS.get(cls)
    if found is None:
        found = [(name, hint, _list_item(hint) is not None) for name, hint in _hints(cls).items()
                 if _mentions_resolved(hint)]
        _RESOLVED_FIELDS[cls] = found
    return found


def _mentions_resolved(hint: Any) -> bool:
    if get_origin(hint) is Annotated:
        return any(isinstance(m, ResolvedUnion) for m in hint.__metadata__)
    return any(_mentions_resolved(arg) for arg in get_args(hint))


def _unknown_for(variants: frozenset[Any]) -> type[UnknownVariant] | None:
    if not _UNKNOWN_BY_VARIANTS:
        for union, unknown in _GENERATED["_TAGGED_UNIONS"].items():
            members = frozenset(get_args(_GENERATED[union]))
            _UNKNOWN_BY_VARIANTS[members] = _GENERATED[unknown]
    return _UNKNOWN_BY_VARIANTS.get(variants)


def _error(message: str, path: str) -> msgspec.ValidationError:
    return msgspec.ValidationError(message if path == "$" else f"{message} - at `{path}`")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "array"
    return "object"


def _list_item(hint: Any) -> Any | None:
    """The item type when ``hint`` is ``list[X]`` or ``list[X] | None``."""
    if get_origin(hint) is list:
        return get_args(hint)[0]
    if get_origin(hint) in (Union, _UnionType):
        lists = [a for a in get_args(hint) if get_origin(a) is list]
        if len(lists) == 1:
            return get_args(lists[0])[0]
    return None


def _build(hint: Any, value: Any, path: str) -> Any:
    """Rebuild ``value`` (decoded JSON) as ``hint``, leniently, raising ValidationError."""
    if hint is Any:
        return value
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return _build_struct(hint, value, path)
    origin = get_origin(hint)
    if origin is Annotated:
        marker = next((m for m in hint.__metadata__ if isinstance(m, ResolvedUnion)), None)
        if marker is not None:
            return _build_resolved(marker, value, path)
        return _build(get_args(hint)[0], value, path)
    if origin in (Union, _UnionType):
        return _build_union(hint, value, path)
    if origin is list:
        if not isinstance(value, list):
            raise _error(f"Expected `array`, got `{_json_type(value)}`", path)
        item = get_args(hint)[0]
        return [_build(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _error(f"Expected `object`, got `{_json_type(value)}`", path)
        item = get_args(hint)[1]
        return {k: _build(item, v, f"{path}[...]") for k, v in value.items()}
    return _convert(value, hint, path)


def _convert(value: Any, hint: Any, path: str) -> Any:
    try:
        return msgspec.convert(value, hint)
    except msgspec.ValidationError as exc:
        message = str(exc)
        head, sep, where = message.partition(" - at `$")
        if sep:
            raise _error(head, path + where.rstrip("`")) from None
        raise _error(message, path) from None


def _build_struct(cls: type[msgspec.Struct], value: Any, path: str) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise _error(f"Expected `object`, got `{_json_type(value)}`", path)
    kwargs: dict[str, Any] = {}
    plan = _plan(cls)
    known = _wires(cls)
    tag_field = cls.__struct_config__.tag_field
    unknown = [k for k in value if k not in known and k != tag_field]
    if unknown:
        keep = tuple(k for k in unknown if _NAME_OK(k))
        if len(keep) < len(unknown):
            _log.debug("dropped unknown fields msgspec cannot name at %s: %r", path, set(unknown) - set(keep))
        if keep:
            extended, attrs = _extended(cls, keep)
            kwargs.update((attr, value[wire]) for attr, wire in attrs)
            cls = extended
    for field in plan:
        if field.wire not in value:
            if field.required:
                raise _error(f"Object missing required field `{field.wire}`", path)
            continue
        raw = value[field.wire]
        where = f"{path}.{field.wire}"
        try:
            if field.skip_invalid and isinstance(raw, list):
                kwargs[field.attr] = _build_items_skipping(field.hint, raw, where)
            else:
                kwargs[field.attr] = _build(field.hint, raw, where)
        except msgspec.ValidationError:
            if not field.lenient:
                raise
            if field.required:
                if not field.is_list:
                    raise
                kwargs[field.attr] = []
            # else: leave it out, the field takes its default
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # __post_init__ of a resolved union
        raise _error(str(exc), path) from None


# ---------------------------------------------------------------------------------------------
# Unknown fields: kept on a subclass with one extra field per unknown key

_WIRES: dict[type, frozenset[str]] = {}
# (class, unknown keys) -> (extended class, ((attribute, wire name), ...)): the classes made most
# recently, bounded so that a peer inventing new keys in every message cannot grow it for ever
# (an evicted class lives on as long as values of it do, and is made anew when needed).
_EXTENDED: OrderedDict[tuple[type, tuple[str, ...]], tuple[type[Any], tuple[tuple[str, str], ...]]] = OrderedDict()
_MAX_EXTENDED = 512
# extended class -> (the generated class it extends, ((attribute, wire name), ...)); weak, so an
# extended class goes away with its last value.
_EXTRA_OF: weakref.WeakKeyDictionary[type, tuple[type, tuple[tuple[str, str], ...]]] = weakref.WeakKeyDictionary()
# msgspec writes field names verbatim: a key with a quote, a backslash or a control character
# cannot be one (such a key is dropped, logged at DEBUG).
_NAME_OK = re.compile(r'[^"\\\x00-\x1f]*').fullmatch


def _wires(cls: type[msgspec.Struct]) -> frozenset[str]:
    found = _WIRES.get(cls)
    if found is None:
        found = _WIRES[cls] = frozenset(cls.__struct_encode_fields__)
    return found


def _attr_for(wire: str, taken: set[str]) -> str:
    """A snake_case attribute for an unknown wire key (``fooBar`` -> ``foo_bar``), never
    shadowing a field or another extra: ``models``, ``vars``, ``extra_``…"""
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", wire)
    name = re.sub(r"[^0-9a-zA-Z_]", "_", name).strip("_").lower() or "field"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = f"x_{name}"
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _extended(cls: type[Any], wires: tuple[str, ...]) -> tuple[type[Any], tuple[tuple[str, str], ...]]:
    """The subclass of ``cls`` (a generated Struct, or one already extended) with one more field
    per wire key in ``wires``, and its ((attribute, wire), ...) for those keys."""
    key = (cls, wires)
    found = _EXTENDED.get(key)
    if found is not None:
        _EXTENDED.move_to_end(key)
    else:
        base, before = _EXTRA_OF.get(cls, (cls, ()))
        taken = set(cls.__struct_fields__)
        attrs = tuple((_attr_for(wire, taken), wire) for wire in wires)
        extended = msgspec.defstruct(
            cls.__name__,
            [(attr, Any, msgspec.field(name=wire)) for attr, wire in attrs],
            bases=(cls,),
            kw_only=True,
            module=cls.__module__,
        )
        extended.__doc__ = cls.__doc__
        _EXTRA_OF[extended] = (base, before + attrs)
        found = _EXTENDED[key] = (extended, attrs)
        if len(_EXTENDED) > _MAX_EXTENDED:
            _EXTENDED.popitem(last=False)
    return found


def extra_fields(value: msgspec.Struct) -> dict[str, Any]:
    """The fields of a decoded message that its type does not declare, by wire name
    (``{"models": {...}}``); empty for a value that had none. They are also attributes of the
    value (snake_case: ``fooBar`` -> ``value.foo_bar``) and are written back when it is encoded."""
    _, attrs = _EXTRA_OF.get(type(value), (None, ()))
    return {wire: getattr(value, attr) for attr, wire in attrs}


def with_extra_fields(value: T, extra: Mapping[str, Any]) -> T:
    """A copy of ``value`` that also carries ``extra`` (wire name -> JSON value) when encoded:
    for a proxy or a recorder that adds what its own types do not know. Keys the type already
    declares raise ValueError (set those through their attributes)."""
    if not isinstance(value, msgspec.Struct):
        raise TypeError(f"with_extra_fields: expected a message Struct, got {type(value).__name__}")
    cls = type(value)
    known = cls.__struct_encode_fields__
    clash = [k for k in extra if k in known or k == cls.__struct_config__.tag_field]
    if clash:
        raise ValueError(f"with_extra_fields: {cls.__name__} already declares {clash}")
    bad = [k for k in extra if not isinstance(k, str) or not _NAME_OK(k)]
    if bad:
        raise ValueError(f"with_extra_fields: {bad} cannot be field names (quote, backslash or control character)")
    fields = {name: getattr(value, name) for name in cls.__struct_fields__}
    if not extra:
        return value
    extended, attrs = _extended(cls, tuple(extra))
    fields.update((attr, extra[wire]) for attr, wire in attrs)
    built: T = extended(**fields)
    return built


def _build_items_skipping(hint: Any, items: list[Any], path: str) -> list[Any]:
    item_hint = _list_item(hint)
    out = []
    for i, item in enumerate(items):
        try:
            out.append(_build(item_hint, item, f"{path}[{i}]"))
        except msgspec.ValidationError:
            continue
    return out


def _build_union(hint: Any, value: Any, path: str) -> Any:
    args = get_args(hint)
    if value is None and _NoneType in args:
        return None
    members = tuple(a for a in args if a is not _NoneType)
    if len(members) == 1:
        return _build(members[0], value, path)
    unknown = _unknown_for(frozenset(members))
    if unknown is None:
        structs = [m for m in members if isinstance(m, type) and issubclass(m, msgspec.Struct)]
        if structs and isinstance(value, dict):
            first: msgspec.ValidationError | None = None
            for member in structs:
                try:
                    return _build_struct(member, value, path)
                except msgspec.ValidationError as exc:
                    first = first or exc
            assert first is not None
            raise first
        return _convert(value, hint, path)
    if isinstance(value, (unknown, *members)):
        return value
    if not isinstance(value, dict):
        raise _error(f"Expected `object`, got `{_json_type(value)}`", path)
    tag_field = unknown.TAG_FIELD
    if tag_field not in value:
        raise _error(f"Object missing required field `{tag_field}`", path)
    tag = value[tag_field]
    for member in members:
        if member.__struct_config__.tag == tag:
            return _build_struct(member, value, path)
    if not isinstance(tag, str):
        raise _error(f"Expected `str`, got `{_json_type(tag)}`", f"{path}.{tag_field}")
    return unknown(value)


def _build_resolved(union: ResolvedUnion, value: Any, path: str) -> Any:
    if isinstance(value, UnknownVariant) or isinstance(value, msgspec.Struct):
        return value
    tag = value.get(union.tag_field) if union.tag_field and isinstance(value, dict) else None
    if tag is not None and tag in union.tagged:
        return _build(union.tagged[tag], value, path)
    if tag is not None and union.unknown is not None:
        # A tag this SDK does not know names a variant it has never seen: keep the raw object
        # (never squeeze it into the default variant, which would drop its fields). Only a
        # missing tag selects the schema's default (untagged) variant.
        if not isinstance(tag, str):
            raise _error(f"Expected `str`, got `{_json_type(tag)}`", f"{path}.{union.tag_field}")
        return union.unknown(value)
    error: msgspec.ValidationError | None = None
    for variant in union.untagged:
        try:
            return _build(variant, value, path)
        except msgspec.ValidationError as exc:
            error = error or exc
    if union.unknown is not None and isinstance(tag, str):
        return union.unknown(value)
    if error is not None:
        raise error
    raise _error(f"Expected `object`, got `{_json_type(value)}`", path)
