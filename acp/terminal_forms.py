"""An elicitation (``elicitation/create``) answered by a person at a terminal.

A form is asked field by field: each field shows its title, description, choices (numbered) and
default; what is typed is checked against the field's schema (type, bounds, length, choices) and
asked again with the reason when it does not fit. ``/decline`` and ``/cancel`` at any field
answer the whole request that way; end of input cancels. A URL elicitation shows the URL and
accepts once the user presses Enter. Everything the agent wrote is escaped before it is shown.

:func:`answer_elicitation` takes the two ends of the terminal as functions (read a line, write
text), so ``acp chat`` and the tests drive it alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import schema
from ._text import safe

__all__ = ["answer_elicitation"]

ReadLine = Callable[[str], "str | None"]
"""Shows a prompt and returns the line typed (None: end of input)."""

_SKIP = object()  # an optional field left empty: not in the content
_TRUE = ("y", "yes", "true", "1", "on")
_FALSE = ("n", "no", "false", "0", "off")


def answer_elicitation(
    request: schema.CreateElicitationRequest, read: ReadLine, write: Callable[[str], None]
) -> schema.CreateElicitationResponse:
    """Ask the user ``request`` (a form or a URL) and return their answer."""
    if isinstance(request, schema.CreateElicitationRequestUrl):
        write(f"[elicitation] {safe(request.message)}\n  open {safe(request.url)}\n")
        typed = read("press Enter once done there (or /decline, /cancel)> ")
        return _refusal(typed) or schema.CreateElicitationResponseAccept()
    if not isinstance(request, schema.CreateElicitationRequestForm):
        write(f"[elicitation] {safe(str(getattr(request, 'message', '')))}: a kind this client cannot show; declined\n")
        return schema.CreateElicitationResponseDecline()
    form = request.requested_schema
    required = set(form.required or ())
    write(f"[elicitation] {safe(request.message)} (/decline or /cancel refuses)\n")
    content: dict[str, Any] = {}
    for name, field in (form.properties or {}).items():
        write(_describe(name, field, name in required))
        while True:
            typed = read(f"  {safe(name)}> ")
            refusal = _refusal(typed)
            if refusal is not None:
                return refusal
            assert typed is not None
            value = _value(field, typed.strip(), name in required)
            if isinstance(value, _Problem):
                write(f"  {value.text}\n")
                continue
            if value is not _SKIP:
                content[name] = value
            break
    return schema.CreateElicitationResponseAccept(content=content)


class _Problem:
    def __init__(self, text: str) -> None:
        self.text = text


def _refusal(typed: str | None) -> schema.CreateElicitationResponse | None:
    if typed is None or typed.strip() == "/cancel":
        return schema.CreateElicitationResponseCancel()
    if typed.strip() == "/decline":
        return schema.CreateElicitationResponseDecline()
    return None


def _choices(field: Any) -> list[tuple[str, str]]:
    """(value, label) of each choice a string or multi-select field offers."""
    source = getattr(field, "items", None) if isinstance(field, schema.MultiSelectPropertySchema) else field
    enum = getattr(source, "enum", None)
    if enum:
        return [(str(v), str(v)) for v in enum]
    options = getattr(source, "one_of", None) or getattr(source, "any_of", None) or []
    return [(str(o.const), str(o.title or o.const)) for o in options]


def _kind(field: Any) -> str:
    if isinstance(field, schema.BooleanPropertySchema):
        return "yes/no"
    if isinstance(field, schema.IntegerPropertySchema):
        return "a whole number"
    if isinstance(field, schema.NumberPropertySchema):
        return "a number"
    if isinstance(field, schema.MultiSelectPropertySchema):
        return "choices separated by commas"
    return "one of the choices" if _choices(field) else "text"


def _describe(name: str, field: Any, required: bool) -> str:
    """The lines shown before a field is asked."""
    title = getattr(field, "title", None) or name
    head = f"  {safe(str(title))} ({_kind(field)}{', required' if required else ', optional'})"
    description = getattr(field, "description", None)
    if description:
        head += f": {safe(str(description))}"
    lines = [head]
    choices = _choices(field)
    for number, (value, label) in enumerate(choices, 1):
        lines.append(f"    {number}. {safe(label)}" + (f" ({safe(value)})" if label != value else ""))
    low, high = getattr(field, "minimum", None), getattr(field, "maximum", None)
    if low is not None or high is not None:
        lines.append(f"    from {'-' if low is None else low} to {'-' if high is None else high}")
    default = getattr(field, "default", None)
    if default is not None:
        lines.append(f"    empty: {safe(str(default))}")
    return "\n".join(lines) + "\n"


def _pick(choices: list[tuple[str, str]], typed: str) -> str | None:
    """The value of the choice ``typed`` names (its number, value or label), or None."""
    if typed.isdigit() and 1 <= int(typed) <= len(choices):
        return choices[int(typed) - 1][0]
    return next((value for value, label in choices if typed in (value, label)), None)


def _value(field: Any, typed: str, required: bool) -> Any:
    """What ``typed`` means for ``field``: a value, _SKIP, or a _Problem to show."""
    if not typed:
        default = getattr(field, "default", None)
        if default is not None:
            return default
        return _Problem("this field is required (or /decline, /cancel)") if required else _SKIP
    if isinstance(field, schema.BooleanPropertySchema):
        if typed.lower() in _TRUE:
            return True
        if typed.lower() in _FALSE:
            return False
        return _Problem("please answer yes or no")
    if isinstance(field, (schema.IntegerPropertySchema, schema.NumberPropertySchema)):
        integer = isinstance(field, schema.IntegerPropertySchema)
        try:
            number: float = int(typed) if integer else float(typed)
        except ValueError:
            return _Problem(f"please type {_kind(field)}")
        if field.minimum is not None and number < field.minimum:
            return _Problem(f"at least {field.minimum}")
        if field.maximum is not None and number > field.maximum:
            return _Problem(f"at most {field.maximum}")
        return number
    choices = _choices(field)
    if isinstance(field, schema.MultiSelectPropertySchema):
        picked = [_pick(choices, part.strip()) for part in typed.split(",") if part.strip()]
        if None in picked:
            return _Problem("please pick from the numbered choices")
        if field.min_items is not None and len(picked) < field.min_items:
            return _Problem(f"pick at least {field.min_items}")
        if field.max_items is not None and len(picked) > field.max_items:
            return _Problem(f"pick at most {field.max_items}")
        return picked
    if choices:
        value = _pick(choices, typed)
        return value if value is not None else _Problem("please pick one of the numbered choices")
    min_length, max_length = getattr(field, "min_length", None), getattr(field, "max_length", None)
    if min_length is not None and len(typed) < min_length:
        return _Problem(f"at least {min_length} characters")
    if max_length is not None and len(typed) > max_length:
        return _Problem(f"at most {max_length} characters")
    return typed
