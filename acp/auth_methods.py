"""An agent's ``authMethods`` as the command line reads and shows them (``acp chat``, ``acp
exec``), and the refusal that asks for one."""

from __future__ import annotations

from typing import Any

from . import schema
from .errors import AUTH_REQUIRED, RequestError

__all__ = ["auth_field", "auth_method_lines", "env_vars", "is_auth_required"]


def is_auth_required(exc: BaseException) -> bool:
    """Whether ``exc`` is the agent's ``auth_required`` (-32000) refusal."""
    return isinstance(exc, RequestError) and exc.code == AUTH_REQUIRED


def auth_field(method: Any, name: str) -> Any:
    """``name`` of an auth method (a typed one, or a dict of a kind this SDK does not know);
    ``type`` is ``agent`` when the method does not say."""
    if isinstance(method, dict):
        return method.get(name) if name != "type" else method.get("type", "agent")
    if name == "type":
        return "terminal" if isinstance(method, schema.AuthMethodTerminal) else "agent"
    return getattr(method, name, None)


def env_vars(method: Any) -> list[dict[str, Any]]:
    """The variables an ``env_var`` method names."""
    found = method.get("vars") if isinstance(method, dict) else None
    return [v for v in found if isinstance(v, dict)] if isinstance(found, list) else []


def auth_method_lines(method: Any) -> list[str]:
    """How the command line shows one of the agent's ``authMethods`` (lines to indent)."""
    kind = auth_field(method, "type")
    description = auth_field(method, "description")
    head = f"{auth_field(method, 'id')}  {auth_field(method, 'name')}"
    if kind != "agent":
        head += f" ({kind})"
    lines = [head + (f": {description}" if description else "")]
    if kind == "env_var":
        for var in env_vars(method):
            notes = [str(var["label"])] if var.get("label") else []
            notes += [n for n, on in (("secret", var.get("secret")), ("optional", var.get("optional"))) if on]
            extra = f" ({', '.join(notes)})" if notes else ""
            lines.append(f"    set {var.get('name')}{extra} in the agent's environment")
        if isinstance(method, dict) and method.get("link"):
            lines.append(f"    get one at {method['link']}")
    elif kind == "terminal":
        args = " ".join(str(a) for a in auth_field(method, "args") or [])
        lines.append(f"    run the agent's command{' with ' + args if args else ''} in a terminal to sign in")
    return lines
